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
dies, stalls, or sends anything but its frames (``replaywire``) -- and this one replays the rest itself,
the reference.
"""

from __future__ import annotations

import os
import queue
import select
import subprocess
import sys
import threading
from array import array
from typing import IO, TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple, Union

import msgspec

from perfstack.profile import actions, replaywire as wire
from perfstack.profile.actions import Calls, Windows, Work
from perfstack.profile.cores import child_command, frame, frames, spare_core, widen_pipe
from perfstack.profile.cpu import CpuSpans
from perfstack.profile.simulate import Scenario, Timeline, replay

if TYPE_CHECKING:
    from perfstack.profile.attribute import Attribution
    from perfstack.profile.trace import Trace

MIN_CALLS = 100_000  # runtime calls of a trace worth a second process (a replay of 300k actions: ~0.08 s)
STALL_S = 60.0  # a replay the second process started and has not finished in this long: it is given up
PIPE_BYTES = 1 << 20
_MAX_FRAME = 1 << 31
RECORDED = Scenario()  # the timeline as recorded (simulate.replay's default)

Job = Tuple[Scenario, float]  # a scenario, at a CPU scale


# --- this side -----------------------------------------------------------------------------------

class Helper:
    """The second process, started before there is a timeline to send it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.fd = proc.stdout.fileno()  # type: ignore[union-attr]
        os.set_blocking(self.fd, False)
        widen_pipe(proc.stdin.fileno(), PIPE_BYTES)  # type: ignore[union-attr]  # room for a scenario's arrays
        widen_pipe(self.fd, PIPE_BYTES)  # and for the timeline it sends back
        self.enc = msgspec.msgpack.Encoder()
        self.buf = bytearray()  # what it sent that is not taken yet

    def send(self, msgs: Iterable[Any]) -> bool:
        """Writes these messages to it, as frames; False where its pipe is gone."""
        try:
            out = self.proc.stdin
            for m in msgs:
                out.write(frame(self.enc, m))  # type: ignore[union-attr]
            out.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            return False
        return True

    def build(self, calls: Calls, work: Work, windows: Windows, cs: CpuSpans) -> bool:
        """Sends what the timeline is built from: the second process builds it while this one goes on. False
        where nothing could be sent (then it is built here)."""
        try:
            msgs = list(wire.inputs(calls, work, windows, cs))
        except (TypeError, OverflowError):  # a value no array holds
            return False
        return self.send(msgs)

    def built(self) -> Optional[Timeline]:
        """The timeline the second process built; None where it failed to (it is then ended)."""
        dec = msgspec.msgpack.Decoder(wire.BUILT)
        buf = self.buf
        head: Optional[wire.Line] = None
        cols: Dict[str, array[Any]] = {}
        try:
            while True:
                if not select.select([self.fd], [], [], STALL_S)[0]:
                    raise wire.Bad("stalled")
                try:
                    data = os.read(self.fd, PIPE_BYTES)
                except BlockingIOError:
                    continue
                if not data:
                    raise wire.Bad("it ended")
                buf += data
                for m in frames(buf, dec, _MAX_FRAME):
                    if isinstance(m, wire.Line):
                        head = m
                    elif head is None or m.name not in wire.COLUMNS:
                        raise wire.Bad("not its timeline")
                    else:
                        cols[m.name] = wire.column(m)
                    if len(cols) == len(wire.COLUMNS):
                        return wire.timeline_of(head, cols)  # (it sends nothing more before it is asked for a replay)
        except (OSError, ValueError, wire.Bad, msgspec.MsgspecError):
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
        self.dec = msgspec.msgpack.Decoder(wire.FROM)
        self.buf = helper.buf if helper is not None else bytearray()  # (what came after a timeline it built)
        self.sent: set[Tuple[int, float]] = set()
        self.started: set[Tuple[int, float]] = set()
        self.order: List[Tuple[int, float]] = []  # the replays wanted, in the order they were
        self.scenarios_sent: set[int] = set()
        if helper is not None and not held:  # (``held``: it built the timeline itself)
            for m in wire.line(tl):  # a column at a time: the pipe takes it while the other process reads
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
                msgs.append(wire.Job(number, scale))
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
            msgs.append(wire.sc(number, sc))
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
                    raise wire.Bad("stalled")
                self._read()
        except (OSError, ValueError, wire.Bad, msgspec.MsgspecError):
            self.close()  # whatever it was doing is done here

    def _mine(self, key: Tuple[int, float]) -> None:
        """Works the replay out here (the other process, if it has it, is told to drop it)."""
        if key in self.sent and self.helper is not None:
            self._send([wire.Drop(*key)])
        self.done[key] = replay(self.tl, key[1], self.kept[key[0]])

    def _read(self) -> None:
        fd = self.helper.fd  # type: ignore[union-attr]
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                raise wire.Bad("it ended")
            self.buf += data
            for m in frames(self.buf, self.dec, _MAX_FRAME):
                key = (m.number, m.scale)
                if key not in self.sent:
                    raise wire.Bad("a job never sent")
                if isinstance(m, wire.Started):
                    self.started.add(key)
                else:
                    self.done.setdefault(key, m.us)

    def _send(self, msgs: List[Any]) -> None:
        if self.helper is not None and msgs and not self.helper.send(msgs):
            self.close()


# --- the second process --------------------------------------------------------------------------

def main(argv: List[str]) -> int:
    """The second process: reads the timeline (or what it is built from: it then builds it and sends it back),
    the scenarios and the jobs from its input, and replays the newest job wanted first, saying when it starts one
    and what it found; exits at the end of its input."""
    inbox: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    # a thread reads the input as it comes, so that the other side never waits on a full pipe while a
    # replay runs here (it takes the interpreter lock only for each read)
    threading.Thread(target=_pump, args=(sys.stdin.buffer.fileno(), inbox), daemon=True).start()
    out: IO[bytes] = sys.stdout.buffer
    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(wire.TO)
    buf = bytearray()
    tl: Optional[Timeline] = None
    head: Optional[Union[wire.Line, wire.Build]] = None
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
                if isinstance(m, (wire.Line, wire.Build)):
                    head, cols = m, {}
                elif isinstance(m, wire.Col):
                    cols[m.name] = wire.column(m)
                    if isinstance(head, wire.Line) and len(cols) == len(wire.COLUMNS):
                        tl, cols = wire.timeline_of(head, cols), {}
                    elif isinstance(head, wire.Build) and len(cols) == len(wire.INPUTS):
                        tl, cols = wire.built(head, cols), {}
                        for line in wire.line(tl):  # the timeline, back to the process that asked
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
        out.write(frame(enc, wire.Started(*key)))
        out.flush()
        us = replay(tl, key[1], scenarios[key[0]])
        out.write(frame(enc, wire.Done(*key, us)))
        out.flush()


def _job(m: Any, scenarios: dict[int, Scenario], stack: List[Tuple[int, float]],
         dropped: set[Tuple[int, float]]) -> None:
    """A scenario, a job or a job dropped, as the second process keeps them."""
    if isinstance(m, wire.Sc):
        scenarios[m.number] = wire.scenario(m)
    elif isinstance(m, wire.Job):
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
