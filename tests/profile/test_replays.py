"""The replays shared with a second process (profile/replays.py) give the figures a serial replay gives, to the
last bit, whichever process works each out; and whatever goes wrong with the second process (it dies, stalls,
sends what is not its frames), the figures are still right, worked out here."""

from __future__ import annotations

import random
from array import array
import subprocess
import sys
import time
from pathlib import Path
from typing import Union

import msgspec
import pytest
from test_replay_exact import random_timeline, scenarios

from perfstack.profile import busy, replays
from perfstack.profile import replaywire as wire
from perfstack.profile.cores import frame
from perfstack.profile.replays import Helper, Replays
from perfstack.profile.simulate import Ragged, Scenario, Timeline, replay

T = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SCALES = (1.0, 0.7234, 0.2, 0.3547)


def timeline(seed: int, n: int = 400) -> tuple[Timeline, list[Scenario]]:
    rng = random.Random(seed)
    t = random_timeline(rng, n)
    return t.freeze(), scenarios(rng, t)


def bits(xs: list[float]) -> list[str]:
    return [x.hex() for x in xs]


def serial(t: Timeline, scs: list[Scenario]) -> list[str]:
    return bits([replay(t, s, sc) for sc in scs for s in SCALES])


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second process for any timeline, whatever else the machine is doing."""
    monkeypatch.setattr(replays, "MIN_CALLS", 0)
    monkeypatch.setattr(replays, "spare_core", lambda: True)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many replays this process works out itself."""
    n = [0]
    plain = replays.replay

    def mine(*a: object) -> float:
        n[0] += 1
        return plain(*a)  # type: ignore[arg-type]
    monkeypatch.setattr(replays, "replay", mine)
    return n


def travelled(t: Timeline) -> Timeline:
    """The timeline as the second process builds it from the frames it is sent."""
    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(Union[wire.Line, wire.Col])
    head, *cols = [dec.decode(enc.encode(m)) for m in wire.line(t)]
    return wire.timeline_of(head, {m.name: wire.column(m) for m in cols})


def test_the_timeline_and_scenarios_travel_to_the_last_bit() -> None:
    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(wire.Sc)
    for seed in range(8):
        t, scs = timeline(seed, 60)
        there = travelled(t)
        assert list(map(list, there.events)) == list(map(list, t.events))
        for sc in scs:
            theirs = wire.scenario(dec.decode(enc.encode(wire.sc(3, sc))))
            assert bits([replay(there, s, theirs) for s in SCALES]) == bits([replay(t, s, sc) for s in SCALES])


def test_columns_that_do_not_make_a_timeline_are_refused() -> None:
    t, _ = timeline(1, 30)
    head, *cols = list(wire.line(t))
    arrays = {m.name: wire.column(m) for m in cols}
    for name, broken in (("gap", arrays["gap"][:-1]),  # one action's work short
                         ("flat", array("q", [len(t.g_dur)] + list(arrays["flat"][1:]))),  # an event past the last
                         ("ends", array("q", reversed(arrays["ends"])))):  # lists that end before they start
        with pytest.raises(wire.Bad):
            wire.timeline_of(head, {**arrays, name: broken})
    with pytest.raises(wire.Bad):
        wire.column(wire.Col("nothing", b""))
    with pytest.raises(wire.Bad):
        wire.column(wire.Col("gap", b"123"))  # not a whole double


def test_a_frozen_timeline_holds_its_events_flat_and_replays_as_before() -> None:
    rng = random.Random(11)
    t = random_timeline(rng, 300)
    lists = [list(evs) for evs in t.events]
    before = [replay(t, s, sc) for sc in scenarios(random.Random(11), t) for s in SCALES]
    t.freeze()
    assert isinstance(t.events, Ragged) and [list(evs) for evs in t.events] == lists
    assert [list(t.events[i]) for i in range(len(lists))] == lists and list(t.events[-1]) == lists[-1]
    assert bits([replay(t, s, sc) for sc in scenarios(random.Random(11), t) for s in SCALES]) == bits(before)


def wait_for_theirs(rp: Replays, n: int) -> None:
    """Until the second process has sent n figures (it works while this process does something else)."""
    end = time.monotonic() + 20
    while len(rp.done) < n and time.monotonic() < end:
        rp._read()
        time.sleep(0.01)


def shared(t: Timeline) -> tuple[Replays, Helper]:
    helper = replays.start(1)
    assert helper is not None
    return Replays(t, helper), helper


def test_the_second_process_gives_the_same_figures(forced: None, counted: list[int]) -> None:
    t, scs = timeline(7)
    want = serial(t, scs)
    counted[0] = 0
    rp, helper = shared(t)
    try:
        rp.want((sc, s) for sc in scs for s in SCALES)
        wait_for_theirs(rp, 5)
        got = bits([rp.replay(s, sc) for sc in scs for s in SCALES])
    finally:
        helper.close()
    assert got == want
    assert counted[0] < len(want)  # the other process worked some of them out
    assert bits([rp.replay(s, sc) for sc in scs for s in SCALES]) == want  # each once: asked again, the same


def test_replays_asked_for_before_they_are_wanted_are_worked_out_here(forced: None, counted: list[int]) -> None:
    t, scs = timeline(8)
    want = serial(t, scs)
    counted[0] = 0
    rp, helper = shared(t)
    try:
        got = bits([rp.replay(s, sc) for sc in scs for s in SCALES])  # nothing wanted: none sent
    finally:
        helper.close()
    assert got == want and counted[0] == len(want)


def test_without_a_spare_core_or_a_large_trace_there_is_no_second_process(monkeypatch: pytest.MonkeyPatch) -> None:
    assert replays.start(replays.MIN_CALLS - 1) is None
    monkeypatch.setattr(replays, "spare_core", lambda: False)
    assert replays.start(10**9) is None
    t, scs = timeline(2, 50)
    rp = Replays(t)  # no helper: every replay here, once
    rp.want([(scs[0], 1.0)])
    assert rp.replay(1.0, scs[0]).hex() == replay(t, 1.0, scs[0]).hex()


def helper_running(code: str) -> Helper:
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    return Helper(proc)


READ_AWAY = "import sys\nwhile sys.stdin.buffer.read(1 << 16): pass\n"  # takes what it is sent, answers nothing


@pytest.mark.parametrize("answer", [
    "sys.stdout.buffer.write(b'not a frame at all, but long enough to be read as one'); sys.stdout.flush()",
    "sys.exit(3)",  # dies
    # a figure for a job never sent
    "sys.stdout.buffer.write(FRAME_DONE_UNKNOWN); sys.stdout.flush()",
])
def test_a_second_process_that_misbehaves_is_given_up(answer: str) -> None:
    t, scs = timeline(3, 200)
    want = serial(t, scs)
    done = frame(msgspec.msgpack.Encoder(), wire.Done(999, 1.0, 1.0))
    code = f"import sys, time\nFRAME_DONE_UNKNOWN = {done!r}\n{answer}\n{READ_AWAY}"
    helper = helper_running(code)
    rp = Replays(t, helper)
    try:
        rp.want((sc, s) for sc in scs for s in SCALES)
        time.sleep(0.3)
        got = bits([rp.replay(s, sc) for sc in scs for s in SCALES])
    finally:
        helper.close()
    assert got == want
    assert rp.helper is None  # given up


def test_a_stalled_second_process_is_waited_for_no_longer_than_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    t, scs = timeline(4, 200)
    monkeypatch.setattr(replays, "STALL_S", 0.5)
    started = frame(msgspec.msgpack.Encoder(), wire.Started(0, 1.0))  # says it started the first job, then nothing
    helper = helper_running(f"import sys, time\nsys.stdout.buffer.write({started!r}); sys.stdout.flush()\n"
                            "time.sleep(60)")
    rp = Replays(t, helper)
    try:
        rp.want([(scs[0], 1.0)])
        time.sleep(0.3)
        t0 = time.monotonic()
        got = rp.replay(1.0, scs[0])
        waited = time.monotonic() - t0
    finally:
        helper.close()
    assert got.hex() == replay(t, 1.0, scs[0]).hex()
    assert rp.helper is None and waited < 5


def test_closing_ends_a_busy_second_process_at_once(forced: None) -> None:
    t, scs = timeline(5, 3000)
    rp, helper = shared(t)
    rp.want((sc, s) for sc in scs for s in SCALES)
    time.sleep(0.2)
    t0 = time.monotonic()
    helper.close()
    assert time.monotonic() - t0 < 2 and helper.proc.returncode is not None


def test_each_waste_is_told_once_final_and_the_list_keeps_the_fusion_finding_first() -> None:
    from perfstack.profile.analyze import analyze
    from perfstack.profile.trace import load
    from perfstack.specs import lookup
    A = analyze(load(T / "validation/h100/gpt2-slow.pt.trace.json.gz")).analysis
    told: list[tuple[str, dict[int, float]]] = []
    found = busy.detect(A, lookup("h100-sxm"), lambda w: told.append((w.id, dict(w.new_dur))))
    assert [w.id for w in found] == [w.id for w in busy.detect(A, lookup("h100-sxm"))]
    assert found[0].id == "unfused-elementwise" and len(found) > 1
    assert sorted(i for i, _ in told) == sorted(w.id for w in found)
    assert told[-1][0] == "unfused-elementwise"  # last: compile_pads adds the others' to it
    assert all(new == found_w.new_dur for (_, new), found_w in zip(told, found[1:] + found[:1]))


def test_a_summary_with_the_second_process_is_the_serial_one(forced: None, counted: list[int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from perfstack.profile import summary
    from perfstack.profile.summary import profile_run
    path = T / "validation/h100/gpt2-slow.pt.trace.json.gz"
    find = summary.find_waste

    def slow(*a: object) -> object:  # time for the second process to start and take the replays wanted before
        time.sleep(1.0)
        return find(*a)  # type: ignore[arg-type]
    monkeypatch.setattr(summary, "find_waste", slow)
    counted[0] = 0
    shared = profile_run([path]).to_dict()
    mine = counted[0]
    replays.MIN_CALLS = 10**12  # (restored by monkeypatch)
    counted[0] = 0
    alone = profile_run([path]).to_dict()
    for run in (shared, alone):
        for k in ("created", "elapsed_s"):
            run["meta"].pop(k, None)
    assert shared == alone
    assert mine < counted[0]  # the second process took some


def analysed(name: str = "validation/h100/gpt2-slow.pt.trace.json.gz"):
    from perfstack.profile.analysis import Analysis
    from perfstack.profile.trace import load
    return Analysis(load(T / name))


def same_timeline(a: Timeline, b: Timeline) -> bool:
    """Column by column, to the bit."""
    def raw(t: Timeline) -> list[bytes]:
        events = t.events if isinstance(t.events, Ragged) else Ragged.of(t.events)
        return [array(code, events.flat if k == "flat" else events.ends if k == "ends" else getattr(t, k)).tobytes()
                for k, code in wire.COLUMNS.items()]
    scalars = [(x.t0, type(x.t0), x.n_steps, x.tail_us.hex(), x.latency_us.hex()) for x in (a, b)]
    return scalars[0] == scalars[1] and raw(a) == raw(b)


def test_the_second_process_builds_the_timeline_this_one_would(forced: None, counted: list[int]) -> None:
    from perfstack.profile import actions
    A = analysed()
    here = actions.timeline(A.trace, A.att, A.windows, A.cs)
    assert here is not None and len(here.kind) > 1000
    helper = replays.start(1)
    assert helper is not None
    try:
        building = replays.build(A.trace, A.att, A.windows, A.cs, helper)
        assert building
        rp = replays.timeline(A.trace, A.att, A.windows, A.cs, helper, building)
        assert rp is not None and rp.helper is helper  # its own timeline, not sent back to it
        assert same_timeline(rp.tl, here)
        assert list(rp.tl.positions()) == list(here.positions())
        counted[0] = 0
        scs = [replays.RECORDED]
        rp.want((sc, s) for sc in scs for s in SCALES)
        wait_for_theirs(rp, len(SCALES))
        assert bits([rp.replay(s, sc) for sc in scs for s in SCALES]) == serial(here, scs)
        assert counted[0] < len(SCALES)  # it replays the timeline it built
    finally:
        helper.close()


@pytest.mark.parametrize("answer", [
    "sys.stdout.buffer.write(b'not a frame at all, but long enough to be read as one'); sys.stdout.flush()",
    "sys.exit(3)",  # dies
    "sys.stdout.buffer.write(FRAME_DONE_UNKNOWN); sys.stdout.flush()",  # a figure, not a timeline
    "sys.stdout.buffer.write(FRAME_WRONG_COLUMN); sys.stdout.flush()",  # a column of what it was sent, not built
])
def test_a_second_process_that_does_not_build_the_timeline_is_given_up(answer: str) -> None:
    from perfstack.profile import actions
    A = analysed()
    here = actions.timeline(A.trace, A.att, A.windows, A.cs)
    assert here is not None
    enc = msgspec.msgpack.Encoder()
    head = frame(enc, next(iter(wire.line(here))))
    code = (f"import sys, time\nFRAME_DONE_UNKNOWN = {frame(enc, wire.Done(0, 1.0, 1.0))!r}\n"
            f"FRAME_WRONG_COLUMN = {head + frame(enc, wire.Col('c_ts', b''))!r}\n{answer}\n{READ_AWAY}")
    helper = helper_running(code)
    try:
        building = replays.build(A.trace, A.att, A.windows, A.cs, helper)
        rp = replays.timeline(A.trace, A.att, A.windows, A.cs, helper, building)
    finally:
        helper.close()
    assert rp is not None and rp.helper is None and same_timeline(rp.tl, here)
    assert rp.recorded(1.0).hex() == replay(here, 1.0, replays.RECORDED).hex()


def test_inputs_that_do_not_make_a_timeline_are_refused() -> None:
    from perfstack.profile import actions
    A = analysed()
    inputs = actions.inputs(A.trace, A.att, A.windows)
    assert inputs is not None
    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(wire.TO)
    head, *cols = [dec.decode(enc.encode(m)) for m in wire.inputs(*inputs, A.windows, A.cs)]
    arrays = {m.name: wire.column(m) for m in cols}
    assert same_timeline(wire.built(head, arrays), actions.build(*inputs, A.windows, A.cs))
    n_calls = len(arrays["c_ts"])
    for name, broken in (("c_dur", arrays["c_dur"][:-1]),  # a call's duration short
                         ("w_step", arrays["w_step"][1:]),  # an event's step short
                         ("c_name", array("q", [len(head.names)]) + arrays["c_name"][1:]),  # a name past the table
                         ("w_launch", array("q", [n_calls]) + arrays["w_launch"][1:])):  # a launch past the calls
        with pytest.raises(wire.Bad):
            wire.built(head, {**arrays, name: broken})
    with pytest.raises(wire.Bad):
        wire.built(wire.Build(head.names, []), arrays)  # no step
