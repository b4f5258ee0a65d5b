"""Recovering what a damaged trace still holds, value by value: a JSON value msgspec refuses read by the
standard library, NaN / Infinity tokens patched in place, invalid UTF-8 replaced, a list cut short kept up to
its last whole event, and the standard library's decoder event by event as the last resort. ``tracefile``
reads the document with these where its batches fail."""

from __future__ import annotations

import json
import re
from typing import Any, List, Optional

import msgspec

ERRORS = (ValueError, msgspec.MsgspecError, RecursionError, OverflowError)
BAD = object()  # an event that is not JSON at all
_ANY = msgspec.json.Decoder()
RAWS = msgspec.json.Decoder(List[msgspec.Raw])  # an event list, each event kept as its text
BYTE = re.compile(r"\(byte (\d+)\)")  # where msgspec says it stopped
_NONFINITE_VALUE = re.compile(rb"[:,\[][ \t\r\n]*(-?(?:NaN|Infinity))(?=[ \t\r\n]*[,\]}])")
_MAX_PATCHES = 16  # NaN / Infinity tokens patched in place before the stdlib decoder takes over
MAX_CUTS = 64  # candidate cut points tried in one batch
_AFTER_EVENT = re.compile(rb"[ \t\r\n]*(?:[,\]]|\Z)")
STDLIB = json.JSONDecoder()  # one for every event: building it per call costs more than the parse


def generic(raw: Any) -> Any:
    """A JSON value decoded to Python objects; what msgspec refuses (a number beyond a double, invalid
    UTF-8) is read by the standard library instead; _BAD when neither can."""
    try:
        return _ANY.decode(raw)
    except ERRORS:
        pass
    try:
        return json.loads(bytes(raw).decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return BAD


def nonfinite(buf: bytearray, pos: int, patch: bool) -> bool:
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


class Patches:
    """How many NaN / Infinity tokens one piece of text has had patched."""

    def __init__(self) -> None:
        self.n, self.bulk = 0, False

    def patch(self, buf: bytearray, pos: int, stop: int) -> bool:
        """Patch the token at pos; False when this piece has had its share (the stdlib decoder
        reads it instead). Past the first few (a writer that emits NaN for some field of every
        event), every such token that stands where a value does is patched at once."""
        if self.n >= _MAX_PATCHES:
            if self.bulk:
                return False
            for t in _NONFINITE_VALUE.finditer(buf, pos, stop):
                buf[t.start(1):t.end(1)] = b"[]" + b" " * (t.end(1) - t.start(1) - 2)
            self.bulk, self.n = True, 0
        nonfinite(buf, pos, patch=True)
        self.n += 1
        return True


def utf8(buf: bytearray, stop: int) -> tuple[bytearray, int]:
    """(buf with invalid UTF-8 before stop replaced by U+FFFD, as the standard library reads it;
    where stop is in it). The bytes from stop on are kept as they are."""
    fixed = bytearray(bytes(buf[:stop]).decode("utf-8", "replace").encode("utf-8"))
    at = len(fixed)
    fixed += buf[stop:]
    return fixed, at


def position(msg: str) -> Optional[int]:
    m = BYTE.search(msg)
    return int(m.group(1)) if m else None


def salvage(buf: bytearray, limit: int) -> Optional[list[Any]]:
    """The events of buf (a list from buf[0]) that end before limit, the list closed in place
    after the last of them. Empty when none does; None when none of the cuts tried decodes."""
    hi, tries = limit, 0
    while tries < MAX_CUTS:
        j = buf.rfind(b"}", 1, hi)
        if j < 0:
            return []
        hi = j
        c = j + 1
        if not _AFTER_EVENT.match(buf, c, limit):
            continue  # a '}' that does not end an element of the event list
        tries += 1
        saved = buf[c]
        buf[c] = 0x5D  # ']'
        part = memoryview(buf)[:c + 1]
        try:
            return RAWS.decode(part)
        except ERRORS:
            part.release()
            buf[c] = saved
    return None


def skip(text: str, i: int) -> int:
    """Past whitespace and commas (between events)."""
    n = len(text)
    while i < n and text[i] in " \t\r\n,":
        i += 1
    return i
