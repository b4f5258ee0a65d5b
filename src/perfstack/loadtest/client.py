"""One streamed request to an OpenAI-compatible server, timed as the user would feel it.

The server-sent event stream is timed as it arrives (each piece of bytes when the event loop reads it from
the socket, before any parsing) and parsed after; each ``data:`` line holding generated text is one arrival. TTFT is the send-to-first-text time, ITL the gaps between later arrivals (a chunk
that carries several tokens is one gap, as in vLLM's benchmark). Everything the server sends is
untrusted: a bad line, an error object, a cut connection or silence ends the request with a counted
error kind, never an exception out of here. What one request may keep is bounded: its bytes (a request over
the bound is an error of its own kind, "oversize"), its text chunks (no more than its max_tokens allows: the
gaps list cannot grow past that), its encoding (only what it asked for: identity), and any text from the
server kept in the record (a short excerpt, scrubbed of the request's own credentials and of anything
that looks like one).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

import aiohttp
import msgspec

from perfstack import redact
from perfstack.records.loadtest import Request
from perfstack.loadtest.vocabulary import Api

DETAIL_MAX = 200  # characters of server text a record keeps
RAW_MAX = 4096  # characters of server text held before it is scrubbed and cut (a secret cut in half is not found)
BYTES_PER_TOKEN = 16 << 10  # a chunk with logprobs of 20 alternatives is ~2-4 KiB; beyond 16 KiB a token is not a chunk
BYTES_MIN = 4 << 20
CHUNKS_SLACK = 64  # text chunks beyond max_tokens a server may send (a role or reasoning chunk, a split token)


@dataclass
class Target:
    """Where and how requests go; the same for every level of a run."""

    url: str  # full endpoint URL
    api: Api
    model: str
    headers: dict[str, str]
    ignore_eos: bool = True
    usage: bool = True  # ask for usage in the last chunk (stream_options.include_usage)
    timeout_s: float = 600.0
    stall_s: float = 60.0
    metrics_url: Optional[str] = None


class Chunk(msgspec.Struct):
    """The fields of a streamed completion chunk that matter here (the rest is skipped unread)."""

    choices: Optional[list[Any]] = None
    usage: Optional[dict[str, Any]] = None
    error: Any = None


_decode = msgspec.json.Decoder(Chunk).decode


def chunk_text(c: Chunk) -> str:
    """Generated text in a chunk: chat deltas (content or reasoning) or completion text."""
    out = []
    for ch in c.choices or ():
        if not isinstance(ch, dict):
            continue
        delta = ch.get("delta")
        if isinstance(delta, dict):
            for key in ("content", "reasoning_content", "reasoning"):
                v = delta.get(key)
                if isinstance(v, str):
                    out.append(v)
        v = ch.get("text")
        if isinstance(v, str):
            out.append(v)
    return "".join(out)


def _int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 40 else None


def excerpt(text: Any, secrets: tuple[str, ...] = ()) -> str:
    """The one way text from a server is kept: on one line, without the request's own credentials
    (``secrets``: a server may echo the Authorization header), scrubbed of anything that looks like a
    credential, and cut to DETAIL_MAX characters."""
    line = " ".join(str(text)[:RAW_MAX].split())
    for s in secrets:
        if s:
            line = line.replace(s, redact.MASK)
    line = redact.text(line)
    return line[:DETAIL_MAX] + ("…" if len(line) > DETAIL_MAX else "")


def credentials(headers: dict[str, str]) -> tuple[str, ...]:
    """The values of a request's headers that a server must not see recorded back: each header value,
    and the token after an Authorization scheme (``Bearer KEY``: a server may echo the key alone)."""
    out = []
    for v in headers.values():
        v = str(v)
        out.append(v)
        parts = v.split(None, 1)
        if len(parts) == 2 and len(parts[1]) >= 4:
            out.append(parts[1])
    return tuple(sorted(out, key=len, reverse=True))


class Failed(Exception):
    def __init__(self, kind: str, detail: str = ""):
        super().__init__(kind)
        self.kind, self.detail = kind, " ".join(str(detail)[:RAW_MAX].split())


class _TapReader(aiohttp.StreamReader):
    """aiohttp's StreamReader with the bytes taken as they arrive, each piece with its arrival time.

    A response's reader becomes one of these while its stream is read (``__class__`` is swapped: the
    layout is the same). ``feed_data`` runs in the protocol's callback, the moment the event loop reads the
    socket, so the time stamped there does not wait for the reading task's turn in the loop; the task is
    woken only at the end of the stream, at ``[DONE]``, or once per ``_Tap.WAKE`` pieces, and parses them
    then, off the path that stamps arrivals."""

    __slots__ = ()

    def feed_data(self, data: bytes, size: int = 0) -> bool:
        if data:
            tap = _TAPS[id(self)]
            tap.pieces.append((_clock(), data))
            if tap.waiter is not None and (len(tap.pieces) >= _Tap.WAKE or b"[DONE]" in data):
                tap.wake()
        return False

    def begin_http_chunk_receiving(self) -> None:  # HTTP chunk boundaries mean nothing to SSE
        pass

    def end_http_chunk_receiving(self) -> None:
        pass

    def feed_eof(self) -> None:
        tap = _TAPS.get(id(self))
        if tap is not None:
            tap.t_end = _clock()
        super().feed_eof()
        if tap is not None:
            tap.wake()

    def set_exception(self, exc: BaseException, *args: Any) -> None:
        super().set_exception(exc, *args)
        tap = _TAPS.get(id(self))
        if tap is not None:
            tap.wake()


_clock = time.perf_counter
_TAPS: dict[int, "_Tap"] = {}
LINE_MAX = 1 << 17  # aiohttp's own limit on a line (twice its 64 KiB read buffer)


class _Tap:
    WAKE = 64  # pieces held before the reading task parses them: bounded memory, ~0.2 ms of parsing at a time

    __slots__ = ("pieces", "waiter", "t_end")

    def __init__(self) -> None:
        self.pieces: list[tuple[float, bytes]] = []
        self.waiter: Optional[asyncio.Future[None]] = None
        self.t_end: Optional[float] = None

    def wake(self) -> None:
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)


class _Stream:
    """The state of one stream's parsing: lines are split and decoded here, in arrival order, each
    complete line timed by the arrival of the piece that completed it."""

    __slots__ = ("rec", "t0", "last", "chunks", "usage", "done", "t_done", "tail", "bytes", "max_bytes", "max_chunks")

    def __init__(self, rec: Request, t0: float, max_tokens: int = 0):
        self.rec, self.t0 = rec, t0
        self.bytes = 0
        self.max_bytes = max(BYTES_MIN, max_tokens * BYTES_PER_TOKEN)
        self.max_chunks = max_tokens + CHUNKS_SLACK if max_tokens > 0 else 1 << 20
        self.last: Optional[float] = None
        self.chunks = 0
        self.usage: Optional[dict[str, Any]] = None
        self.done = False
        self.t_done: Optional[float] = None
        self.tail = b""

    def feed(self, pieces: list[tuple[float, bytes]]) -> bool:
        """Parse pieces; True once [DONE] is read."""
        for now, data in pieces:
            self.bytes += len(data)
            if self.bytes > self.max_bytes:
                raise Failed("oversize", f"more than {self.max_bytes >> 20} MiB streamed for one request")
            buf = self.tail + data if self.tail else data
            lines = buf.split(b"\n")
            self.tail = lines.pop()
            if len(self.tail) > LINE_MAX:
                raise Failed("bad-stream", f"a line longer than {LINE_MAX} bytes")
            for line in lines:
                if self.line(now, line):
                    return True
        return False

    def line(self, now: float, line: bytes) -> bool:
        line = line.strip()
        if not line or not line.startswith(b"data:"):
            return False  # blank separators, comments, event:/id:/retry: fields
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done, self.t_done = True, now
            return True
        try:
            c = _decode(payload)
            text = chunk_text(c)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):  # ValueError: invalid UTF-8
            raise Failed("bad-stream", f"not a JSON chunk: {payload[:80]!r}") from None
        if c.error is not None:
            raise Failed("server-error", f"error in stream: {str(c.error)[:RAW_MAX]}")
        if isinstance(c.usage, dict):
            self.usage = c.usage
        if text:
            if self.chunks >= self.max_chunks:
                raise Failed("oversize", f"more than {self.max_chunks} chunks of text for a request of "
                                         f"{self.max_chunks - CHUNKS_SLACK} tokens")
            if self.last is None:
                self.rec.ttft_ms = (now - self.t0) * 1e3
            else:
                self.rec.itl_ms.append((now - self.last) * 1e3)
            self.last = now
            self.chunks += 1
        return False


def _raise_read_error(e: BaseException, stall_s: float) -> None:
    if isinstance(e, aiohttp.ServerTimeoutError):
        raise Failed("stall", f"no data for {stall_s:g} s") from None
    if isinstance(e, (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError)):
        raise Failed("disconnect", f"{type(e).__name__}: {e}") from None
    raise e


async def _read_tapped(reader: aiohttp.StreamReader, st: _Stream, stall_s: float) -> Optional[float]:
    """Read the stream through a _TapReader; the time its body ended (None: not known)."""
    tap = _Tap()
    key = id(reader)
    _TAPS[key] = tap
    reader.__class__ = _TapReader
    loop = asyncio.get_running_loop()
    try:
        try:
            early = reader.read_nowait()  # what came with the headers, before the swap
        except Exception as e:  # noqa: BLE001 - an exception already set on the reader
            _raise_read_error(e, stall_s)
            raise
        if early:
            tap.pieces.append((_clock(), early))
        while True:
            if not tap.pieces and not reader.is_eof() and reader.exception() is None:
                tap.waiter = loop.create_future()
                try:
                    await tap.waiter
                except asyncio.CancelledError:
                    try:
                        st.feed(tap.pieces)  # an interrupted run keeps the gaps read so far
                    except Failed:
                        pass
                    raise
            pieces, tap.pieces = tap.pieces, []
            if st.feed(pieces):
                return st.t_done
            exc = reader.exception()
            if exc is not None:
                _raise_read_error(exc, stall_s)
            if reader.is_eof() and not tap.pieces:
                if st.tail:
                    st.feed([(tap.t_end or _clock(), b"\n")])
                return tap.t_end
    finally:
        tap.waiter = None
        if reader.__class__ is _TapReader:
            # typeshed declares object.__class__'s setter as taking type[Self], so once the check above has
            # narrowed reader to _TapReader it accepts no base class; the runtime takes any class of the same
            # layout, which aiohttp's own StreamReader is (_TapReader adds no slots)
            reader.__class__ = aiohttp.StreamReader  # type: ignore[assignment]
        _TAPS.pop(key, None)  # anything after [DONE] is dropped; aiohttp closes a connection left unread


async def _read_lines(resp: aiohttp.ClientResponse, st: _Stream, stall_s: float) -> Optional[float]:
    """The plain way (a reader of another class than aiohttp's own): line by line, timed as each is read."""
    while True:
        try:
            # the read deadline is the session's sock_read timeout: a timer per line would cost more than the line
            line = await resp.content.readline()
        except ValueError as e:  # a line beyond aiohttp's buffer limit
            raise Failed("bad-stream", str(e)) from None
        except (aiohttp.ServerTimeoutError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError,
                ConnectionError) as e:
            _raise_read_error(e, stall_s)
            raise
        now = _clock()
        if not line:
            return now  # end of body
        st.bytes += len(line)
        if st.bytes > st.max_bytes:
            raise Failed("oversize", f"more than {st.max_bytes >> 20} MiB streamed for one request")
        if st.line(now, line):
            return now


async def _consume(resp: aiohttp.ClientResponse, rec: Request, t0: float, stall_s: float, max_tokens: int) -> None:
    enc = resp.headers.get("Content-Encoding", "identity").strip().lower()
    if enc not in ("", "identity"):
        # asked for identity: a compressed stream would be inflated unbounded, in the event loop, and its
        # arrival times would be the decompressor's, not the server's
        raise Failed("bad-stream", f"Content-Encoding {enc}, which the client did not ask for")
    st = _Stream(rec, t0, max_tokens)
    if type(resp.content) is aiohttp.StreamReader:
        t_end = await _read_tapped(resp.content, st, stall_s)
    else:
        t_end = await _read_lines(resp, st, stall_s)
    rec.e2e_ms = ((t_end or _clock()) - t0) * 1e3
    chunks, usage = st.chunks, st.usage
    if not st.done and chunks == 0:
        raise Failed("bad-stream", "the stream ended without text or [DONE]")
    if not st.done:
        rec.detail = "stream ended without [DONE]"
    out = _int((usage or {}).get("completion_tokens"))
    inp = _int((usage or {}).get("prompt_tokens"))
    if out is not None and out >= chunks > 0:
        rec.output_tokens, rec.tokens_from = out, "usage"
    else:
        rec.output_tokens, rec.tokens_from = chunks, "chunks"
    if inp is not None:
        rec.input_tokens = inp
    if chunks == 0:
        raise Failed("empty", "the server streamed no text")


async def send(session: aiohttp.ClientSession, target: Target, body: dict[str, Any], t_level: float,
               sink: list[Request], warmup: bool = False,
               reader: Optional[Callable[..., Awaitable[None]]] = None) -> Request:
    """POST one streaming request to ``target`` and time it, within its deadlines. The record goes into ``sink`` before the request is
    sent, so that an interrupted run still holds it; errors are recorded in it, never raised (a
    cancellation marks it "interrupted" and propagates). ``reader`` reads an answer of another shape
    (an unstreamed one: ``embed.read``) with the same deadlines and error kinds."""
    url, headers, timeout_s, stall_s = target.url, target.headers, target.timeout_s, target.stall_s
    t0 = time.perf_counter()
    rec = Request(start_s=t0 - t_level, warmup=warmup)
    sink.append(rec)
    secrets = credentials(headers)
    max_tokens = body.get("max_tokens")
    max_tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else 0
    try:
        async with asyncio.timeout(timeout_s) if hasattr(asyncio, "timeout") else _Deadline(timeout_s):
            async with session.post(url, json=body, headers={**headers, "Accept-Encoding": "identity"},
                                    timeout=aiohttp.ClientTimeout(total=None, connect=30, sock_read=stall_s)) as resp:
                if resp.status != 200:
                    text = await _body_head(resp)
                    kind = "http-429" if resp.status == 429 else f"http-{resp.status // 100}xx"
                    raise Failed(kind, f"HTTP {resp.status}: {text}")
                await (reader or _consume)(resp, rec, t0, stall_s, max_tokens)
    except Failed as f:
        rec.error, rec.detail = f.kind, excerpt(f.detail, secrets)
    except aiohttp.ServerTimeoutError:
        rec.error, rec.detail = "stall", f"no answer for {stall_s:g} s"
    except asyncio.TimeoutError:
        rec.error, rec.detail = "timeout", f"no complete answer within {timeout_s:g} s"
    except aiohttp.ClientConnectorError as e:
        rec.error, rec.detail = "refused", excerpt(str(e), secrets)
    except (aiohttp.ClientError, ConnectionError, OSError) as e:
        rec.error, rec.detail = "disconnect", excerpt(f"{type(e).__name__}: {e}", secrets)
    except asyncio.CancelledError:
        rec.error, rec.detail = "interrupted", "the run was stopped before the answer ended"
        rec.e2e_ms = (time.perf_counter() - t0) * 1e3
        raise
    if rec.error and rec.e2e_ms is None:
        rec.e2e_ms = (time.perf_counter() - t0) * 1e3
    return rec


async def _body_head(resp: aiohttp.ClientResponse) -> str:
    try:
        raw = await asyncio.wait_for(resp.content.read(2048), 5)
    except Exception:  # the body of an error answer is only a hint
        return resp.reason or ""
    return " ".join(raw.decode("utf-8", "replace").split())


class _Deadline:
    """asyncio.timeout for Pythons before 3.11: cancel the current task after ``s`` seconds."""

    def __init__(self, s: float):
        self.s = s
        self.handle: Optional[asyncio.TimerHandle] = None
        self.fired = False

    async def __aenter__(self) -> "_Deadline":
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self.fired = True
            if task is not None:
                task.cancel()
        self.handle = loop.call_later(self.s, fire)
        return self

    async def __aexit__(self, et: Any, e: Any, tb: Any) -> bool:
        if self.handle:
            self.handle.cancel()
        if self.fired and et is asyncio.CancelledError:
            raise asyncio.TimeoutError
        return False
