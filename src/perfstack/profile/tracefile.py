"""Getting the events of a Chrome trace out of a file, however damaged: one buffer for the file
(an anonymous mmap, or a growing bytearray for gzip), msgspec splitting ``traceEvents`` into raw
per-event slices, and the recoveries: NaN / Infinity tokens patched in place, a truncated file or
gzip stream cut back to its last whole event, and the standard-library decoder event by event as
a last resort. ``trace.py`` turns the slices into typed records."""

from __future__ import annotations

import io
import json
import mmap
import os
import re
import stat
import zlib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

import msgspec
from msgspec import Raw

from perfstack.errors import InputError

HINT = "perfstack reads torch.profiler (Kineto) Chrome traces: prof.export_chrome_trace(path) or " \
       "torch.profiler.tensorboard_trace_handler(dir) write them"

_NULL = Raw(b"null")  # the default of an absent raw field (one shared object)
_ERRORS = (ValueError, msgspec.MsgspecError, RecursionError, OverflowError)
_NONWS = re.compile(rb"[^ \t\r\n]")
_BAD = object()  # an event that is not JSON at all

_HEAD_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds",
              "float32_matmul_precision", "allow_tf32", "torch_version", "record_shapes", "metadata", "perfstack")


class _Doc(msgspec.Struct):
    traceEvents: Optional[List[Raw]] = None
    schemaVersion: Raw = _NULL
    deviceProperties: Raw = _NULL
    distributedInfo: Raw = _NULL
    baseTimeNanoseconds: Raw = _NULL
    float32_matmul_precision: Raw = _NULL
    allow_tf32: Raw = _NULL
    torch_version: Raw = _NULL
    record_shapes: Raw = _NULL
    metadata: Raw = _NULL
    perfstack: Raw = _NULL


_TOP = msgspec.json.Decoder(Union[_Doc, List[Raw]])
_ANY = msgspec.json.Decoder()
_KEYS = msgspec.json.Decoder(Dict[str, Raw])
_BYTE = re.compile(r"\(byte (\d+)\)")
_EVENTS_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
_AFTER_EVENT = re.compile(rb"[ \t\r\n]*(?:[,\]]|\Z)")
_NONFINITE_VALUE = re.compile(rb"[:,\[][ \t\r\n]*(-?(?:NaN|Infinity))(?=[ \t\r\n]*[,\]}])")
_MAX_PATCHES = 16  # NaN / Infinity tokens patched in place before the stdlib decoder takes over
_MAX_CUTS = 64  # candidate cut points tried on a truncated file
Buffer = Union[mmap.mmap, bytearray]  # a trace's text, writable (a cut document is closed in place)
_SPARE = 16  # whitespace after the text: room to close a cut document in place
MAX_TRACE_GIB = 2.0  # the largest trace text read, after decompression (see max_trace_bytes)
LIMIT_ENV = "PERFSTACK_MAX_TRACE_GIB"


def max_trace_bytes() -> int:
    """The largest trace text read, after decompression: MAX_TRACE_GIB GiB unless the environment
    sets PERFSTACK_MAX_TRACE_GIB. It bounds the memory a file from elsewhere can take (a 4 MB gzip
    bomb expands to 4 GiB) while leaving room for real traces: 1 GB reads in about 1.5 GiB."""
    value = os.environ.get(LIMIT_ENV, "")
    try:
        gib = float(value) if value else MAX_TRACE_GIB
    except ValueError:
        raise InputError(f"{LIMIT_ENV}={value!r} is not a number of GiB") from None
    return int(gib * (1 << 30))


def _too_large(p: Path, what: str, limit: int) -> InputError:
    return InputError(f"trace file {p} {what} more than {limit / (1 << 30):.3g} GiB, the limit for one trace",
                      hint=f"profile fewer steps per trace (schedule active=...), or raise the limit with "
                           f"{LIMIT_ENV}=GIB if this machine has the memory (about 1.5x the size)")


def _open_regular(p: Path) -> tuple[io.FileIO, os.stat_result]:
    """The file opened for reading, refused unless it is a regular file: a FIFO would block the
    open itself and a device (/dev/zero) never ends. O_NONBLOCK lets a FIFO be opened to be refused."""
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"trace file {p} is not a regular file (a pipe, socket or device)",
                             hint="save the trace to a file first")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0), st
    except BaseException:
        os.close(fd)
        raise


def _read(p: Path) -> tuple[Any, list[str]]:
    """The file's bytes in one writable buffer (an anonymous mmap of the text's size, filled by
    the kernel or by decompression), and warnings. Only regular files, at most max_trace_bytes()."""
    warnings: list[str] = []
    limit = max_trace_bytes()
    try:
        f, st = _open_regular(p)
        with f:
            magic = f.read(2)
            f.seek(0)
            if magic == b"\x1f\x8b":
                return _gunzip(p, f, warnings, limit), warnings
            if p.name.endswith(".gz"):
                raise InputError(f"trace file {p} ends in .gz but is not gzip-compressed",
                                 hint="rename it to .json if it is plain JSON, or re-export the trace")
            size = st.st_size
            if size > limit:
                raise _too_large(p, "holds", limit)
            # pages are zero-filled by the kernel on first touch; the spare tail is whitespace, room to
            # close a cut document in place
            buf = _alloc(size + _SPARE)
            got = 0
            with memoryview(buf) as mv:
                while got < size:
                    n = f.readinto(mv[got:size])
                    if not n:
                        break
                    got += n
            buf[got:] = b" " * (len(buf) - got)
            # Bytes appended while it was read are not part of what was measured: left out.
            if f.read(1):
                warnings.append(f"{p.name} grew while it was read; analysed its first {size} bytes")
            return buf, warnings
    except FileNotFoundError:
        raise InputError(f"trace file {p} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{p} is a directory, not a trace file",
                         hint="give the .pt.trace.json(.gz) files inside it, e.g. DIR/*.pt.trace.json*") from None
    except MemoryError:
        raise InputError(f"trace file {p} does not fit in memory") from None
    except OSError as e:
        raise InputError(f"cannot read trace file {p}: {e.strerror or e}") from None


def _alloc(n: int) -> Buffer:
    """n writable bytes: private anonymous memory, faulted in at once where the OS offers that."""
    try:
        if hasattr(mmap, "MAP_PRIVATE"):
            return mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0))
        return mmap.mmap(-1, n)
    except (OSError, ValueError, TypeError):
        return bytearray(n)


def _inflate(f: io.FileIO, state: dict[str, Any]) -> Iterator[bytes]:
    """The decompressed chunks of a gzip file (at most 4 MiB each: zlib's output buffer for a
    chunk grows to several times its size, so small chunks keep a bomb's count cheap); concatenated members are read
    in turn, bytes after the last member are ignored; ``state["problem"]`` says why the stream
    stopped early (corrupt, truncated), None when it ended cleanly."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
    state["problem"] = None
    try:
        while True:
            if not pending:
                pending = f.read(1 << 20)
                if not pending:
                    break
            if d.eof:  # another member, or padding after the last one
                if len(pending) < 2:
                    more = f.read(1 << 20)
                    if more:
                        pending += more
                        continue
                if not pending.startswith(b"\x1f\x8b"):
                    break
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            chunk = d.decompress(pending, 1 << 22)
            pending = d.unused_data if d.eof else d.unconsumed_tail
            if chunk:
                yield chunk
    except zlib.error as e:
        state["problem"] = f"corrupt ({e})"
    if state["problem"] is None and not d.eof:
        state["problem"] = "truncated"


def _gunzip(p: Path, f: io.FileIO, warnings: list[str], limit: int) -> Buffer:
    """Decompress in two passes: the first only counts, so a decompression bomb is refused with
    almost no memory; the second fills a buffer of exactly the counted size (never the compressed
    file and the whole text at once, never a growing copy). A cut or corrupt stream keeps what
    came before."""
    state: dict[str, Any] = {}
    size = 0
    for chunk in _inflate(f, state):
        size += len(chunk)
        if size > limit:
            raise _too_large(p, "decompresses to", limit)
    problem = state["problem"]
    if problem is not None:
        if not size:
            what = "truncated gzip file with nothing readable" if problem == "truncated" \
                else f"corrupt gzip file ({problem[9:-1]})"
            raise InputError(f"trace file {p} is a {what}") from None
        warnings.append(f"{p.name}: gzip stream is {problem}; analysed the part that was readable")
    f.seek(0)
    buf = _alloc(size + _SPARE)
    got = 0
    for chunk in _inflate(f, {}):
        n = min(len(chunk), size - got)  # the file changed between the passes: keep what was counted
        buf[got:got + n] = chunk[:n]
        got += n
        if got >= size:
            break
    buf[got:] = b" " * (len(buf) - got)
    return buf


# --- the document -------------------------------------------------------------------------------

def _generic(raw: Any) -> Any:
    """A JSON value decoded to Python objects; what msgspec refuses (a number beyond a double, invalid
    UTF-8) is read by the standard library instead; _BAD when neither can."""
    try:
        return _ANY.decode(raw)
    except _ERRORS:
        pass
    try:
        return json.loads(bytes(raw).decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return _BAD


def _decode(p: Path, buf: Buffer, first: int, warnings: list[str]) -> tuple[dict, Any]:
    """(the metadata that is used, the events: a list of raw slices of buf or, on the stdlib path,
    an iterator of objects)."""
    top = _decode_top(p, buf, first, warnings)
    if top is None:
        return _stdlib(p, buf, warnings)
    if isinstance(top, list):
        return {}, top
    if top.traceEvents is None:
        _not_a_trace(p, buf)
    head = {}
    for k in _HEAD_KEYS:
        raw = getattr(top, k)
        if raw is not _NULL:
            v = _generic(raw)
            if v is not _BAD:
                head[k] = v
    return head, top.traceEvents


def _decode_top(p: Path, buf: Buffer, first: int, warnings: list[str]) -> Any:
    """The document as msgspec decodes it, NaN and Infinity tokens patched in place and a document
    cut short salvaged; None where only the standard library can read it."""
    patches = 0
    bulk = False
    while True:
        try:
            return _TOP.decode(buf)
        except msgspec.ValidationError:
            _not_a_trace(p, buf)
        except RecursionError:
            raise InputError(f"trace file {p} is nested too deeply to be a trace") from None
        except UnicodeDecodeError:
            return None
        except msgspec.DecodeError as e:
            msg = str(e)
            m = _BYTE.search(msg)
            pos = int(m.group(1)) if m else None
            if pos is None or "invalid character" not in msg or not _nonfinite(buf, pos, patch=False):
                return _salvage(p, buf, first, msg, pos, warnings)
            if patches >= _MAX_PATCHES:
                if bulk:
                    return None
                # many of them (a writer that emits NaN for some field of every event): patch every
                # such token that stands where a value does, then go on one at a time
                for t in _NONFINITE_VALUE.finditer(buf, pos):
                    buf[t.start(1):t.end(1)] = b"[]" + b" " * (t.end(1) - t.start(1) - 2)
                bulk, patches = True, 0
            _nonfinite(buf, pos, patch=True)
            patches += 1


def _nonfinite(buf: Buffer, pos: int, patch: bool) -> bool:
    """Is a NaN / Infinity / -Infinity token at pos (where msgspec stopped)? With patch, overwrite it
    in place with ``[]`` and spaces: a value that is neither a number nor a string, so the event
    (or argument) holding it is judged unusable the way a NaN is."""
    if buf[pos:pos + 3] == b"NaN":
        n = 3
    elif buf[pos:pos + 8] == b"Infinity":
        n = 8
    else:
        return False
    if pos and buf[pos - 1] == 0x2D:  # '-'
        pos, n = pos - 1, n + 1
    if patch:
        buf[pos:pos + n] = b"[]" + b" " * (n - 2)
    return True


def _not_a_trace(p: Path, buf: Buffer) -> None:
    try:
        keys = list(_KEYS.decode(buf))
    except _ERRORS:
        keys = None
    nsys = keys is not None and any(k.lower().startswith(("nsys", "cupti", "target")) for k in keys)
    raise InputError(f"{p} is not a {'nsys export' if nsys else 'Chrome trace'} with traceEvents", hint=HINT) from None


def _where(buf: Buffer, msg: str, pos: int | None) -> str:
    what = msg.split(": ", 1)[-1]
    what = _BYTE.sub("", what).strip()
    if pos is None:
        return "it ends in the middle of the document" if "truncated" in msg else what
    line = 1
    with memoryview(buf) as mv:
        for i in range(0, pos, 1 << 24):
            line += bytes(mv[i:min(pos, i + (1 << 24))]).count(b"\n")
    return f"line {line}: {what}"


def _salvage(p: Path, buf: Buffer, first: int, msg: str, pos: int | None,
             warnings: list[str]) -> Any:
    """A document cut short or broken at pos: decode it up to the last whole event before the
    problem, closing the event list there (in place). None when that does not work out."""
    where = _where(buf, msg, pos)
    if pos is not None and "trailing characters" in msg:
        end = pos - 1
        mv = memoryview(buf)
        part = mv[:end]
        try:
            top = _TOP.decode(part)
        except _ERRORS:
            part.release()
            mv.release()
        else:
            warnings.append(f"{p.name}: ignored what follows the end of the JSON document ({where})")
            return top
    if buf[first] == 0x5B:  # '['
        start, close = first + 1, b"]"
    else:
        m = _EVENTS_KEY.search(buf)
        if not m:
            raise InputError(f"trace file {p} is not valid JSON ({where})", hint=HINT)
        start, close = m.end(), b"]}"
    limit = len(buf) if pos is None else min(pos, len(buf))
    hi, tries = limit, 0
    while tries < _MAX_CUTS:
        j = buf.rfind(b"}", start, hi)
        if j < 0:
            raise InputError(f"trace file {p} is not valid JSON ({where})", hint=HINT)
        hi = j
        c = j + 1
        if not _AFTER_EVENT.match(buf, c, limit):
            continue  # a '}' that does not end an element of the event list
        tries += 1
        saved = bytes(buf[c:c + len(close)])
        buf[c:c + len(close)] = close
        mv = memoryview(buf)
        part = mv[:c + len(close)]
        try:
            top = _TOP.decode(part)
        except _ERRORS:
            part.release()
            mv.release()
            buf[c:c + len(close)] = saved
            continue
        n = len(top) if isinstance(top, list) else len(top.traceEvents or ())
        if not n:
            raise InputError(f"trace file {p} is not valid JSON ({where})", hint=HINT)
        warnings.append(f"{p.name} is not valid JSON ({where}): the file looks truncated; "
                        f"analysed the {n} events before the cut")
        return top
    return None


def _stdlib(p: Path, buf: Buffer, warnings: list[str]) -> tuple[dict, Any]:
    """The slow way, for what msgspec will not read (NaN tokens everywhere, invalid UTF-8 outside
    the events): the standard library's decoder, one event at a time, up to the first event that
    does not parse. The events come as an iterator, built into records as they are read."""
    text = str(memoryview(buf), "utf-8", "replace")
    i = _skip_ws(text, 0)
    head: dict = {}
    if text.startswith("[", i):
        start = i + 1
    else:
        m = re.search(r'"traceEvents"\s*:\s*\[', text)
        if not m or not text.startswith("{", i):
            try:
                doc = json.loads(text)
            except RecursionError:
                raise InputError(f"trace file {p} is nested too deeply to be a trace") from None
            except ValueError as e:
                line = getattr(e, "lineno", None)
                raise InputError(f"trace file {p} is not valid JSON" + (f" (line {line}: {getattr(e, 'msg', e)})" if line else ""),
                                 hint=HINT) from None
            nsys = isinstance(doc, dict) and any(str(k).lower().startswith(("nsys", "cupti", "target")) for k in doc)
            raise InputError(f"{p} is not a {'nsys export' if nsys else 'Chrome trace'} with traceEvents", hint=HINT)
        start = m.end()
        pre = text[:m.start()].rstrip().rstrip(",") + "}"
        try:
            h = json.loads(pre)
        except (ValueError, RecursionError):
            h = {}
        if isinstance(h, dict):
            head = {k: h[k] for k in _HEAD_KEYS if k in h}
    first = _next_event(text, start)
    if isinstance(first[0], str):
        raise InputError(f"trace file {p} is not valid JSON ({first[0]})", hint=HINT)
    return head, _stdlib_events(p, text, first, warnings)


_DECODER = json.JSONDecoder()  # one for every event: building it per call costs more than the parse


def _next_event(text: str, i: int, dec: json.JSONDecoder = _DECODER) -> tuple[Any, int]:
    """(the event at i, where the next one starts); (None, -1) at the end of the list; (why, -1)
    where it stops parsing."""
    n = len(text)
    while True:
        i = _skip_ws(text, i)
        if i < n and text[i] == ",":
            i += 1
            continue
        break
    if i >= n:
        return "it ends in the middle of the document", -1
    if text[i] == "]":
        return None, -1
    try:
        return dec.raw_decode(text, i)
    except RecursionError:
        return "an event is nested too deeply", -1
    except ValueError as e:
        return f"line {getattr(e, 'lineno', '?')}: {getattr(e, 'msg', e)}", -1


def _stdlib_events(p: Path, text: str, first: tuple, warnings: list[str]) -> Iterator[Any]:
    obj, i = first
    n = 0
    while i >= 0:
        n += 1
        yield obj
        obj, i = _next_event(text, i)
    if obj is not None:
        warnings.append(f"{p.name} is not valid JSON ({obj}): the file looks truncated; "
                        f"analysed the {n} events before the cut")


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    return i
