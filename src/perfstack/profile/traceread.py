"""Reading a trace's events into a builder (``trace._Builder``): serially, or, for a large plain file,
with two processes, one half each.

Decoding and building the events is nearly all of the time a large trace takes to read, and it is
one core's work. For a plain (not gzip) file of MIN_BYTES or more, a second process
(``tracehalf``, started afresh: the reader may live in a process that holds threads) reads the text
from the first event after the middle of the file on, while this one reads the text before it,
with the event list closed where the second part begins. That split is only kept where this
process's own reading shows it is right: its list must end exactly at the close written there (a
``},{`` inside a string or a nested object cannot), and neither part may need a recovery from damaged
text. The second process sends its events back as they are built, a chunk at a time, as columns:
names, thread ids and shapes as indexes into tables of the distinct values, which this side shares
through the builder's own caches, so the events cost the memory they cost when read serially. This
side reads the pipe without waiting between its own batches (no thread: a thread waking for each
read of the pipe would take the interpreter lock from the reading, again and again), and appends
those events after its own in file order: the lists and the metadata come out as a serial reading
gives them. Anything else -- a small or compressed file, no spare core, the second process failing,
stalling or sending anything but its frames -- and the file is read serially, the reference."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from itertools import islice
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any, Callable, Dict, Generator, List, Optional, Tuple, Union

import msgspec
from msgspec import Meta


from perfstack.profile.cores import child_command, frame, frames, spare_core, widen_pipe
from perfstack.profile.tracefile import _CUT, _NONWS, Events
from perfstack.profile.tracetext import PIECE, _open_regular, max_trace_bytes

MIN_BYTES = 64 << 20  # smaller files are read serially: a second process costs a few tenths of a second
SHARE = 0.55  # the part of the text read here: the other process also starts, and sends what it built
CHUNK = 1 << 15  # events the second process builds before it sends them
COLLECT = 2048  # events it turns into columns at a time
STALL_S = 20.0  # the second process is given up when it sends nothing for this long (seconds)
_MAX_FRAME = 1 << 30
_OBJECT_START = b'{"traceEvents": ['  # what the second part is read behind, for a document that is an object

NewBuilder = Callable[[], Any]  # a fresh trace._Builder (with its Trace)


class _Odd(Exception):
    """The split read cannot be trusted: the file is read serially instead."""


def read(p: Path, new_builder: NewBuilder, typed: Optional[msgspec.json.Decoder[Any]],
         make: Tuple[type, type, type]) -> Tuple[Any, Dict[str, Any], int]:
    """(the builder, with the file's events added, not finished; the document's metadata; the length
    of its event list). ``typed`` is the decoder of a batch of events (None: every event read
    leniently, serially); ``make`` the GpuEvent, CpuEvent and Step types."""
    if typed is not None:
        plan = _plan(p)
        if plan is not None:
            done = _split(p, plan, new_builder, typed, make)
            if done is not None:
                return done
    events = Events(p, typed)
    build = new_builder()
    build.t.warnings = events.warnings
    for kind, batch in events:
        build.add(kind, batch)
        del batch
    return build, events.head, events.n_events


# --- the split ----------------------------------------------------------------------------------

def _plan(p: Path) -> Optional[Tuple[int, int, int, bool]]:
    """(the file's size, where the ',' before the second part is, where its first event starts,
    whether the document is an object) for a plain file worth splitting; None otherwise."""
    try:
        if p.name.endswith(".gz") or not spare_core():
            return None
        f, st = _open_regular(p)
        with f:
            size = st.st_size
            if size < max(MIN_BYTES, 2) or size > max_trace_bytes():
                return None
            first = f.read(PIECE)
            m = _NONWS.search(first)
            if first[:2] == b"\x1f\x8b" or m is None or first[m.start()] not in b"[{":
                return None
            mid = max(m.start() + 1, int(size * SHARE))
            f.seek(mid)
            window = f.read(1 << 20)
    except Exception:  # unreadable, or a bad limit in the environment: the serial reading says so
        return None
    cut = _CUT.search(window)
    if cut is None:
        return None
    return size, mid + window.index(b",", cut.start()), mid + cut.end() - 1, first[m.start()] == 0x7B


def part(p: Path, start: int, stop: int, before: bytes, after: bytes, end: bool = False
         ) -> Generator[bytes, None, None]:
    """The file's bytes from start to stop, a piece at a time, with ``before`` and ``after`` around
    them. _Odd when the file is shorter, or, with ``end`` (stop is where it ended), longer now."""
    if before:
        yield before
    f, _ = _open_regular(p)
    with f:
        f.seek(start)
        left = stop - start
        while left > 0:
            piece = f.read(min(PIECE, left))
            if not piece:
                raise _Odd(f"{p} is shorter than it was")
            left -= len(piece)
            yield piece
        if end and f.read(1):
            raise _Odd(f"{p} grew while it was read")
    if after:
        yield after


class _Half(Events):
    """The first part: the text before the split, its event list closed there (``close`` is what
    must follow the list for the split to be right)."""

    def __init__(self, p: Path, typed: msgspec.json.Decoder[Any], text: Generator[bytes, None, None],
                 close: bytes) -> None:
        super().__init__(p, typed, text)
        self.close, self.verified = close, False

    def _tail(self, buf: bytearray, at: int) -> None:
        rest = bytes(buf[at:]) + b"".join(self._pieces)
        self.verified = rest.strip() == self.close
        if self.verified:
            super()._tail(buf, at)


def _child_command(p: Path, start: int, size: int, obj: bool) -> List[str]:
    return child_command("perfstack.profile.tracehalf", [str(p), str(start), str(size), "1" if obj else "0"])


def _split(p: Path, plan: Tuple[int, int, int, bool], new_builder: NewBuilder,
           typed: msgspec.json.Decoder[Any], make: Tuple[type, type, type]
           ) -> Optional[Tuple[Any, Dict[str, Any], int]]:
    size, comma, start, obj = plan
    if not sys.executable or os.name != "posix":  # the pipe is read without blocking, between batches
        return None
    try:
        proc = subprocess.Popen(_child_command(p, start, size, obj), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    build = new_builder()
    try:
        rx = _Receiver(proc.stdout.fileno(), build, make)  # type: ignore[union-attr]
        events = _Half(p, typed, part(p, 0, comma, b"", b"]}" if obj else b"]"), b"}" if obj else b"")
        build.t.warnings = events.warnings
        for kind, batch in events:
            if kind == "objects":  # events the standard library read: on their own, serially
                return None
            build.add(kind, batch)
            del batch
            rx.drain()  # the other process's events as they come: its pipe never fills
        if not events.verified or events.warnings:
            return None
        while rx.drain():
            if not select.select([rx.fd], [], [], STALL_S)[0]:
                return None  # stalled
        if rx.end is None or proc.wait(STALL_S) != 0:
            return None
        return _merge(build, rx, events, make[2])
    except Exception:  # nothing the split read can go wrong with is worth more than reading serially
        return None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.wait()


def _merge(build: Any, rx: "_Receiver", events: Events, step: type) -> Tuple[Any, Dict[str, Any], int]:
    """The second part's events after the first's, as a serial reading has them."""
    t, end = build.t, rx.end
    assert end is not None
    t.gpu += rx.lists[0]
    t.gpu_annotations += rx.lists[1]
    t.runtime += rx.lists[2]
    t.ops += rx.lists[3]
    t.steps += [step(build.names.setdefault(n, n), number, ts, dur) for n, number, ts, dur in end.steps]
    build.skipped += end.skipped
    for mine, theirs in ((t.peak_allocated, end.peak_allocated), (t.peak_reserved, end.peak_reserved)):
        for device, v in theirs.items():
            if v > mine.get(device, -1):
                mine[device] = v
    head = events.head
    head.update(end.head)
    return build, head, events.n_events + end.n_events


# --- what the second process sends --------------------------------------------------------------
# Frames (cores.frame): a msgpack _Chunk each or, last, the _End. The column
# structs name the fields of GpuEvent and CpuEvent, in their order.

_Ix = List[Annotated[int, Meta(ge=0)]]  # indexes into a table
_Ints = List[Optional[int]]


class _Gpu(msgspec.Struct, array_like=True):
    kind: _Ix
    name: _Ix
    ts: List[float]
    dur: List[float]
    device: List[int]
    stream: List[int]
    correlation: _Ints
    external_id: _Ints
    bytes: _Ints


class _Cpu(msgspec.Struct, array_like=True):
    cat: _Ix
    name: _Ix
    ts: List[float]
    dur: List[float]
    tid: _Ix
    correlation: _Ints
    external_id: _Ints
    dims: _Ix
    types: _Ix
    concrete: _Ix
    strides: _Ix


_TABLES = {"kind": 0, "cat": 0, "name": 1, "tid": 2, "dims": 3, "types": 3, "concrete": 3, "strides": 3}


class _Chunk(msgspec.Struct, array_like=True, tag=0):
    kinds: List[str]  # every kind so far (a handful); the other tables: the values new since the last chunk
    names: List[str]
    tids: List[Union[int, str, None]]
    shapes: List[bytes]  # the text of Input Dims, Input type, ...; index 0 is None (the field absent)
    gpu: _Gpu
    spans: _Gpu
    runtime: _Cpu
    ops: _Cpu


class _End(msgspec.Struct, array_like=True, tag=1):
    n_events: int
    skipped: int
    steps: List[Tuple[str, int, float, float]]
    peak_allocated: Dict[int, int]
    peak_reserved: Dict[int, int]
    head: Dict[str, Any]


class Sender:
    """The second process's side: after each batch, the events its builder holds are turned into
    columns (a few thousand at a time, while they are still in the CPU's cache: 1.0 µs an operator
    against 1.7 in lots of 32k) and dropped; every CHUNK events the columns are sent as a _Chunk."""

    _LISTS = ((_Gpu, "gpu"), (_Gpu, "gpu_annotations"), (_Cpu, "runtime"), (_Cpu, "ops"))

    def __init__(self, build: Any, out: Any) -> None:
        self.build, self.out = build, out
        self.enc = msgspec.msgpack.Encoder()
        self.kinds: Dict[str, int] = {}
        self.names: Dict[str, int] = {}
        self.tids: Dict[Any, int] = {}
        self.shapes: Dict[int, int] = {id(None): 0}  # by the id of a shape list the builder's cache holds
        self.seen_shapes = 1
        self._reset()

    def _reset(self) -> None:
        self.new: Tuple[List[Any], List[Any], List[Any]] = ([], [], [])  # names, tids, shape texts to send
        self.columns: List[List[List[Any]]] = [[[] for _ in cols.__struct_fields__] for cols, _ in self._LISTS]
        self.n = 0

    def add(self) -> None:
        """After each batch the builder took."""
        t = self.build.t
        if len(t.gpu) + len(t.gpu_annotations) + len(t.runtime) + len(t.ops) >= COLLECT:
            self._collect()
            if self.n >= CHUNK:
                self.chunk()

    def _collect(self) -> None:
        b, t = self.build, self.build.t
        for kind, _ in b.cats.values():
            self.kinds.setdefault(kind, len(self.kinds))
        for table, cache, new in ((self.names, b.names, self.new[0]), (self.tids, b.tids, self.new[1])):
            values = list(islice(cache, len(table), None))
            table.update(zip(values, range(len(table), len(table) + len(values))))
            new += values
        for text, v in islice(b.shapes.items(), self.seen_shapes, None):
            if v is not None:
                self.shapes[id(v)] = len(self.shapes)
                self.new[2].append(text)
        self.seen_shapes = len(b.shapes)
        for (cols, name), acc in zip(self._LISTS, self.columns):
            events = getattr(t, name)
            for column, values in zip(acc, self._columns(cols, events)):
                column += values
            self.n += len(events)
            events.clear()

    def chunk(self) -> None:
        self._collect()
        lists = (cols(*acc) for (cols, _), acc in zip(self._LISTS, self.columns))
        self._send(_Chunk(list(self.kinds), *self.new, *lists))
        self._reset()

    def _columns(self, cols: type, events: List[Any]) -> List[List[Any]]:
        tables = (self.kinds, self.names, self.tids, self.shapes)
        out = []
        for f in cols.__struct_fields__:  # type: ignore[attr-defined]
            values: Any = map(attrgetter(f), events)
            table = _TABLES.get(f)
            if table == 3:  # a shape list the builder's cache does not hold (past its size) fails here
                values = map(id, values)
            if table is not None:
                values = map(tables[table].__getitem__, values)
            out.append(list(values))
        return out

    def end(self, n_events: int, head: Dict[str, Any]) -> None:
        self.chunk()
        b, t = self.build, self.build.t
        self._send(_End(n_events, b.skipped, [(s.name, s.number, s.ts, s.dur) for s in t.steps],
                        t.peak_allocated, t.peak_reserved, head))
        self.out.flush()

    def _send(self, msg: Any) -> None:
        self.out.write(frame(self.enc, msg))


class _Receiver:
    """This side: reads the second process's frames from its pipe without waiting (between this
    side's batches) and builds its events into lists of their own, appended after the first part's
    at the end, sharing names, thread ids and shapes through the builder's caches."""

    def __init__(self, fd: int, build: Any, make: Tuple[type, type, type]) -> None:
        fields = [getattr(cls, "__struct_fields__", None) for cls in make[:2]]
        if fields != [_Gpu.__struct_fields__, _Cpu.__struct_fields__]:
            raise _Odd("the event types have other fields")
        self.fd, self.build, self.make = fd, build, make
        os.set_blocking(fd, False)
        widen_pipe(fd)  # room for a few chunks
        self.buf = bytearray()
        self.dec = msgspec.msgpack.Decoder(Union[_Chunk, _End])
        self.lists: Tuple[List[Any], ...] = ([], [], [], [])  # gpu, gpu_annotations, runtime, ops
        self.tables: Tuple[List[Any], ...] = ([], [], [], [None])  # kinds, names, tids, shapes
        self.end: Optional[_End] = None

    def drain(self) -> bool:
        """Read what the pipe holds and build the frames it completes; False at its end. _Odd on
        anything but frames, or anything after the end."""
        while True:
            try:
                data = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return True
            if not data:
                if self.buf:
                    raise _Odd("the second part ends in a frame")
                return False
            self.buf += data
            for msg in frames(self.buf, self.dec, _MAX_FRAME):
                if self.end is not None:
                    raise _Odd("something after the end")
                if isinstance(msg, _End):
                    self.end = msg
                else:
                    self._add(msg)

    def _add(self, m: _Chunk) -> None:
        b = self.build
        kinds, names, tids, shapes = self.tables
        kinds[:] = [sys.intern(k) for k in m.kinds]
        names += map(b.names.setdefault, m.names, m.names)
        tids += map(b.tids.setdefault, m.tids, m.tids)
        shapes += map(b.shapes.__getitem__, m.shapes)
        make = (self.make[0], self.make[0], self.make[1], self.make[1])
        for lst, cls, cols in zip(self.lists, make, (m.gpu, m.spans, m.runtime, m.ops)):
            columns = [getattr(cols, f) for f in cols.__struct_fields__]
            if len(set(map(len, columns))) != 1:
                raise _Odd("columns of unequal length")
            for i, f in enumerate(cols.__struct_fields__):
                table = _TABLES.get(f)
                if table is not None:
                    columns[i] = map(self.tables[table].__getitem__, columns[i])
            lst += map(cls, *columns)
