"""The replays of one frozen timeline (``simulate``), worked out here or, for a large timeline, shared
with a second process on a spare core.

A summary replays its timeline a score of times (the overhead's CPU scales, then each candidate fix at two
or three of them), each a pass over every action and GPU event: two seconds of a 1 GB trace's analysis,
on one core, while the core that read half of its text sits idle. Where a core is spare and the trace is
large, a second process is started as soon as the trace is read (``start``: it costs a tenth of a second
to start, hidden behind the analysis). It is sent what the timeline is built from (``build``: the columns
of the runtime calls and GPU events, 32 MB for a 1 GB trace), builds the timeline (``actions.build``, three
seconds of that trace's analysis) while this process sums up the steps and the kernels, and sends it back
(``timeline``); where that fails, the timeline is built here and sent to it. The summary
then says which replays it will ask for, in the order it will ask (``want``), as soon as it knows them;
the other process takes the newest first (the ones asked for last), while this one, asked for a replay
(``replay``), uses the other's figure where it has come, waits where the other has started it, and
otherwise works it out itself. So the second process works while this one runs the waste detectors,
and both meet in the middle of the fixes' replays.

A replay, and the timeline's build, are the same arithmetic on the same doubles in either process, so every
figure is the same to the last bit whoever worked it out. Anything going wrong with the second process -- it cannot start,
dies, stalls, or sends anything but its frames -- and this one replays the rest itself, the reference.
"""

from __future__ import annotations

import os
import queue
import select
import subprocess
import sys
import threading
from array import array
from typing import IO, TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import msgspec

from perfstack.profile import actions
from perfstack.profile.actions import Calls, Windows, Work
from perfstack.profile.cores import child_command, frame, frames, spare_core, widen_pipe
from perfstack.profile.cpu import CpuSpans
from perfstack.profile.simulate import Ragged, Scenario, Timeline, replay
from perfstack.profile.timeline import Spans

if TYPE_CHECKING:
    from perfstack.profile.attribute import Attribution
    from perfstack.profile.trace import Trace

MIN_CALLS = 100_000  # runtime calls of a trace worth a second process (a replay of 300k actions: ~0.08 s)
STALL_S = 60.0  # a replay the second process started and has not finished in this long: it is given up
PIPE_BYTES = 1 << 20
_MAX_FRAME = 1 << 31
RECORDED = Scenario()  # the timeline as recorded (simulate.replay's default)

Job = Tuple[Scenario, float]  # a scenario, at a CPU scale


# --- the frames ----------------------------------------------------------------------------------
# 8 bytes of length (little-endian), then msgpack. To the second process: the timeline once, each
# scenario once, jobs by the scenario's number, and jobs no longer wanted; from it: a job started, a
# job done. Arrays travel as their bytes (doubles to the last bit).

_Num = Union[int, float]  # a time as it was worked out: an int stays one


class _Line(msgspec.Struct, array_like=True, tag=0):
    """The timeline's scalars; its columns follow, one _Col each (COLUMNS)."""
    t0: _Num
    n_steps: int
    tail_us: _Num
    latency_us: _Num


class _Build(msgspec.Struct, array_like=True, tag=7):
    """What the timeline is built from, to the second process: the runtime calls' distinct names and the steps'
    windows; the columns follow, one _Col each (INPUTS)."""
    names: List[str]
    windows: List[Tuple[int, _Num, _Num]]


class _Col(msgspec.Struct, array_like=True, tag=6):
    name: str
    data: bytes


# a frozen timeline's columns, with the type of each array; "ends" and "flat" are its events
COLUMNS = {"kind": "b", "step": "q", "dur": "d", "gap": "d", "gap_dl": "d", "gap_alloc": "d", "gap_op": "d",
           "alloc_sync": "b", "ends": "q", "flat": "q", "g_dur": "d", "g_stream": "q", "g_bubble": "d", "g_dep": "b",
           "g_index": "q", "g_action": "q"}
_PER_ACTION = ("kind", "step", "dur", "gap", "gap_dl", "gap_alloc", "gap_op", "alloc_sync", "ends")
_PER_EVENT = ("g_dur", "g_stream", "g_bubble", "g_dep", "g_index", "g_action")
# what it is built from (actions.Calls as c_, actions.Work as w_, the names as indexes into _Build.names; the
# cpu.CpuSpans' starts and ends)
_SPANS = ("dataloader", "alloc", "sync", "ops")
INPUTS = {"c_ts": "d", "c_dur": "d", "c_name": "q", "w_ts": "d", "w_dur": "d", "w_stream": "q", "w_kernel": "b",
          "w_launch": "q", "w_step": "q", **{f"{k}_{end}": "d" for k in _SPANS for end in ("starts", "ends")}}


class _Sc(msgspec.Struct, array_like=True, tag=1):
    number: int
    keep_sync: str
    no_dataloader: bool
    no_allocator: bool
    graph: bool
    g_dur: Optional[bytes]
    g_bubble: Optional[bytes]
    no_dispatch: bytes  # array("q")


class _Key(msgspec.Struct, array_like=True):
    number: int  # the scenario's
    scale: float


class _Job(_Key, tag=2):
    pass


class _Drop(_Key, tag=3):
    pass


class _Started(_Key, tag=4):
    pass


class _Done(_Key, tag=5):
    us: float


_TO = Union[_Line, _Build, _Col, _Sc, _Job, _Drop]
_FROM = Union[_Started, _Done]
_BUILT = Union[_Line, _Col]


class _Bad(Exception):
    """The other process sent something that is not its frames."""


def _line(t: Timeline) -> Iterator[Union[_Line, _Col]]:
    """The frozen timeline as it travels, a column at a time (each as the bytes of the array it is: a copy of
    one column, not of the whole, is made to send it)."""
    yield _Line(t.t0, t.n_steps, t.tail_us, t.latency_us)
    events = t.events if isinstance(t.events, Ragged) else Ragged.of(t.events)
    for name, code in COLUMNS.items():
        xs = getattr(events, name) if name in ("ends", "flat") else getattr(t, name)
        if not (isinstance(xs, array) and xs.typecode == code):
            xs = array(code, xs)
        yield _Col(name, memoryview(xs).cast("B"))  # type: ignore[arg-type]


def _column(m: _Col) -> array[Any]:
    code = COLUMNS.get(m.name) or INPUTS.get(m.name)
    if code is None:
        raise _Bad(f"no column {m.name[:40]!r}")
    out = array(code)
    try:
        out.frombytes(m.data)
    except ValueError as e:
        raise _Bad(f"column {m.name}: {e}") from None
    return out


def _timeline(head: _Line, a: Dict[str, array[Any]]) -> Timeline:
    """The timeline its columns make (_Bad where they do not make one)."""
    if len({len(a[k]) for k in _PER_ACTION}) != 1 or len({len(a[k]) for k in _PER_EVENT}) != 1:
        raise _Bad("columns of unequal length")
    n, n_actions = len(a["g_dur"]), len(a["kind"])
    if any(not 0 <= e < n for e in a["flat"]) or any(not -1 <= x < n_actions for x in a["g_action"]):
        raise _Bad("an event or an action out of range")
    if any(e < 0 for e in a["g_index"]):
        raise _Bad("a negative event index")
    try:
        events = Ragged(a.pop("flat"), a.pop("ends"))
    except ValueError as e:
        raise _Bad(str(e)) from None
    return Timeline(head.t0, head.n_steps, head.tail_us, kind=a["kind"], dur=a["dur"], step=a["step"], gap=a["gap"],
                    gap_dl=a["gap_dl"], gap_alloc=a["gap_alloc"], gap_op=a["gap_op"], alloc_sync=a["alloc_sync"],
                    events=events, g_dur=a["g_dur"], g_stream=a["g_stream"], g_bubble=a["g_bubble"], g_dep=a["g_dep"],
                    g_index=a["g_index"], g_action=a["g_action"], latency_us=head.latency_us).freeze()


def _inputs(calls: Calls, work: Work, windows: Windows, cs: CpuSpans) -> Iterator[Union[_Build, _Col]]:
    """What the timeline is built from, as it travels (OverflowError, TypeError: a value no array holds)."""
    table: Dict[str, int] = {}
    names = array("q", [table.setdefault(n, len(table)) for n in calls.name])
    yield _Build(list(table), [tuple(w) for w in windows])
    cols: Dict[str, Any] = {"c_ts": calls.ts, "c_dur": calls.dur, "c_name": names, "w_ts": work.ts, "w_dur": work.dur,
                            "w_stream": work.stream, "w_kernel": work.kernel, "w_launch": work.launch,
                            "w_step": work.step}
    for k in _SPANS:
        spans = getattr(cs, k)
        cols[f"{k}_starts"], cols[f"{k}_ends"] = spans.starts, spans.ends
    for name, code in INPUTS.items():
        xs = cols[name]
        if not (isinstance(xs, array) and xs.typecode == code):
            xs = array(code, xs)
        yield _Col(name, memoryview(xs).cast("B"))  # type: ignore[arg-type]


def _built(head: _Build, a: Dict[str, array[Any]]) -> Timeline:
    """The timeline built from its inputs (_Bad where they do not make one)."""
    if len({len(a[k]) for k in INPUTS if k.startswith("c_")}) != 1 or \
            len({len(a[k]) for k in INPUTS if k.startswith("w_")}) != 1 or not head.windows:
        raise _Bad("inputs of unequal length")
    n_names, n_calls = len(head.names), len(a["c_ts"])
    if any(not 0 <= i < n_names for i in a["c_name"]) or any(not -1 <= j < n_calls for j in a["w_launch"]):
        raise _Bad("a name or a launch out of range")
    calls = Calls(a["c_ts"], a["c_dur"], list(map(head.names.__getitem__, a["c_name"])))
    work = Work(a["w_ts"], a["w_dur"], a["w_stream"], a["w_kernel"], a["w_launch"], a["w_step"])
    try:
        cs = CpuSpans(*(Spans.of_merged(a[f"{k}_starts"], a[f"{k}_ends"]) for k in _SPANS))
    except ValueError as e:
        raise _Bad(str(e)) from None
    return actions.build(calls, work, head.windows, cs)


def _sc(number: int, sc: Scenario) -> _Sc:
    def d(xs: Any) -> Optional[bytes]:
        return None if xs is None else array("d", xs).tobytes()
    return _Sc(number, sc.keep_sync, sc.no_dataloader, sc.no_allocator, sc.graph, d(sc.g_dur), d(sc.g_bubble),
               array("q", sorted(sc.no_dispatch)).tobytes())


def _scenario(m: _Sc) -> Scenario:
    def d(data: Optional[bytes]) -> Optional[array[float]]:
        if data is None:
            return None
        out = array("d")
        out.frombytes(data)
        return out
    gone = array("q")
    gone.frombytes(m.no_dispatch)
    return Scenario(keep_sync=m.keep_sync, no_dataloader=m.no_dataloader, no_allocator=m.no_allocator,
                    graph=m.graph, g_dur=d(m.g_dur), g_bubble=d(m.g_bubble), no_dispatch=frozenset(gone))


# --- this side -----------------------------------------------------------------------------------

class Helper:
    """The second process, started before there is a timeline to send it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.fd = proc.stdout.fileno()  # type: ignore[union-attr]
        os.set_blocking(self.fd, False)
        widen_pipe(proc.stdin.fileno(), PIPE_BYTES)  # type: ignore[union-attr]  # room for a scenario's arrays
        widen_pipe(self.fd, PIPE_BYTES)  # and for the timeline it sends back
        self.rest = bytearray()  # what came after the timeline it built

    def build(self, calls: Calls, work: Work, windows: Windows, cs: CpuSpans) -> bool:
        """Sends what the timeline is built from: the second process builds it while this one goes on. False
        where nothing could be sent (then it is built here)."""
        try:
            msgs = list(_inputs(calls, work, windows, cs))
            out = self.proc.stdin
            enc = msgspec.msgpack.Encoder()
            for m in msgs:
                out.write(frame(enc, m))  # type: ignore[union-attr]
            out.flush()  # type: ignore[union-attr]
        except (OSError, ValueError, TypeError, OverflowError):
            return False
        return True

    def built(self) -> Optional[Timeline]:
        """The timeline the second process built; None where it failed to (it is then ended)."""
        dec = msgspec.msgpack.Decoder(_BUILT)
        buf = self.rest
        head: Optional[_Line] = None
        cols: Dict[str, array[Any]] = {}
        try:
            while True:
                if not select.select([self.fd], [], [], STALL_S)[0]:
                    raise _Bad("stalled")
                try:
                    data = os.read(self.fd, PIPE_BYTES)
                except BlockingIOError:
                    continue
                if not data:
                    raise _Bad("it ended")
                buf += data
                for m in frames(buf, dec, _MAX_FRAME):
                    if isinstance(m, _Line):
                        head = m
                    elif head is None or m.name not in COLUMNS:
                        raise _Bad("not its timeline")
                    else:
                        cols[m.name] = _column(m)
                    if len(cols) == len(COLUMNS):
                        return _timeline(head, cols)  # (it sends nothing more before it is asked for a replay)
        except (OSError, ValueError, _Bad, msgspec.MsgspecError):
            pass
        self.close()
        return None

    def close(self) -> None:
        """Ends it at once: what it may still be replaying nobody asked for (it writes nothing but its pipe)."""
        p = self.proc
        if p.poll() is None:
            p.kill()
        p.wait()
        for pipe in (p.stdin, p.stdout):
            try:
                pipe.close()  # type: ignore[union-attr]
            except OSError:
                pass


def start(runtime_calls: int) -> Optional[Helper]:
    """A second process for the replays of a trace with this many runtime calls, where one is worth it
    and a core is spare; None otherwise (everything is then replayed here)."""
    if runtime_calls < MIN_CALLS or os.name != "posix" or not sys.executable or not spare_core():
        return None
    try:
        proc = subprocess.Popen(child_command("perfstack.profile.replays", []), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    try:
        return Helper(proc)
    except OSError:
        proc.kill()
        proc.wait()
        return None


def build(trace: Trace, att: Attribution, windows: Windows, cs: CpuSpans, helper: Optional[Helper]) -> bool:
    """Has ``helper`` build the replay timeline, where there is one to build; False: it is built here."""
    if helper is None:
        return False
    inputs = actions.inputs(trace, att, windows)
    return inputs is not None and helper.build(*inputs, windows, cs)


def timeline(trace: Trace, att: Attribution, windows: Windows, cs: CpuSpans, helper: Optional[Helper],
             building: bool) -> Optional[Replays]:
    """The replays of the trace's timeline (None without one): of the timeline ``helper`` built where
    ``building``, else of one built here (shared with ``helper`` where it is alive)."""
    if building:
        tl = helper.built()  # type: ignore[union-attr]
        if tl is not None:
            return Replays(tl, helper, held=True)
        helper = None
    tl = actions.timeline(trace, att, windows, cs)
    return Replays(tl, helper) if tl is not None else None


class Replays:
    """The replays of a frozen timeline, each worked out once, by this process or by ``helper``'s."""

    def __init__(self, tl: Timeline, helper: Optional[Helper] = None, held: bool = False) -> None:
        self.tl = tl
        self.done: dict[Tuple[int, float], float] = {}
        self.numbers: dict[int, int] = {}  # a scenario's number, by its id ...
        self.kept: List[Scenario] = []  # ... for as long as these scenarios are held
        self.helper = helper
        self.enc = msgspec.msgpack.Encoder()
        self.dec = msgspec.msgpack.Decoder(_FROM)
        self.buf = bytearray()
        self.sent: set[Tuple[int, float]] = set()
        self.started: set[Tuple[int, float]] = set()
        self.order: List[Tuple[int, float]] = []  # the replays wanted, in the order they were
        self.scenarios_sent: set[int] = set()
        if helper is not None:
            self.buf += helper.rest
            if not held:  # (``held``: it built the timeline itself)
                for m in _line(tl):  # a column at a time: the pipe takes it while the other process reads
                    self._send([m])

    def recorded(self, cpu_scale: float = 1.0) -> float:
        return self.replay(cpu_scale, RECORDED)

    def want(self, jobs: Iterable[Job]) -> None:
        """Replays that will be asked for, in the order they will be: the second process (if any) starts
        on the last of them."""
        if self.helper is None:
            return
        msgs: List[Any] = []
        for sc, scale in jobs:
            number = self._number(sc, msgs)
            key = (number, scale)
            if key not in self.done and key not in self.sent:
                self.sent.add(key)
                self.order.append(key)
                msgs.append(_Job(number, scale))
        self._send(msgs)

    def replay(self, cpu_scale: float = 1.0, sc: Scenario = RECORDED) -> float:
        """simulate.replay(tl, cpu_scale, sc), worked out once."""
        key = (self._number(sc, None), cpu_scale)
        if key not in self.done and self.helper is not None:
            self._theirs(key)
        if key not in self.done:
            self._mine(key)
        return self.done[key]

    def close(self) -> None:
        if self.helper is not None:
            self.helper.close()
            self.helper = None

    def _number(self, sc: Scenario, msgs: Optional[List[Any]]) -> int:
        number = self.numbers.get(id(sc))
        if number is None:
            number = self.numbers[id(sc)] = len(self.kept)
            self.kept.append(sc)
        if msgs is not None and number not in self.scenarios_sent:
            self.scenarios_sent.add(number)
            msgs.append(_sc(number, sc))
        return number

    def _theirs(self, key: Tuple[int, float]) -> None:
        """The other process's figure where it has come; where it has started on it, the replays wanted
        soonest that it has not started are worked out here until it comes (then, none left, it is waited
        for). Not done after this: it is this process's to work out."""
        try:
            self._read()
            while key in self.started and key not in self.done:
                other = next((k for k in self.order if k not in self.done and k not in self.started), None)
                if other is not None:
                    self._mine(other)
                elif not select.select([self.helper.fd], [], [], STALL_S)[0]:  # type: ignore[union-attr]
                    raise _Bad("stalled")
                self._read()
        except (OSError, ValueError, _Bad, msgspec.MsgspecError):
            self.close()  # whatever it was doing is done here

    def _mine(self, key: Tuple[int, float]) -> None:
        """Works the replay out here (the other process, if it has it, is told to drop it)."""
        if key in self.sent and self.helper is not None:
            self._send([_Drop(*key)])
        self.done[key] = replay(self.tl, key[1], self.kept[key[0]])

    def _read(self) -> None:
        fd = self.helper.fd  # type: ignore[union-attr]
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                raise _Bad("it ended")
            self.buf += data
            for m in frames(self.buf, self.dec, _MAX_FRAME):
                key = (m.number, m.scale)
                if key not in self.sent:
                    raise _Bad("a job never sent")
                if isinstance(m, _Started):
                    self.started.add(key)
                else:
                    self.done.setdefault(key, m.us)

    def _send(self, msgs: List[Any]) -> None:
        if self.helper is None or not msgs:
            return
        try:
            out = self.helper.proc.stdin
            for m in msgs:
                out.write(frame(self.enc, m))  # type: ignore[union-attr]
            out.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            self.close()


# --- the second process --------------------------------------------------------------------------

def main(argv: List[str]) -> int:
    """The second process: reads the timeline, the scenarios and the jobs from its input and replays the
    newest job wanted first, saying when it starts one and what it found; exits at the end of its input."""
    inbox: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    # a thread reads the input as it comes, so that the other side never waits on a full pipe while a
    # replay runs here (it takes the interpreter lock only for each read)
    threading.Thread(target=_pump, args=(sys.stdin.buffer.fileno(), inbox), daemon=True).start()
    out: IO[bytes] = sys.stdout.buffer
    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(_TO)
    buf = bytearray()
    tl: Optional[Timeline] = None
    head: Optional[Union[_Line, _Build]] = None
    cols: Dict[str, array[Any]] = {}
    scenarios: dict[int, Scenario] = {}
    stack: List[Tuple[int, float]] = []
    dropped: set[Tuple[int, float]] = set()
    while True:
        idle = tl is None or not stack
        try:
            data: Optional[bytes] = inbox.get(block=idle)
        except queue.Empty:
            data = None
        while data is not None:  # each piece's frames taken in turn: no more than a column's bytes held at once
            if not data:
                return 0
            buf += data
            for m in frames(buf, dec, _MAX_FRAME):
                if isinstance(m, (_Line, _Build)):
                    head, cols = m, {}
                elif isinstance(m, _Col):
                    cols[m.name] = _column(m)
                    if isinstance(head, _Line) and len(cols) == len(COLUMNS):
                        tl, cols = _timeline(head, cols), {}
                    elif isinstance(head, _Build) and len(cols) == len(INPUTS):
                        tl, cols = _built(head, cols), {}
                        for line in _line(tl):  # the timeline, back to the process that asked
                            out.write(frame(enc, line))
                        out.flush()
                else:
                    _job(m, scenarios, stack, dropped)
            try:
                data = inbox.get_nowait()
            except queue.Empty:
                data = None
        while tl is not None and stack:
            key = stack.pop()
            if key not in dropped:
                break
        else:
            continue
        out.write(frame(enc, _Started(*key)))
        out.flush()
        us = replay(tl, key[1], scenarios[key[0]])
        out.write(frame(enc, _Done(*key, us)))
        out.flush()


def _job(m: Any, scenarios: dict[int, Scenario], stack: List[Tuple[int, float]],
         dropped: set[Tuple[int, float]]) -> None:
    """A scenario, a job or a job dropped, as the second process keeps them."""
    if isinstance(m, _Sc):
        scenarios[m.number] = _scenario(m)
    elif isinstance(m, _Job):
        stack.append((m.number, m.scale))
        dropped.discard((m.number, m.scale))
    else:
        dropped.add((m.number, m.scale))


def _pump(fd: int, inbox: queue.SimpleQueue[bytes]) -> None:
    try:
        while True:
            data = os.read(fd, PIPE_BYTES)
            inbox.put(data)
            if not data:
                return
    except OSError:
        inbox.put(b"")
