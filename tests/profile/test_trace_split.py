"""A large plain trace read by two processes (profile/traceread.py, tracehalf.py) gives the trace a serial
reading gives, field by field; and every way the split can go wrong (the second process killed, stalled
or sending junk, a split point inside a string or outside the event list, a cut or damaged file) falls
back to the serial reading with the same result. The size threshold is lowered so that small real
traces take the split path."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import re
import sys
import time
from pathlib import Path

import pytest
from damage import mutate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfstack
from perfstack.errors import InputError
from perfstack.profile import trace as trace_mod
from perfstack.profile import traceread, tracerepair
from perfstack.profile.trace import Trace

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
spare_core = traceread.spare_core
# real traces of each kind: shapes recorded, [memory] events, two ranks' DDP, a holdout workload, a large one
REAL = [TRACES / "h100" / "host-sync.pt.trace.json.gz",
        TRACES / "h100" / "pageable-memcpy.pt.trace.json.gz",
        TRACES / "h200x2" / "ddp-not-overlapped.rank1.pt.trace.json.gz",
        TRACES / "validation" / "h200-holdout" / "resnet18.pt.trace.json.gz",
        TRACES / "validation" / "h200-holdout" / "kv-cat-long.pt.trace.json.gz",
        TRACES / "validation" / "h100" / "gpt2-slow.pt.trace.json.gz"]
SMALL = REAL[1]


@pytest.fixture
def splits(monkeypatch):
    """Every plain file is split; returns the list of the splits that were kept (one per load)."""
    kept: list[int] = []
    merge = traceread._merge

    def counted(*a):
        kept.append(1)
        return merge(*a)

    monkeypatch.setattr(traceread, "MIN_BYTES", 0)
    monkeypatch.setattr(traceread, "spare_core", lambda: True)  # whatever else the machine is doing
    monkeypatch.setattr(traceread, "_merge", counted)
    return kept


def serial(p: Path, lenient: bool = False) -> Trace:
    limit = traceread.MIN_BYTES
    traceread.MIN_BYTES = 1 << 62
    try:
        return trace_mod._load(p, lenient)
    finally:
        traceread.MIN_BYTES = limit


def plain(tmp_path: Path, src: Path, name: str = "") -> Path:
    p = tmp_path / (name or src.name.removesuffix(".gz"))
    p.write_bytes(gzip.decompress(src.read_bytes()))
    return p


def write(tmp_path: Path, data: bytes | dict | list, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return p


def assert_same(a: Trace, b: Trace) -> None:
    for f in dataclasses.fields(Trace):
        assert getattr(a, f.name) == getattr(b, f.name), f.name


@pytest.mark.parametrize("src", REAL, ids=lambda p: p.name)
def test_real_traces_read_in_two_halves_equal_the_serial_reading(tmp_path, splits, src):
    p = plain(tmp_path, src)
    t = trace_mod.load(p)
    assert splits == [1]  # the split was kept, not fallen back from
    assert_same(t, serial(p))
    # the second half's names, thread ids and shapes are the first half's objects, not copies per event
    for attr in ("name", "tid", "dims", "types"):
        values = [getattr(e, attr) for e in t.ops if getattr(e, attr) is not None]
        by_value = {json.dumps(v): v for v in values}
        assert all(by_value[json.dumps(v)] is v for v in values), attr


def test_a_second_process_done_before_this_one_is_read_whole(tmp_path, splits, monkeypatch):
    # its last frames and the end of its pipe come in the same read
    drain = traceread._Receiver.drain

    def late(self):
        if not hasattr(self, "waited"):
            self.waited = True
            time.sleep(3)
        return drain(self)

    monkeypatch.setattr(traceread._Receiver, "drain", late)
    p = plain(tmp_path, REAL[0])
    assert_same(trace_mod.load(p), serial(p))
    assert splits == [1]


def test_the_array_form_and_metadata_after_the_event_list(tmp_path, splits):
    d = json.loads(gzip.decompress(SMALL.read_bytes()))
    events = d.pop("traceEvents")
    after = {"deviceProperties": [{"id": 0, "name": "Late GPU", "totalGlobalMem": 8 << 30}],
             "distributedInfo": {"rank": 3, "world_size": 4}, "metadata": {"run": "x"}}
    before = {k: v for k, v in d.items() if k not in after}
    text = json.dumps(before)[:-1].encode() + b', "traceEvents": ' + json.dumps(events, indent=1).encode() \
        + b", " + json.dumps(after)[1:].encode()
    p = write(tmp_path, text)
    t = trace_mod.load(p)
    assert t.device_names == {0: "Late GPU"} and t.rank == 3 and t.meta["run"] == "x"
    assert_same(t, serial(p))
    q = write(tmp_path, events, "array.json")
    assert_same(trace_mod.load(q), serial(q))
    assert splits == [1, 1]


def test_memory_peaks_and_steps_in_both_halves(tmp_path, splits):
    d = json.loads(gzip.decompress(REAL[3].read_bytes()))
    events = d["traceEvents"]
    half = len(events) // 2
    mem = [e for e in events if e.get("name") == "[memory]"]
    assert mem
    low, high = dict(mem[0], args=dict(mem[0]["args"])), dict(mem[0], args=dict(mem[0]["args"]))
    low["args"]["Total Allocated"] = 1
    high["args"]["Total Allocated"] = 1 << 40
    extra = dict(high, args=dict(high["args"], **{"Device Id": 7, "Total Reserved": 5}))
    d["traceEvents"] = events[:half // 2] + [low] + events[half // 2:] + [high, extra]
    p = write(tmp_path, d)
    t = trace_mod.load(p)
    assert splits == [1] and t.peak_allocated[mem[0]["args"]["Device Id"]] == 1 << 40 and 7 in t.peak_reserved
    assert_same(t, serial(p))


# --- falling back ---------------------------------------------------------------------------------

def fallback(p: Path, splits: list[int]) -> Trace:
    t = trace_mod.load(p)
    assert splits == []
    assert_same(t, serial(p))
    return t


def test_small_compressed_lenient_and_busy_readings_are_not_split(tmp_path, monkeypatch):
    def refuse(*a):
        raise AssertionError("split")

    monkeypatch.setattr(traceread, "_split", refuse)
    monkeypatch.setattr(traceread, "spare_core", lambda: True)
    trace_mod.load(SMALL)  # gzip
    trace_mod.load(plain(tmp_path, SMALL))  # below MIN_BYTES
    monkeypatch.setattr(traceread, "MIN_BYTES", 0)
    trace_mod._load(plain(tmp_path, SMALL), lenient=True)
    monkeypatch.setattr(traceread.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    monkeypatch.setattr(traceread, "spare_core", spare_core)
    trace_mod.load(plain(tmp_path, SMALL))  # a busy machine
    monkeypatch.setattr(traceread, "spare_core", lambda: True)
    with pytest.raises(AssertionError):
        trace_mod.load(plain(tmp_path, SMALL))


def child(monkeypatch, code: str) -> None:
    """The second process replaced by a program of the test's."""
    monkeypatch.setattr(traceread, "_child_command", lambda *a: [sys.executable, "-c", code])


@pytest.mark.parametrize("code", [
    "import os; os.kill(os.getpid(), 9)",  # killed before it sends anything
    "import sys; sys.stdout.buffer.write(b'\\x10' + bytes(7) + b'junk' * 4)",  # a frame of junk
    "import sys; sys.stdout.buffer.write(b'\\xff' * 8)",  # a frame longer than any
    "import sys; sys.stdout.buffer.write(bytes(4))",  # a cut frame header
    "pass",  # nothing, and exit 0
    "import sys; sys.exit(3)",
], ids=["killed", "junk", "huge-frame", "cut-header", "silent", "refusal"])
def test_a_second_process_that_fails_is_read_around(tmp_path, splits, monkeypatch, code):
    child(monkeypatch, code)
    fallback(plain(tmp_path, REAL[0]), splits)


def test_a_second_process_killed_after_sending_part_of_its_events(tmp_path, splits, monkeypatch):
    root = str(Path(perfstack.__file__).resolve().parents[1])
    p = plain(tmp_path, REAL[0])
    size, comma, start, obj = traceread._plan(p)
    code = (f"import os, sys; sys.path.insert(0, {root!r})\n"
            "from perfstack.profile import traceread, tracehalf\n"
            "traceread.CHUNK = traceread.COLLECT = 16\n"
            "send, n = traceread.Sender.chunk, []\n"
            "def chunk(self):\n"
            "    send(self); self.out.flush(); n.append(1)\n"
            "    if len(n) == 3: os.kill(os.getpid(), 9)\n"
            "traceread.Sender.chunk = chunk\n"
            f"sys.exit(tracehalf.main([{str(p)!r}, '{start}', '{size}', '{int(obj)}']))")
    child(monkeypatch, code)
    fallback(p, splits)


def test_junk_after_the_end_and_a_junk_chunk_are_refused(tmp_path, splits, monkeypatch):
    root = str(Path(perfstack.__file__).resolve().parents[1])
    p = plain(tmp_path, REAL[0])
    size, comma, start, obj = traceread._plan(p)
    for patch in ("end = traceread.Sender.end\n"
                  "traceread.Sender.end = lambda self, *a: (end(self, *a), self.out.write(b'x'))",
                  "columns = traceread.Sender._columns\n"  # one column an event short
                  "def short(self, c, events):\n"
                  "    r = columns(self, c, events)\n"
                  "    if events and c is traceread._Cpu:\n"
                  "        r.strides = r.strides[:-1]\n"
                  "    return r\n"
                  "traceread.Sender._columns = short"):
        code = (f"import sys; sys.path.insert(0, {root!r})\n"
                "from perfstack.profile import traceread, tracehalf\n"
                f"{patch}\n"
                f"sys.exit(tracehalf.main([{str(p)!r}, '{start}', '{size}', '{int(obj)}']))")
        child(monkeypatch, code)
        fallback(p, splits)


def test_a_stalled_second_process_is_given_up(tmp_path, splits, monkeypatch):
    monkeypatch.setattr(traceread, "STALL_S", 0.5)
    child(monkeypatch, "import time; time.sleep(60)")
    fallback(plain(tmp_path, SMALL), splits)


def at_boundary(monkeypatch, raw: bytes, after: int) -> None:
    """The split planned at the first '},{' after the byte ``after``."""
    m = re.compile(rb"\}\s*,\s*\{").search(raw, after)
    assert m
    monkeypatch.setattr(traceread, "_plan", lambda q: (len(raw), raw.index(b",", m.start()), m.end() - 1, True))


def test_a_split_inside_a_string_is_refused(tmp_path, splits, monkeypatch):
    d = json.loads(gzip.decompress(SMALL.read_bytes()))
    events = d["traceEvents"]
    # a name that holds what looks like an event boundary, and then a whole event
    evil = dict(next(e for e in events if e.get("cat") == "kernel"),
                name='k},{"ph": "X", "cat": "kernel", "name": "forged", "ts": 1, "dur": 1},{"x": "')
    events.insert(len(events) // 2, evil)
    p = write(tmp_path, d)
    raw = p.read_bytes()
    at_boundary(monkeypatch, raw, raw.index(b'"k},{'))
    t = fallback(p, splits)
    assert "forged" not in {e.name for e in t.gpu}


def test_a_split_outside_the_event_list_is_refused(tmp_path, splits, monkeypatch):
    d = json.loads(gzip.decompress(SMALL.read_bytes()))
    # a list of objects after the event list: its '},{' is not between two events
    d["otherEvents"] = [{"ph": "X", "cat": "kernel", "name": "other", "ts": 1, "dur": 1}] * 3
    p = write(tmp_path, d)
    raw = p.read_bytes()
    at_boundary(monkeypatch, raw, raw.index(b'"otherEvents"'))
    t = fallback(p, splits)
    assert "other" not in {e.name for e in t.gpu}


def test_a_split_inside_an_event_is_refused(tmp_path, splits, monkeypatch):
    d = json.loads(gzip.decompress(SMALL.read_bytes()))
    e = dict(next(e for e in d["traceEvents"] if e.get("cat") == "kernel"))
    e["args"] = dict(e["args"], extra=[{"a": 1}, {"b": 2}])
    d["traceEvents"].insert(len(d["traceEvents"]) // 2, e)
    p = write(tmp_path, d)
    raw = p.read_bytes()
    at_boundary(monkeypatch, raw, raw.index(b'"extra"'))
    fallback(p, splits)


@pytest.mark.parametrize("frac", [0.3, 0.55, 0.9])
def test_a_truncated_file(tmp_path, splits, frac):
    raw = gzip.decompress(REAL[0].read_bytes())
    t = fallback(write(tmp_path, raw[:int(len(raw) * frac)]), splits)
    assert "truncated" in t.warnings[0]


def test_an_odd_event_in_either_half(tmp_path, splits):
    d = json.loads(gzip.decompress(SMALL.read_bytes()))
    odd = dict(next(e for e in d["traceEvents"] if e.get("cat") == "kernel"), ts="12.5")  # a string time
    first = dict(d, traceEvents=d["traceEvents"][:5] + [odd] + d["traceEvents"][5:])
    p = write(tmp_path, first, "first.json")
    assert_same(trace_mod.load(p), serial(p))  # read leniently in this process's half: the split stands
    assert splits == [1]
    splits.clear()
    d["traceEvents"].insert(len(d["traceEvents"]) * 3 // 4, odd)  # the other process refuses it
    fallback(write(tmp_path, d), splits)


def test_a_file_that_grows_while_it_is_read(tmp_path, splits, monkeypatch):
    p = plain(tmp_path, REAL[0])
    plan = traceread._plan(p)
    with open(p, "ab") as f:
        f.write(b"\n\n")
    with pytest.raises(traceread._Odd):
        list(traceread.part(p, plan[2], plan[0], b"", b"", end=True))
    monkeypatch.setattr(traceread, "_plan", lambda q: plan)
    fallback(p, splits)


def test_events_the_standard_library_reads_in_this_half(tmp_path, splits, monkeypatch):
    d = json.loads(gzip.decompress(SMALL.read_bytes()))
    k = next(e for e in d["traceEvents"] if e.get("cat") == "kernel")
    for at in (len(d["traceEvents"]) * 3 // 4, 40):
        d["traceEvents"][at:at] = [dict(k, ts=math.nan), dict(k, dur=-math.inf), dict(k, name="kept", ts=k["ts"] + 1)]
    p = write(tmp_path, json.dumps(d, indent=1).encode())
    monkeypatch.setattr(tracerepair, "_MAX_PATCHES", 0)  # NaN read by json.JSONDecoder, event by event
    monkeypatch.setattr(tracerepair, "_NONFINITE_VALUE", re.compile(rb"(?!)(x)"))
    t = fallback(p, splits)
    assert t.skipped_events == 4 and sum(g.name == "kept" for g in t.gpu) == 2


# --- any damage, both ways --------------------------------------------------------------------------

BASE = gzip.decompress(SMALL.read_bytes())
TOKENS = [b"NaN", b"}", b"]", b"{", b"[", b'"', b",", b"},{", b"null", b"\xff", b"\\", b'"ts": ', b"\n"]
edit = st.tuples(st.sampled_from(["insert", "delete", "truncate"]), st.floats(0, 1), st.integers(1, 64),
                 st.sampled_from(TOKENS))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=st.lists(edit, min_size=1, max_size=4))
def test_damaged_traces_read_in_halves_or_serially_agree(tmp_path, monkeypatch, edits):
    p = write(tmp_path, mutate(BASE, edits), "fuzz.json")
    monkeypatch.setattr(traceread, "spare_core", lambda: True)
    try:
        want = serial(p)
    except InputError as e:
        monkeypatch.setattr(traceread, "MIN_BYTES", 0)
        with pytest.raises(InputError) as got:
            trace_mod.load(p)
        assert got.value.message == e.message
        return
    monkeypatch.setattr(traceread, "MIN_BYTES", 0)
    assert_same(trace_mod.load(p), want)
