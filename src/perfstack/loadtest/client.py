"""One streamed request to an OpenAI-compatible server, timed as the user would feel it.

The server-sent event stream is read line by line as it arrives; each ``data:`` line holding generated
text is one arrival. TTFT is the send-to-first-text time, ITL the gaps between later arrivals (a chunk
that carries several tokens is one gap, as in vLLM's benchmark). Everything the server sends is
untrusted: a bad line, an error object, a cut connection or silence ends the request with a counted
error kind, never an exception out of here.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

import aiohttp
import msgspec

from perfstack.loadtest.record import Request

DETAIL_MAX = 200


class Chunk(msgspec.Struct):
    """The fields of a streamed completion chunk that matter here (the rest is skipped unread)."""

    choices: Optional[list] = None
    usage: Optional[dict] = None
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


def _one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text[:DETAIL_MAX]


class Failed(Exception):
    def __init__(self, kind: str, detail: str = ""):
        super().__init__(kind)
        self.kind, self.detail = kind, _one_line(detail)


async def _consume(resp: aiohttp.ClientResponse, rec: Request, t0: float, stall_s: float) -> None:
    last: Optional[float] = None
    chunks = 0
    usage: Optional[dict] = None
    done = False
    while True:
        try:
            # the read deadline is the session's sock_read timeout: a timer per line would cost more than the line
            line = await resp.content.readline()
        except aiohttp.ServerTimeoutError:
            raise Failed("stall", f"no data for {stall_s:g} s") from None
        except ValueError as e:  # a line beyond aiohttp's buffer limit
            raise Failed("bad-stream", str(e)) from None
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError) as e:
            raise Failed("disconnect", f"{type(e).__name__}: {e}") from None
        if not line:
            break  # end of body
        now = time.perf_counter()
        line = line.strip()
        if not line or line.startswith(b":") or not line.startswith(b"data:"):
            continue  # blank separators, comments, event:/id:/retry: fields
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            break
        try:
            c = _decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise Failed("bad-stream", f"not a JSON chunk: {payload[:80]!r}") from None
        if c.error is not None:
            raise Failed("server-error", f"error in stream: {c.error}")
        if isinstance(c.usage, dict):
            usage = c.usage
        if chunk_text(c):
            if last is None:
                rec.ttft_ms = (now - t0) * 1e3
            else:
                rec.itl_ms.append((now - last) * 1e3)
            last = now
            chunks += 1
    rec.e2e_ms = (time.perf_counter() - t0) * 1e3
    if not done and chunks == 0:
        raise Failed("bad-stream", "the stream ended without text or [DONE]")
    if not done:
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


async def send(session: aiohttp.ClientSession, url: str, body: dict, headers: dict, t_level: float,
               timeout_s: float, stall_s: float, sink: list[Request], warmup: bool = False) -> Request:
    """POST one streaming request and time it. The record goes into ``sink`` before the request is
    sent, so that an interrupted run still holds it; errors are recorded in it, never raised (a
    cancellation marks it "interrupted" and propagates)."""
    t0 = time.perf_counter()
    rec = Request(start_s=t0 - t_level, warmup=warmup)
    sink.append(rec)
    try:
        async with asyncio.timeout(timeout_s) if hasattr(asyncio, "timeout") else _Deadline(timeout_s):
            async with session.post(url, json=body, headers=headers,
                                    timeout=aiohttp.ClientTimeout(total=None, connect=30, sock_read=stall_s)) as resp:
                if resp.status != 200:
                    text = await _body_head(resp)
                    kind = "http-429" if resp.status == 429 else f"http-{resp.status // 100}xx"
                    raise Failed(kind, f"HTTP {resp.status}: {text}")
                await _consume(resp, rec, t0, stall_s)
    except Failed as f:
        rec.error, rec.detail = f.kind, f.detail
    except aiohttp.ServerTimeoutError:
        rec.error, rec.detail = "stall", f"no answer for {stall_s:g} s"
    except asyncio.TimeoutError:
        rec.error, rec.detail = "timeout", f"no complete answer within {timeout_s:g} s"
    except aiohttp.ClientConnectorError as e:
        rec.error, rec.detail = "refused", _one_line(str(e))
    except (aiohttp.ClientError, ConnectionError, OSError) as e:
        rec.error, rec.detail = "disconnect", _one_line(f"{type(e).__name__}: {e}")
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
    return _one_line(raw.decode("utf-8", "replace"))


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
