"""The trace loader: real traces against an independent json.load oracle, the typed and lenient
paths against each other, malformed events, cut files, unreadable input, and a mutation fuzz."""

from __future__ import annotations

import gc
import gzip
import json
import math
from pathlib import Path

import pytest
from damage import mutate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.profile import trace as trace_mod
from perfstack.profile import tracefile, tracerepair
from perfstack.profile.trace import CpuEvent, GpuEvent, Trace, load

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
# every recorded trace small enough to keep this file fast (the largest take seconds to json.load)
REAL_TRACES = sorted(p for p in TRACES.rglob("*.pt.trace.json.gz") if p.stat().st_size < 1_500_000)
SMALL = TRACES / "h100" / "pageable-memcpy.pt.trace.json.gz"
SHAPES = TRACES / "h100" / "host-sync.pt.trace.json.gz"  # record_shapes=True, AdamW, many operators

GPU = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
RUNTIME = ("cuda_runtime", "cuda_driver")
OPS = ("cpu_op", "user_annotation", "python_function")


def text(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


def doc(path: Path = SMALL) -> dict:
    return json.loads(text(path))


def write(tmp_path: Path, data: bytes | str | dict | list, name: str = "t.json") -> Path:
    p = tmp_path / name
    if isinstance(data, (dict, list)):
        data = json.dumps(data)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def tup(v):
    return tuple(tup(x) for x in v) if isinstance(v, list) else v


def oracle(d: dict) -> dict:
    """What a plain json.load of the document says (written independently of the loader)."""
    ev = d["traceEvents"]
    x = [e for e in ev if isinstance(e, dict) and e.get("ph") == "X"]
    step = [e for e in x if e.get("cat") in ("cpu_op", "user_annotation") and e["name"].startswith("ProfilerStep#")]
    ops = [e for e in x if e.get("cat") in OPS and not e["name"].startswith("ProfilerStep#")]
    gpu = [e for e in x if e.get("cat") in GPU]
    return {
        "n_events": len(ev),
        "gpu": sorted((GPU[e["cat"]], e["name"], e["ts"], e["dur"], e["args"]["device"], e["args"]["stream"],
                       e["args"].get("correlation"), e["args"].get("External id"), e["args"].get("bytes"))
                      for e in gpu),
        "runtime": sorted((e["name"], e["ts"], e["dur"], e["tid"], e["args"].get("correlation"))
                          for e in x if e.get("cat") in RUNTIME),
        "ops": sorted((e["name"], e["ts"], e["dur"], e["tid"], e["args"].get("External id"),
                       tup(e["args"].get("Input Dims")), tup(e["args"].get("Input type"))) for e in ops),
        "steps": sorted({int(e["name"].split("#")[1]) for e in step}),
        "gpu_annotations": sorted((e["name"], e["ts"], e["dur"]) for e in x if e.get("cat") == "gpu_user_annotation"),
        "devices": {p["id"]: p["name"] for p in d.get("deviceProperties", [])},
        "base_time_ns": d.get("baseTimeNanoseconds"),
    }


def seen(t: Trace) -> dict:
    return {
        "n_events": t.n_events,
        "gpu": sorted((g.kind, g.name, g.ts, g.dur, g.device, g.stream, g.correlation, g.external_id, g.bytes)
                      for g in t.gpu),
        "runtime": sorted((r.name, r.ts, r.dur, r.tid, r.correlation) for r in t.runtime),
        "ops": sorted((o.name, o.ts, o.dur, o.tid, o.external_id, tup(o.dims), tup(o.types)) for o in t.ops),
        "steps": sorted(s.number for s in t.steps),
        "gpu_annotations": sorted((a.name, a.ts, a.dur) for a in t.gpu_annotations),
        "devices": t.device_names,
        "base_time_ns": t.base_time_ns,
    }


def assert_sorted(t: Trace) -> None:
    for lst in (t.gpu, t.gpu_annotations, t.runtime, t.ops, t.steps):
        assert all(a.ts <= b.ts for a, b in zip(lst, lst[1:]))


# --- real traces --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: f"{p.parent.name}/{p.name.split('.pt.')[0]}")
def test_real_trace_matches_a_plain_json_load(path):
    t = load(path)
    assert seen(t) == oracle(doc(path))
    assert t.skipped_events == 0 and t.warnings == []
    assert_sorted(t)
    assert all(isinstance(r, CpuEvent) and r.cat == "runtime" and r.tid is not None for r in t.runtime)
    assert all(o.dims is None and o.types is None for o in t.runtime)
    assert {o.cat for o in t.ops} <= {"op", "annotation"}
    assert all(isinstance(g, GpuEvent) and g.kind == "annotation" for g in t.gpu_annotations)


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: f"{p.parent.name}/{p.name.split('.pt.')[0]}")
def test_typed_and_lenient_paths_give_identical_traces(path):
    assert trace_mod._load(path, lenient=True) == load(path)


def test_timestamps_are_the_recorded_floats_and_steps_come_from_profiler_step():
    d, t = doc(SHAPES), load(SHAPES)
    kernels = sorted(e["ts"] for e in d["traceEvents"] if e.get("cat") == "kernel")
    assert sorted(g.ts for g in t.gpu if g.kind == "kernel") == kernels
    assert any(ts != round(ts, 0) for ts in kernels)  # fractional µs survive
    assert [s.name for s in t.steps] == [f"ProfilerStep#{s.number}" for s in t.steps]
    assert len({s.number for s in t.steps}) == len(t.steps)
    assert any(a.name.startswith("ProfilerStep#") for a in t.gpu_annotations)
    assert t.meta.get("record_shapes") == 1


def test_names_and_shapes_are_shared_and_records_are_not_gc_tracked():
    t = load(SHAPES)
    by_name: dict[str, str] = {}
    for g in t.gpu:
        assert by_name.setdefault(g.name, g.name) is g.name
    dims: dict = {}
    shaped = [o for o in t.ops if o.dims]
    assert shaped
    for o in shaped:  # one list per distinct shape, shared by the operators that have it
        assert isinstance(o.dims, list) and isinstance(o.types, list)
        assert dims.setdefault(json.dumps(o.dims), o.dims) is o.dims
    assert len(dims) < len(shaped) / 5
    assert not gc.is_tracked(t.gpu[0]) and not gc.is_tracked(t.ops[0])


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was(enabled, tmp_path):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        load(SMALL)
        assert gc.isenabled() is enabled
        with pytest.raises(InputError):
            load(write(tmp_path, b"{oops"))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_json_array_form(tmp_path):
    d = doc()
    t = load(write(tmp_path, d["traceEvents"]))
    want = oracle(d)
    got = seen(t)
    assert got["gpu"] == want["gpu"] and got["ops"] == want["ops"] and got["steps"] == want["steps"]
    assert t.device_names == {}


def test_compact_single_line_document_equals_the_indented_original(tmp_path):
    assert seen(load(write(tmp_path, doc()))) == seen(load(SMALL))


# --- malformed events ---------------------------------------------------------------------------

def kernel(d: dict) -> dict:
    return next(e for e in d["traceEvents"] if e.get("cat") == "kernel")


def op(d: dict) -> dict:
    return next(e for e in d["traceEvents"] if e.get("cat") == "cpu_op" and e["args"].get("Input Dims"))


BAD = {
    "ts string": lambda k: dict(k, ts="abc"),
    "ts null": lambda k: dict(k, ts=None),
    "ts missing": lambda k: {a: v for a, v in k.items() if a != "ts"},
    "ts list": lambda k: dict(k, ts=[1]),
    "ts bool": lambda k: dict(k, ts=True),
    "ts NaN": lambda k: dict(k, ts=math.nan),
    "ts huge int": lambda k: dict(k, ts=10**400),
    "dur negative": lambda k: dict(k, dur=-1.0),
    "dur Infinity": lambda k: dict(k, dur=math.inf),
    "dur -Infinity": lambda k: dict(k, dur=-math.inf),
    "dur object": lambda k: dict(k, dur={"a": 1}),
    "name number": lambda k: dict(k, name=3),
    "name null": lambda k: dict(k, name=None),
    "number": lambda k: 3,
    "string": lambda k: "event",
    "null": lambda k: None,
    "list": lambda k: [k],
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_event_is_skipped_and_counted(tmp_path, case):
    d = doc()
    base = seen(load(write(tmp_path, d, "base.json")))
    d["traceEvents"].insert(len(d["traceEvents"]) // 2, BAD[case](kernel(d)))
    t = load(write(tmp_path, d))
    assert t.skipped_events == 1 and "skipped 1 malformed events" in t.warnings[-1]
    got = seen(t)
    assert got["n_events"] == base["n_events"] + 1
    assert {k: v for k, v in got.items() if k != "n_events"} == {k: v for k, v in base.items() if k != "n_events"}


def test_all_malformed_events_at_once_and_on_the_lenient_path(tmp_path):
    d = doc()
    k = kernel(d)
    d["traceEvents"] += [make(k) for make in BAD.values()]
    p = write(tmp_path, d)
    t = load(p)
    assert t.skipped_events == len(BAD)
    assert trace_mod._load(p, lenient=True) == t


def test_events_of_phases_the_builder_does_not_read_are_passed_over_whatever_they_hold(tmp_path):
    """Flow arrows, counters, metadata and the rest are told by their phase and not decoded further: odd values in
    them change nothing, and the typed reading still equals the lenient one. An event with no phase or an unknown
    one sends its batch event by event, with the same result; an allocator instant is still read."""
    d = doc()
    k = kernel(d)
    base = seen(load(write(tmp_path, d, "base.json")))
    odd = {"cat": 3, "name": ["x"], "ts": "never", "dur": 10**400, "pid": {}, "tid": [], "args": "none", "id": -1}
    d["traceEvents"] += [dict(odd, ph=ph) for ph in "BEICbneSTpFstfPNODMVvRc()"]
    p = write(tmp_path, d)
    t = load(p)
    assert trace_mod._load(p, lenient=True) == t
    assert t.skipped_events == 0
    assert {f: v for f, v in seen(t).items() if f != "n_events"} == {f: v for f, v in base.items() if f != "n_events"}
    memory = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": k["ts"], "pid": 1, "tid": 1,
              "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 7 << 40, "Total Reserved": 9 << 40}}
    for extra in ([], [dict(k, ph=None)], [{f: v for f, v in k.items() if f != "ph"}], [dict(k, ph="Q")]):
        d2 = dict(d, traceEvents=d["traceEvents"] + [memory] + extra)
        p = write(tmp_path, d2, "extra.json")
        t = load(p)
        assert trace_mod._load(p, lenient=True) == t
        assert (t.peak_allocated[0], t.peak_reserved[0]) == (7 << 40, 9 << 40)
        assert seen(t)["gpu"] == base["gpu"]  # an event of no known phase is not a kernel


def test_odd_but_usable_values_are_read_leniently(tmp_path):
    d = doc()
    k, o = kernel(d), op(d)
    d["traceEvents"] += [
        dict(k, ts="123.5", dur=2, name="string ts"),  # numbers as strings, ints as floats
        dict(k, ts=124, name="args not an object", args="nope", pid=3, tid=9),
        dict(k, ts=125, name="bad args", args={"device": "x", "stream": 1.0, "correlation": 10**30,
                                                "External id": True, "bytes": "64"}, pid="gpu", tid=7),
        {"ph": "X", "cat": "kernel", "name": "no args", "ts": 127, "dur": 1, "pid": 2, "tid": 5},
        {"ph": "X", "cat": "cuda_runtime", "name": "runtime no args", "ts": 128, "dur": 1, "pid": 2, "tid": 5},
        {"ph": "X", "cat": "cpu_op", "name": "op no args", "ts": 129, "dur": 1, "pid": 2, "tid": 5},
        dict(o, ts=126, name="odd dims", tid=1.5,
             args={"Input Dims": [[2, 3], "x", [[4]], {"a": 1}], "Input type": "float", "External id": 2.9}),
    ]
    p = write(tmp_path, d)
    t = load(p)
    assert trace_mod._load(p, lenient=True) == t
    assert t.skipped_events == 0
    g = {x.name: x for x in t.gpu}
    assert (g["string ts"].ts, g["string ts"].dur) == (123.5, 2.0)
    a = g["args not an object"]
    assert (a.device, a.stream, a.correlation) == (3, 9, None)
    b = g["bad args"]
    assert (b.device, b.stream, b.correlation, b.external_id, b.bytes) == (0, 1, None, None, 64)
    odd = next(x for x in t.ops if x.name == "odd dims")
    assert odd.dims == [[2, 3], "x", [[4]], {"a": 1}] and odd.types is None and odd.external_id == 2
    assert odd.tid == 1.5
    assert (g["no args"].device, g["no args"].stream, g["no args"].correlation) == (2, 5, None)
    r = next(x for x in t.runtime if x.name == "runtime no args")
    o2 = next(x for x in t.ops if x.name == "op no args")
    assert (r.tid, r.correlation, o2.tid, o2.dims, o2.external_id) == (5, None, 5, None, None)


@pytest.mark.parametrize("n", [3, 40])  # a few NaN tokens are patched in place; many take the slow path
def test_nan_and_infinity_tokens_make_only_their_events_unusable(tmp_path, n):
    d = doc()
    base = seen(load(write(tmp_path, d, "base.json")))
    k = kernel(d)
    bad = [dict(k, ts=[math.nan, math.inf, -math.inf][i % 3]) for i in range(n)]
    d["traceEvents"] = d["traceEvents"][:50] + bad + d["traceEvents"][50:]
    d["deviceProperties"][0]["clock"] = math.nan  # ignored metadata
    k2 = dict(kernel(d), ts=k["ts"] + 0.5, name="nan in args")
    k2["args"] = dict(k2["args"], **{"blocks per SM": math.nan, "correlation": math.inf})
    d["traceEvents"].append(k2)
    t = load(write(tmp_path, d))
    assert t.skipped_events == n
    got = seen(t)
    extra = [g for g in got["gpu"] if g[1] == "nan in args"]
    assert len(extra) == 1 and extra[0][6] is None  # correlation: unusable, event kept
    got["gpu"].remove(extra[0])
    assert got["gpu"] == base["gpu"] and got["ops"] == base["ops"] and got["devices"] == base["devices"]


def test_the_standard_library_fallback_reads_the_same_trace(tmp_path, monkeypatch):
    # what msgspec cannot take at all goes through json.JSONDecoder event by event: force that path
    d = doc()
    k = kernel(d)
    d["traceEvents"][40:40] = [dict(k, ts=math.nan), dict(k, dur=-math.inf), dict(k, name="kept", ts=k["ts"] + 1)]
    raw = json.dumps(d, indent=1).encode()
    fast = load(write(tmp_path, raw, "fast.json"))
    cut = load(write(tmp_path, raw[: len(raw) * 3 // 4], "cut.json"))
    monkeypatch.setattr(tracerepair, "_MAX_PATCHES", 0)
    monkeypatch.setattr(tracerepair, "_NONFINITE_VALUE", tracerepair.re.compile(rb"(?!)(x)"))
    monkeypatch.setattr(tracerepair, "salvage", lambda *a: None)
    slow = load(write(tmp_path, raw, "slow.json"))
    assert seen(slow) == seen(fast) and slow.skipped_events == fast.skipped_events == 2
    slow_cut = load(write(tmp_path, raw[: len(raw) * 3 // 4], "slowcut.json"))
    assert seen(slow_cut) == seen(cut) and "truncated" in slow_cut.warnings[0]
    with pytest.raises(InputError, match="not valid JSON"):
        load(write(tmp_path, raw[:raw.index(b'"traceEvents"') + 30], "head.json"))


def test_invalid_utf8_in_a_name_is_replaced_not_fatal(tmp_path):
    raw = text(SMALL).replace(b'"name": "Memcpy', b'"name": "\xff\xfeMemcpy', 1)
    t = load(write(tmp_path, raw))
    assert t.skipped_events == 0 and len(t.gpu) == len(load(SMALL).gpu)
    assert any(g.name.startswith("\ufffd\ufffdMemcpy") for g in t.gpu)


def test_number_beyond_a_double_is_an_unusable_value(tmp_path):
    raw = text(SMALL).replace(b'"dur": ', b'"dur": 1e999, "x": ', 1)
    t = load(write(tmp_path, raw))
    assert t.skipped_events <= 1 and t.n_events == load(SMALL).n_events


def test_metadata_of_odd_types_is_ignored(tmp_path):
    d = doc()
    d["deviceProperties"] = [{"id": "x", "name": 7}, "nope", {"name": "GPU B"}]
    d["distributedInfo"] = {"rank": "1", "world_size": None}
    d["baseTimeNanoseconds"] = "soon"
    d["metadata"] = {"float32_matmul_precision": "high", "nested": {"no": 1}, "n": 3}
    t = load(write(tmp_path, d))
    assert t.device_names == {2: "GPU B"} and (t.rank, t.world_size) == (1, None) and t.base_time_ns is None
    assert t.meta["float32_matmul_precision"] == "high" and t.meta["n"] == 3 and "nested" not in t.meta


# --- files cut short ----------------------------------------------------------------------------

def complete_events_before(raw: bytes, cut: int) -> int:
    """Independent count: the events a byte-by-byte reader finishes before the cut."""
    s = raw[:cut].decode("utf-8", "replace")
    i = s.index("[", s.index('"traceEvents"')) + 1
    dec, n = json.JSONDecoder(), 0
    while True:
        while i < len(s) and s[i] in " \t\r\n,":
            i += 1
        try:
            _, i = dec.raw_decode(s, i)
        except ValueError:
            return n
        n += 1


@pytest.mark.parametrize("frac", [0.05, 0.2, 0.5, 0.77, 0.95, 0.9999])
def test_truncated_json_keeps_every_event_before_the_cut(tmp_path, frac):
    raw = text(SMALL)
    cut = int(len(raw) * frac)
    t = load(write(tmp_path, raw[:cut]))
    assert t.warnings and "truncated" in t.warnings[0]
    n = complete_events_before(raw, cut)
    assert t.n_events == n > 0
    d = doc()
    d["traceEvents"] = d["traceEvents"][:n]
    whole = seen(load(write(tmp_path, d, "prefix.json")))
    assert seen(t) == whole


def test_cut_inside_a_string_and_with_trailing_zeros(tmp_path):
    raw = text(SMALL)
    at = raw.index(b"Memcpy HtoD") + 5
    t = load(write(tmp_path, raw[:at]))
    assert t.n_events == complete_events_before(raw, at)
    z = load(write(tmp_path, raw[:at] + b"\0" * 4096, "zeros.json"))  # a crashed writer's padding
    assert z.n_events == t.n_events and "truncated" in z.warnings[0]


def test_trailing_bytes_after_a_complete_document(tmp_path):
    t = load(write(tmp_path, text(SMALL) + b"\n{garbage"))
    assert t.n_events == load(SMALL).n_events and "follows the end of the JSON document" in t.warnings[0]


def test_cut_right_after_an_inner_closing_brace(tmp_path):
    raw = text(SMALL)  # Kineto's layout: the args object closes on the line before its event
    at = raw.index(b"}\n  }", len(raw) // 2) + 1
    t = load(write(tmp_path, raw[:at]))
    assert t.n_events == complete_events_before(raw, at) and "truncated" in t.warnings[0]


def test_truncated_array_form(tmp_path):
    events = doc()["traceEvents"]
    raw = json.dumps(events, indent=1).encode()
    t = load(write(tmp_path, raw[: len(raw) * 3 // 5]))
    assert "truncated" in t.warnings[0] and 0 < t.n_events < len(events)
    assert seen(t)["gpu"] == seen(load(write(tmp_path, events[:t.n_events], "whole.json")))["gpu"]


def test_cut_before_any_event_is_an_input_error(tmp_path):
    raw = text(SMALL)
    with pytest.raises(InputError, match="not valid JSON"):
        load(write(tmp_path, raw[:raw.index(b'"traceEvents"') + 20]))


def test_truncated_gzip_keeps_what_decompresses(tmp_path):
    comp = SMALL.read_bytes()
    t = load(write(tmp_path, comp[: len(comp) * 2 // 3], "cut.json.gz"))
    assert any("gzip stream is truncated" in w for w in t.warnings)
    assert any("truncated" in w and "events before the cut" in w for w in t.warnings)
    assert 0 < t.n_events < load(SMALL).n_events
    with pytest.raises(InputError, match="truncated gzip file with nothing readable"):
        load(write(tmp_path, comp[:15], "tiny.json.gz"))


def test_gzip_members_and_padding(tmp_path):
    raw = text(SMALL)
    two = load(write(tmp_path, gzip.compress(raw[:5000]) + gzip.compress(raw[5000:]), "two.json.gz"))
    padded = load(write(tmp_path, SMALL.read_bytes() + b"\0" * 64, "pad.json.gz"))
    assert seen(two) == seen(padded) == seen(load(SMALL))
    assert two.warnings == padded.warnings == []


def test_corrupt_gzip(tmp_path):
    comp = SMALL.read_bytes()
    with pytest.raises(InputError, match="corrupt gzip"):
        load(write(tmp_path, comp[:40] + bytes(200) + comp[240:], "bad.json.gz"))


# --- unreadable input ---------------------------------------------------------------------------

@pytest.mark.parametrize("content,msg", [
    (b"", "is empty"),
    (b" \n\t ", "is empty"),
    (b"{not json", "is not valid JSON"),
    (b"\x00\x01\x02binary", "is not valid JSON"),
    (b'"hello"', "not a Chrome trace with traceEvents"),
    (b"42", "not a Chrome trace with traceEvents"),
    (b'{"traceEvents": {"ph": "X"}}', "not a Chrome trace with traceEvents"),
    (b'{"traceEvents": null}', "not a Chrome trace with traceEvents"),
    (b"[1, 2, 3]", "not one from torch.profiler"),
    (b"[]", "not one from torch.profiler"),
    (b'{"nsys_version": "2024.1", "data": []}', "not a nsys export"),
    (b'{"schemaVersion": 1, "traceEvents": []}', "empty profiling window"),
    (b"[" * 50000 + b"]" * 50000, "nested too deeply"),
    (b'{"traceEvents": [' + b"[" * 50000 + b"]" * 50000 + b"]}", "nested too deeply"),
])
def test_unreadable_input_is_an_input_error_naming_the_file(tmp_path, content, msg):
    p = write(tmp_path, content)
    with pytest.raises(InputError) as e:
        load(p)
    assert str(p) in e.value.message and msg in e.value.message


def test_paths_that_are_not_files(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        load(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        load(tmp_path / "missing.pt.trace.json")
    with pytest.raises(InputError, match="not gzip-compressed"):
        load(write(tmp_path, b"{}", "t.json.gz"))


# --- fuzz ---------------------------------------------------------------------------------------

def small_trace() -> bytes:
    """A real trace cut down to a few dozen events of every kind, in Kineto's own layout."""
    d = doc()
    keep, per_cat = [], {}
    for e in d["traceEvents"]:
        c = (e.get("ph"), e.get("cat"))
        if per_cat.get(c, 0) < 6 or str(e.get("name", "")).startswith("ProfilerStep#"):
            per_cat[c] = per_cat.get(c, 0) + 1
            keep.append(e)
    d["traceEvents"] = keep
    return json.dumps(d, indent=1).encode()


SMALL_TRACE = small_trace()
TOKENS = [b"NaN", b"-Infinity", b"1e999", b"99999999999999999999999", b"-1", b"}", b"]", b"{", b"[", b'"', b",",
          b":", b"null", b"true", b'"x"', b"\xff", b"\x00", b"\\", b'"ts": ', b'"args": 3', b"\n"]
edit = st.tuples(st.sampled_from(["insert", "delete", "replace", "truncate", "duplicate"]),
                 st.floats(0, 1), st.integers(1, 64), st.sampled_from(TOKENS))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=st.lists(edit, min_size=1, max_size=6), gz=st.sampled_from([None, "whole", "cut"]),
       lenient=st.booleans())
def test_mutations_of_a_real_trace_give_a_trace_or_an_input_error(tmp_path, edits, gz, lenient):
    data = mutate(SMALL_TRACE, edits)
    name = "fuzz.json"
    if gz:
        data = gzip.compress(data, 1)
        if gz == "cut":
            data = data[: len(data) // 2]
        name += ".gz"
    p = write(tmp_path, data, name)
    try:
        t = trace_mod._load(p, lenient=lenient)
    except InputError as e:
        assert str(p) in e.message or p.name in e.message
        return
    assert_sorted(t)
    for x in t.gpu + t.gpu_annotations + t.runtime + t.ops:
        assert isinstance(x.name, str) and math.isfinite(x.ts) and math.isfinite(x.dur) and x.dur >= 0
    for g in t.gpu:
        assert all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                   for v in (g.correlation, g.external_id, g.bytes))
        assert isinstance(g.device, int) and isinstance(g.stream, int)
    assert all(isinstance(o.dims, (list, type(None))) and isinstance(o.types, (list, type(None))) for o in t.ops)
    assert t.skipped_events <= t.n_events


def test_fuzz_corpus_is_a_loadable_trace(tmp_path):
    t = load(write(tmp_path, SMALL_TRACE))
    assert t.gpu and t.ops and t.runtime and t.steps and t.gpu_annotations


def test_a_flipped_byte_in_a_gzip_stream(tmp_path):
    bad = bytearray(SMALL.read_bytes())
    bad[len(bad) // 2] ^= 0xFF
    try:
        t = load(write(tmp_path, bytes(bad), "flip.json.gz"))
    except InputError as e:
        assert "flip.json.gz" in e.message
    else:
        assert any("gzip stream is corrupt" in w for w in t.warnings)


# --- reading in batches -------------------------------------------------------------------------

def _variants(raw: bytes) -> dict[str, bytes]:
    """A real trace's text and damaged copies of it, each damage well past the first few KiB."""
    i = raw.index(b'"ph"', len(raw) // 2)
    k = raw.index(b'"dur": ', len(raw) // 3)
    return {"whole": raw, "cut": raw[: len(raw) * 2 // 3], "garbage": raw[:i] + b"@@" + raw[i:],
            "nan": raw[:k + 7] + b"NaN, \"x\": " + raw[k + 7:], "trailing": raw + b"\n{garbage",
            "zeros": raw[: len(raw) * 3 // 4] + b"\0" * 4096, "compact": json.dumps(json.loads(raw)).encode()}


@pytest.fixture(scope="module")
def read_whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object]]:
    """Each variant's file and the trace read from it with the default batch size (shared: the tests below
    read the same files again and compare)."""
    d = tmp_path_factory.mktemp("variants")
    out = {}
    for name, data in _variants(text(SHAPES)).items():
        p = write(d, data, f"{name}.json")
        out[name] = (p, load(p))
    return out


@pytest.mark.parametrize("piece", [512, 4096, 4 << 20])
def test_batches_of_any_size_read_the_same_trace(monkeypatch, piece, read_whole):
    # Cut into many batches, at every kind of place, or read in one.
    monkeypatch.setattr(tracefile, "PIECE", piece)
    for name, (p, expected) in read_whole.items():
        t = load(p)
        assert t == expected, name
        assert trace_mod._load(p, lenient=True) == t, name


def test_an_event_longer_than_a_batch(tmp_path, monkeypatch):
    d = doc()
    k = dict(kernel(d), name="k" * 5000, ts=kernel(d)["ts"] + 0.25)
    k["args"] = dict(k["args"], nested=[{"a": [1, {"b": "},{"}]}] * 200)  # "},{" that are no cut
    d["traceEvents"].insert(100, k)
    p = write(tmp_path, d)
    whole = load(p)
    monkeypatch.setattr(tracefile, "PIECE", 1024)  # the event spans about ten pieces
    assert load(p) == whole and any(g.name == "k" * 5000 for g in whole.gpu)


def test_a_list_that_never_ends_an_event_is_cut_short(tmp_path, monkeypatch):
    # "},{" nowhere: after _MAX_RUN bytes the text is judged broken where it stops parsing.
    monkeypatch.setattr(tracefile, "PIECE", 1024)
    monkeypatch.setattr(tracefile, "_MAX_RUN", 16 * 1024)
    raw = text(SMALL)
    p = write(tmp_path, raw[:raw.index(b'"traceEvents"')] + b'"traceEvents": [' + b'{"a": [' + b"1, " * 20000 + b"}]}")
    with pytest.raises(InputError, match="not valid JSON"):
        load(p)
