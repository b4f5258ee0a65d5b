"""What travels between a summary and the replays' second process (``replays``): frames of 8 bytes of length
(little-endian), then msgpack. To the second process: what the timeline is built from, or the timeline itself;
each scenario once; jobs by the scenario's number, and jobs no longer wanted. From it: the timeline it built, a
job started, a job done. Arrays travel as their bytes (doubles to the last bit), and what comes is checked
(``Bad``) before it is used.
"""

from __future__ import annotations

from array import array
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import msgspec

from perfstack.profile import actions
from perfstack.profile.actions import Calls, Windows, Work
from perfstack.profile.cpu import CpuSpans
from perfstack.profile.simulate import Ragged, Scenario, Timeline
from perfstack.profile.timeline import Spans


_Num = Union[int, float]  # a time as it was worked out: an int stays one


class Line(msgspec.Struct, array_like=True, tag=0):
    """The timeline's scalars; its columns follow, one Col each (COLUMNS)."""
    t0: _Num
    n_steps: int
    tail_us: _Num
    latency_us: _Num


class Build(msgspec.Struct, array_like=True, tag=7):
    """What the timeline is built from, to the second process: the runtime calls' distinct names and the steps'
    windows; the columns follow, one Col each (INPUTS)."""
    names: List[str]
    windows: List[Tuple[int, _Num, _Num]]


class Col(msgspec.Struct, array_like=True, tag=6):
    name: str
    data: bytes


# a frozen timeline's columns, with the type of each array; "ends" and "flat" are its events
COLUMNS = {"kind": "b", "step": "q", "dur": "d", "gap": "d", "gap_dl": "d", "gap_alloc": "d", "gap_op": "d",
           "alloc_sync": "b", "ends": "q", "flat": "q", "g_dur": "d", "g_stream": "q", "g_bubble": "d", "g_dep": "b",
           "g_index": "q", "g_action": "q"}
_PER_ACTION = ("kind", "step", "dur", "gap", "gap_dl", "gap_alloc", "gap_op", "alloc_sync", "ends")
_PER_EVENT = ("g_dur", "g_stream", "g_bubble", "g_dep", "g_index", "g_action")
# what it is built from (actions.Calls as c_, actions.Work as w_, the names as indexes into Build.names; the
# cpu.CpuSpans' starts and ends)
_SPANS = ("dataloader", "alloc", "sync", "ops")
INPUTS = {"c_ts": "d", "c_dur": "d", "c_name": "q", "w_ts": "d", "w_dur": "d", "w_stream": "q", "w_kernel": "b",
          "w_launch": "q", "w_step": "q", **{f"{k}_{end}": "d" for k in _SPANS for end in ("starts", "ends")}}


class Sc(msgspec.Struct, array_like=True, tag=1):
    number: int
    keep_sync: str
    no_dataloader: bool
    no_allocator: bool
    graph: bool
    g_dur: Optional[bytes]
    g_bubble: Optional[bytes]
    no_dispatch: bytes  # array("q")
    eager: bytes = b""  # array("q")


class Key(msgspec.Struct, array_like=True):
    number: int  # the scenario's
    scale: float


class Job(Key, tag=2):
    pass


class Drop(Key, tag=3):
    pass


class Started(Key, tag=4):
    pass


class Done(Key, tag=5):
    us: float


TO = Union[Line, Build, Col, Sc, Job, Drop]
FROM = Union[Started, Done]
BUILT = Union[Line, Col]


class Bad(Exception):
    """The other process sent something that is not its frames."""


def line(t: Timeline) -> Iterator[Union[Line, Col]]:
    """The frozen timeline as it travels, a column at a time (each as the bytes of the array it is: a copy of
    one column, not of the whole, is made to send it)."""
    yield Line(t.t0, t.n_steps, t.tail_us, t.latency_us)
    events = t.events if isinstance(t.events, Ragged) else Ragged.of(t.events)
    for name, code in COLUMNS.items():
        yield _col(name, code, getattr(events, name) if name in ("ends", "flat") else getattr(t, name))


def _col(name: str, code: str, xs: Any) -> Col:
    """A column as it travels: the bytes of the array it is (an array of ``code`` made where it is not one)."""
    if not (isinstance(xs, array) and xs.typecode == code):
        xs = array(code, xs)
    return Col(name, memoryview(xs).cast("B"))  # type: ignore[arg-type]


def column(m: Col) -> array[Any]:
    code = COLUMNS.get(m.name) or INPUTS.get(m.name)
    if code is None:
        raise Bad(f"no column {m.name[:40]!r}")
    out = array(code)
    try:
        out.frombytes(m.data)
    except ValueError as e:
        raise Bad(f"column {m.name}: {e}") from None
    return out


def timeline_of(head: Line, a: Dict[str, array[Any]]) -> Timeline:
    """The timeline its columns make (Bad where they do not make one)."""
    if len({len(a[k]) for k in _PER_ACTION}) != 1 or len({len(a[k]) for k in _PER_EVENT}) != 1:
        raise Bad("columns of unequal length")
    n, n_actions = len(a["g_dur"]), len(a["kind"])
    if any(not 0 <= e < n for e in a["flat"]) or any(not -1 <= x < n_actions for x in a["g_action"]):
        raise Bad("an event or an action out of range")
    if any(e < 0 for e in a["g_index"]):
        raise Bad("a negative event index")
    try:
        events = Ragged(a.pop("flat"), a.pop("ends"))
    except ValueError as e:
        raise Bad(str(e)) from None
    return Timeline(head.t0, head.n_steps, head.tail_us, kind=a["kind"], dur=a["dur"], step=a["step"], gap=a["gap"],
                    gap_dl=a["gap_dl"], gap_alloc=a["gap_alloc"], gap_op=a["gap_op"], alloc_sync=a["alloc_sync"],
                    events=events, g_dur=a["g_dur"], g_stream=a["g_stream"], g_bubble=a["g_bubble"], g_dep=a["g_dep"],
                    g_index=a["g_index"], g_action=a["g_action"], latency_us=head.latency_us).freeze()


def inputs(calls: Calls, work: Work, windows: Windows, cs: CpuSpans) -> Iterator[Union[Build, Col]]:
    """What the timeline is built from, as it travels (OverflowError, TypeError: a value no array holds)."""
    table: Dict[str, int] = {}
    names = array("q", [table.setdefault(n, len(table)) for n in calls.name])
    yield Build(list(table), [tuple(w) for w in windows])
    cols: Dict[str, Any] = {"c_ts": calls.ts, "c_dur": calls.dur, "c_name": names, "w_ts": work.ts, "w_dur": work.dur,
                            "w_stream": work.stream, "w_kernel": work.kernel, "w_launch": work.launch,
                            "w_step": work.step}
    for k in _SPANS:
        spans = getattr(cs, k)
        cols[f"{k}_starts"], cols[f"{k}_ends"] = spans.starts, spans.ends
    for name, code in INPUTS.items():
        yield _col(name, code, cols[name])


def built(head: Build, a: Dict[str, array[Any]]) -> Timeline:
    """The timeline built from its inputs (Bad where they do not make one)."""
    if len({len(a[k]) for k in INPUTS if k.startswith("c_")}) != 1 or \
            len({len(a[k]) for k in INPUTS if k.startswith("w_")}) != 1 or not head.windows:
        raise Bad("inputs of unequal length")
    n_names, n_calls = len(head.names), len(a["c_ts"])
    if any(not 0 <= i < n_names for i in a["c_name"]) or any(not -1 <= j < n_calls for j in a["w_launch"]):
        raise Bad("a name or a launch out of range")
    calls = Calls(a["c_ts"], a["c_dur"], list(map(head.names.__getitem__, a["c_name"])))
    work = Work(a["w_ts"], a["w_dur"], a["w_stream"], a["w_kernel"], a["w_launch"], a["w_step"])
    try:
        cs = CpuSpans(*(Spans.of_merged(a[f"{k}_starts"], a[f"{k}_ends"]) for k in _SPANS))
    except ValueError as e:
        raise Bad(str(e)) from None
    return actions.build(calls, work, head.windows, cs)


def sc(number: int, s: Scenario) -> Sc:
    def d(xs: Any) -> Optional[bytes]:
        return None if xs is None else array("d", xs).tobytes()
    return Sc(number, s.keep_sync, s.no_dataloader, s.no_allocator, s.graph, d(s.g_dur), d(s.g_bubble),
              array("q", sorted(s.no_dispatch)).tobytes(), array("q", sorted(s.eager)).tobytes())


def scenario(m: Sc) -> Scenario:
    def d(data: Optional[bytes]) -> Optional[array[float]]:
        if data is None:
            return None
        out = array("d")
        out.frombytes(data)
        return out
    gone, eager = array("q"), array("q")
    gone.frombytes(m.no_dispatch)
    eager.frombytes(m.eager)
    return Scenario(keep_sync=m.keep_sync, no_dataloader=m.no_dataloader, no_allocator=m.no_allocator,
                    graph=m.graph, g_dur=d(m.g_dur), g_bubble=d(m.g_bubble), no_dispatch=frozenset(gone),
                    eager=frozenset(eager))
