"""Getting the events of a Chrome trace out of a file, however damaged, a batch at a time.

The text is read in pieces (a plain file, or a gzip stream as it decompresses), and the event list
is cut after an event every few MiB: each batch is decoded at once, typed, by the decoder the caller
gives (``trace.py``'s), so memory holds one batch of text and what is built from it, never the whole
document. A cut is only kept where the batch decodes as a whole list (a ``},{`` inside a string or a
nested object fails and the cut before it is tried). The recoveries work per batch: NaN / Infinity
tokens patched in place, a batch the typed decoder refuses decoded again as raw per-event slices, a
file or gzip stream cut short kept up to its last whole event, invalid UTF-8 replaced, and the
standard-library decoder event by event as a last resort (those value-level repairs are ``tracerepair``'s;
this module decides when each is tried). The keys around the event list (before or after it) are the
document's metadata."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Generator, Iterator, List, Literal, NoReturn, Optional, Union

import msgspec
from msgspec import Raw

from perfstack.errors import InputError
from perfstack.profile import tracerepair
from perfstack.profile.tracerepair import ERRORS, MAX_CUTS, RAWS
from perfstack.profile.tracetext import PIECE, nothing, pieces

HINT = "perfstack reads torch.profiler (Kineto) Chrome traces: prof.export_chrome_trace(path) or " \
       "torch.profiler.tensorboard_trace_handler(dir) write them"

_NULL = Raw(b"null")  # the default of an absent raw field (one shared object)
_NONWS = re.compile(rb"[^ \t\r\n]")
_NL = b"\n"

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
_KEYS = msgspec.json.Decoder(Dict[str, Raw])
_EVENTS_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
_CUT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")  # where one event ends and the next begins, likely
_MAX_HEADS = 16  # "traceEvents" keys tried before the document is read whole
_EMPTY_TAIL = b'{"traceEvents": []'  # what the text after the event list is read behind


# --- values -------------------------------------------------------------------------------------

def _decoded_doc(doc: bytearray) -> tuple[Any, bytearray]:
    """(a small document -- the metadata around the event list, or one that is not a trace --
    decoded, the text decoded): NaN / Infinity tokens patched in place and invalid UTF-8 replaced.
    Raises what msgspec raises for anything else."""
    patches = tracerepair.Patches()
    while True:
        try:
            return _TOP.decode(doc), doc
        except UnicodeDecodeError:
            doc = tracerepair.utf8(doc, len(doc))[0]
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as e:
            pos = tracerepair.position(str(e))
            if pos is None or "invalid character" not in str(e) or not tracerepair.nonfinite(doc, pos, patch=False) \
                    or not patches.patch(doc, pos, len(doc)):
                raise


def _line(p: Path, at: int) -> int:
    """The line of the text's byte at: counted by reading the file again, as only a message needs it."""
    n = seen = 0
    text = pieces(p, [])
    try:
        for piece in text:
            if seen + len(piece) >= at:
                return 1 + n + piece.count(_NL, 0, max(0, at - seen))
            n += piece.count(_NL)
            seen += len(piece)
    except InputError:
        pass
    finally:
        text.close()
    return 1 + n


# --- the document -------------------------------------------------------------------------------

_FALSE_CUT = object()  # a cut that does not end an event
# What a batch of events is: a list the typed decoder built, a list of per-event JSON slices, or a list of
# Python objects from the standard library's parser.
BatchKind = Literal["typed", "raw", "objects"]
_Batches = Generator[tuple[BatchKind, Any], None, Any]  # batches yielded, and what the reading came to
_MAX_RUN = 64 << 20  # text read on without finding an event's end before it is judged broken


class Events:
    """The events of one trace file: iterate for batches ``(kind, events)`` in file order, where
    kind is "typed" (a list the given decoder built), "raw" (a list of per-event JSON slices, for a
    batch the typed decoder refused, or every batch where no typed decoder is given) or "objects"
    (a list of Python objects, from the standard library). Then ``head`` holds the document's
    metadata, ``n_events`` the length of its event list, ``warnings`` what was recovered from.
    Unreadable input raises InputError naming the file."""

    def __init__(self, p: Path, typed: Optional[msgspec.json.Decoder[Any]],
                 text: Optional[Generator[bytes, None, None]] = None) -> None:
        self.p, self.typed, self.text = p, typed, text  # text: the file's, unless given (traceread's parts)
        self.head: dict[str, Any] = {}
        self.n_events = 0
        self.warnings: list[str] = []
        self.offset = 0  # where the current buffer's first byte is in the text
        self._pieces: Generator[bytes, None, None] = nothing()
        self._array = False  # the document is the event list itself

    def __iter__(self) -> Iterator[tuple[BatchKind, Any]]:
        self._pieces = pieces(self.p, self.warnings) if self.text is None else self.text
        try:
            start = self._start()
            if isinstance(start, list):
                self.n_events = len(start)
                yield "raw", start
            else:
                yield from self._events(start)
        except RecursionError:
            raise InputError(f"trace file {self.p} is nested too deeply to be a trace") from None
        finally:
            self._pieces.close()

    def _next(self) -> Optional[bytes]:
        return next(self._pieces, None)

    def _where(self, msg: str, pos: Optional[int]) -> str:
        """Where a decode error at the current buffer's byte pos is, for a message."""
        what = tracerepair.BYTE.sub("", msg.split(": ", 1)[-1]).strip()
        if pos is None:
            return "it ends in the middle of the document" if "truncated" in msg else what
        return f"line {_line(self.p, self.offset + pos)}: {what}"

    def _start(self) -> Union[bytearray, List[Raw]]:
        """The text from the event list's '[' on, the metadata before it kept; or, for a document
        whose event list is not where a trace has it, its events, read whole (_whole)."""
        while True:
            piece = self._next()
            if piece is None:
                raise InputError(f"trace file {self.p} is empty", hint=HINT)
            m = _NONWS.search(piece)
            if m:
                break
            self.offset += len(piece)
        self.offset += m.start()
        buf = bytearray(piece[m.start():])
        if buf[0] == 0x5B:  # '[': the document is the event list
            self._array = True
            return buf
        tried, frm = 0, 0
        while True:
            if buf[0] == 0x7B:  # '{'
                for m in _EVENTS_KEY.finditer(buf, frm):
                    frm = m.end()
                    tried += 1
                    if tried > _MAX_HEADS:
                        break
                    if self._head(buf, m.start()):
                        self.offset += m.end() - 1
                        return buf[m.end() - 1:]
                frm = max(frm, len(buf) - 64)
            piece = None if tried > _MAX_HEADS else self._next()
            if piece is None:
                return self._whole(buf)
            buf += piece

    def _head(self, buf: bytearray, key: int) -> bool:
        """Is the "traceEvents" key at ``key`` one of the document's own (what comes before it and an
        empty event list make a whole document)? If so, keep that document's metadata."""
        doc = bytearray(buf[:key])
        doc += b'"traceEvents": []}'
        try:
            top = _decoded_doc(doc)[0]
        except ERRORS:
            return False
        if not isinstance(top, _Doc):
            return False
        self._keep_head(top)
        return True

    def _keep_head(self, top: Any) -> None:
        for k in _HEAD_KEYS:
            raw = getattr(top, k)
            if raw is not _NULL:
                v = tracerepair.generic(raw)
                if v is not tracerepair.BAD:
                    self.head[k] = v

    def _whole(self, buf: bytearray) -> List[Raw]:
        """A document whose event list was not found where a trace has it: read whole (it is not a
        trace, or an odd one) to say what it is, or to take its events."""
        for piece in self._pieces:
            buf += piece
        try:
            top, buf = _decoded_doc(buf)
        except msgspec.ValidationError:
            _not_a_trace(self.p, buf)
        except msgspec.DecodeError as e:
            msg = str(e)
            pos = tracerepair.position(msg)
            where = self._where(msg, pos)
            if pos is None or "trailing characters" not in msg:
                raise InputError(f"trace file {self.p} is not valid JSON ({where})", hint=HINT) from None
            self.warnings.append(f"{self.p.name}: ignored what follows the end of the JSON document ({where})")
            return self._whole(buf[:pos - 1])
        if not isinstance(top, _Doc) or top.traceEvents is None:
            _not_a_trace(self.p, buf)
        self._keep_head(top)
        return top.traceEvents

    # --- the event list -------------------------------------------------------------------------

    def _events(self, buf: bytearray) -> _Batches:
        """Batches of events from buf (which starts with the list's '[') and the pieces after it."""
        eof = False
        while True:
            while not eof and len(buf) < PIECE:
                piece = self._next()
                if piece is None:
                    eof = True
                else:
                    buf += piece
            if eof:
                buf += b" " * 16  # room to close a cut list in place
                result = yield from self._batch(buf, len(buf), close=False)
                if result is None:  # the list and the text end together
                    self._tail(buf, len(buf))
                elif result is _FALSE_CUT:  # the list does not end: cut short
                    yield from self._broken(buf, len(buf), "Input data was truncated", None)
                return
            rest = yield from self._cut(buf)
            if rest is True:
                return
            if rest is not None:
                buf = rest
                continue
            if len(buf) > _MAX_RUN:  # no event ends where the next begins: not a trace's list
                result = yield from self._batch(buf, len(buf), close=False)
                if result is None:  # it did end, and the list with it
                    self._tail(buf, len(buf))
                elif result is _FALSE_CUT:
                    yield from self._broken(buf, len(buf), f"no event ends within {_MAX_RUN / (1 << 20):g} MiB",
                                            None)
                return
            # an event longer than what is read: read as much again (a long event costs a few tries)
            want = 2 * len(buf)
            while not eof and len(buf) < want:
                piece = self._next()
                if piece is None:
                    eof = True
                else:
                    buf += piece

    def _cut(self, buf: bytearray) -> _Batches:
        """One batch: buf up to its last cut that decodes as a whole list. Returns the text left
        (with a '[' before it), True when the event list (or what is readable of it) ended, None
        when no cut worked."""
        hi, tries = len(buf), 0
        while tries < MAX_CUTS:
            j = buf.rfind(b"}", 1, hi)
            if j < 0:
                return None
            hi = j
            m = _CUT.match(buf, j)
            if not m:
                continue
            tries += 1
            comma = buf.index(b",", j, m.end())
            result = yield from self._batch(buf, comma + 1, close=True)
            if result is _FALSE_CUT:
                continue
            if result is not None:
                return True
            self.offset += comma  # the '[' written before the rest stands where the ',' was
            rest = bytearray(b"[")
            rest += memoryview(buf)[comma + 1:]
            return rest
        return None

    def _batch(self, buf: bytearray, stop: int, close: bool) -> _Batches:
        """Decode buf[:stop] as a list of events (with close, buf[stop - 1] is the ',' after an event,
        made the list's ']' for the attempt). Yields the batch; returns None when the list goes on
        after it, _FALSE_CUT when it is not a whole list (nothing yielded; with close, the ','
        restored), True when the list ended (its end, and what follows it, dealt with)."""
        if close:
            buf[stop - 1] = 0x5D  # ']'
        patches = tracerepair.Patches()
        typed = self.typed is not None
        while True:
            part = memoryview(buf)[:stop]
            try:
                events = self.typed.decode(part) if typed else RAWS.decode(part)  # type: ignore[union-attr]
            except (msgspec.ValidationError, UnicodeDecodeError):
                part.release()
                typed = False  # some event's fields have other types, or are not UTF-8: each on its own
                continue
            except msgspec.DecodeError as e:
                part.release()
                if typed:  # what is wrong, as the raw decoder (the one that reads every event) says it
                    typed = False
                    continue
                msg = str(e)
                pos = tracerepair.position(msg)
                if pos is None or (close and pos == stop - 1):
                    if close:
                        buf[stop - 1] = 0x2C  # ','
                    return _FALSE_CUT
                if "trailing characters" in msg:
                    if close:
                        buf[stop - 1] = 0x2C
                    return (yield from self._end(buf, pos - 1))
                if "invalid character" in msg and tracerepair.nonfinite(buf, pos, patch=False):
                    if patches.patch(buf, pos, stop):
                        continue
                    return (yield from self._stdlib(buf, stop, close))
                return (yield from self._broken(buf, stop, msg, pos))
            self.n_events += len(events)
            yield ("typed" if typed else "raw"), events
            return None

    def _end(self, buf: bytearray, at: int) -> _Batches:
        """The event list ends before buf[at], the first thing after it: its last events, then the
        document's keys after it."""
        result = yield from self._batch(buf, at, close=False)
        if result is None:
            self._tail(buf, at)
        elif result is _FALSE_CUT:
            yield from self._broken(buf, at, "Input data was truncated", None)
        return True

    def _tail(self, buf: bytearray, at: int) -> None:
        """What follows the event list, from buf[at] on: nothing but whitespace after a bare list;
        the rest of the document's keys after a "traceEvents" list."""
        if self._array:
            m = _NONWS.search(buf, at)
            if m:
                self.warnings.append(f"{self.p.name}: ignored what follows the end of the JSON document "
                                     f"({self._where('trailing characters (byte 0)', m.start())})")
            return
        doc = bytearray(_EMPTY_TAIL)
        doc += memoryview(buf)[at:]
        for piece in self._pieces:
            doc += piece
        base = len(_EMPTY_TAIL)
        try:
            top, doc = _decoded_doc(doc)
        except msgspec.ValidationError:
            _not_a_trace(self.p, doc)
        except msgspec.DecodeError as e:
            msg = str(e)
            pos = tracerepair.position(msg)
            where = self._where(msg, None if pos is None else at + pos - base)
            if pos is None or "trailing characters" not in msg:
                self.warnings.append(f"{self.p.name} is not valid JSON ({where}): the file looks truncated; "
                                     f"analysed the {self.n_events} events before the cut")
                return
            self.warnings.append(f"{self.p.name}: ignored what follows the end of the JSON document ({where})")
            try:
                top = _decoded_doc(doc[:pos - 1])[0]
            except ERRORS:
                return
        if isinstance(top, _Doc):
            self._keep_head(top)

    def _broken(self, buf: bytearray, stop: int, msg: str, pos: Optional[int]) -> _Batches:
        """The text cannot be read at pos (None: it ends at stop, in the middle of an event): keep
        the events that end before, and stop there."""
        where = self._where(msg, pos)
        limit = stop if pos is None else min(pos, stop)
        events = tracerepair.salvage(buf, limit)
        if events is None:
            return (yield from self._stdlib(buf, limit, close=False, where=where))
        self._cut_short(where, len(events))
        if events:
            yield "raw", events
        return True

    def _cut_short(self, where: str, n: int) -> None:
        self.n_events += n
        if not self.n_events:
            raise InputError(f"trace file {self.p} is not valid JSON ({where})", hint=HINT)
        self.warnings.append(f"{self.p.name} is not valid JSON ({where}): the file looks truncated; "
                             f"analysed the {self.n_events} events before the cut")

    def _stdlib(self, buf: bytearray, stop: int, close: bool, where: Optional[str] = None
                ) -> _Batches:
        """The slow way, for what msgspec will not read (NaN tokens everywhere, a broken batch none
        of whose cuts decodes): the standard library's decoder, one event at a time, up to the end
        of the list or the first event that does not parse. Returns as _batch does."""
        fixed, stop = tracerepair.utf8(buf, stop)
        text = str(memoryview(fixed)[:stop], "utf-8")
        events: list[Any] = []
        i, why = 1, None
        while True:
            i = tracerepair.skip(text, i)
            if i >= len(text):
                why = where or "it ends in the middle of the document"
                break
            if text[i] == "]":
                break
            try:
                obj, i = tracerepair.STDLIB.raw_decode(text, i)
            except RecursionError:
                why = where or "an event is nested too deeply"
                break
            except ValueError as e:
                why = where or f"line {_line(self.p, self.offset + len(text[:i].encode()))}: {getattr(e, 'msg', e)}"
                break
            events.append(obj)
        if why is not None:
            self._cut_short(why, len(events))
            if events:
                yield "objects", events
            return True
        self.n_events += len(events)
        if events:
            yield "objects", events
        at = len(text[:i + 1].encode("utf-8"))
        if close and at == stop:  # the ']' written at the cut
            return None
        if close:
            fixed[stop - 1] = 0x2C  # the list ended before the cut: what follows it, as it was
        self._tail(fixed, at)
        return True


def _not_a_trace(p: Path, buf: Any) -> NoReturn:
    try:
        keys = list(_KEYS.decode(buf))
    except ERRORS:
        keys = None
    nsys = keys is not None and any(k.lower().startswith(("nsys", "cupti", "target")) for k in keys)
    raise InputError(f"{p} is not a {'nsys export' if nsys else 'Chrome trace'} with traceEvents", hint=HINT) from None
