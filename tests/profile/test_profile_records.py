"""The profile's typed records write exactly the JSON a profile Run holds, and read it back losslessly,
checked by their annotations as a loaded Run is (records.base)."""

import json
from pathlib import Path

import pytest

from perfstack.errors import InputError
from perfstack.records import profile as records
from perfstack.profile.summary import profile_run

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
DDP = [TRACES / "h200x2" / f"ddp-not-overlapped.rank{r}.pt.trace.json.gz" for r in (0, 1)]
SYNC = [TRACES / "h100" / "host-sync.pt.trace.json.gz"]

# section key -> (record, is a list of them)
PIECES = {
    "steps": (records.Step, True), "idle_gaps": (records.IdleGap, True), "timeline": (records.Timeline, False),
    "launch": (records.Launch, False), "sync": (records.Sync, False), "allocator": (records.Allocator, False),
    "comm": (records.Comm, False), "mfu": (records.Mfu, False), "straggler": (records.Straggler, False),
    "overhead": (records.Overhead, False), "ops": (records.OpRow, True), "top_kernels": (records.TopKernel, True),
    "compiled": (records.Compiled, False), "ranks": (records.RankRow, True), "waste": (records.WasteFound, False),
    "telemetry": (records.Telemetry, False), "gemms": (records.GemmRow, True), "memcpy": (records.MemcpyRow, True),
}
CAPTURE = Path(__file__).parents[1] / "fixtures" / "runs" / "h100-profile-capture.json"


@pytest.fixture(scope="module", params=[DDP, SYNC], ids=["ddp-2-ranks", "host-sync"])
def profile(request):
    return profile_run(request.param).to_dict()["profile"]


def test_every_piece_reads_back_to_the_same_json_in_the_same_order(profile):
    seen = 0
    for key, (rec, many) in PIECES.items():
        value = profile.get(key)
        if value is None:
            continue
        for i, d in enumerate(value if many else [value]):
            r = rec.from_dict(d, f"profile.{key}[{i}]")
            assert json.dumps(r.to_dict()) == json.dumps(d), key
            seen += 1
    assert seen >= 10


def test_the_steps_are_typed(profile):
    steps = records.load(profile).steps
    assert len(steps) == profile["n_steps"] and all(isinstance(s.total_ms, float) for s in steps)
    assert isinstance(steps[0].categories, dict) and steps[0].kernels == profile["steps"][0]["kernels"]


def test_the_section_is_read_through_one_loader_with_every_piece_typed(profile):
    s = records.load(profile)
    for key, (rec, many) in PIECES.items():
        value = getattr(s, key)
        if profile.get(key) is not None:
            assert all(isinstance(v, rec) for v in (value if many else [value])), key
    assert s.device_name == profile["device_name"] and [o.to_dict() for o in s.ops] == profile["ops"]
    assert {k: w.to_dict() for k, w in s.whatif.items()} == profile["whatif"] and [m.to_dict() for m in s.memcpy] == profile["memcpy"]
    assert s.step_time(s.breakdown()) == pytest.approx(profile["step_ms"])


def test_the_loader_is_tolerant_of_absence_and_strict_on_types():
    assert records.load(None) is None
    empty = records.load({})
    assert empty == records.Section() and empty.breakdown() is None and empty.step_time(None) is None
    with pytest.raises(InputError, match=r"profile.steps\[0\].total_ms must be a number, not '12'"):
        records.load({"steps": [{"step": 1, "total_ms": "12"}]})


def test_the_ddp_run_has_the_overlap_model_and_the_straggler_typed():
    p = profile_run(DDP).to_dict()["profile"]
    comm = records.Comm.from_dict(p["comm"], "profile.comm")
    assert "if_overlapped" in comm.extra and comm.to_dict() == p["comm"]
    s = records.Straggler.from_dict(p["straggler"], "profile.straggler")
    assert s.rank in (0, 1) and s.excess_ms >= 0 and s.cause


def test_a_wrong_type_is_refused_naming_the_field_as_a_loaded_run_would_be():
    with pytest.raises(InputError, match=r"profile.steps\[0\].total_ms must be a number, not '12'"):
        records.Step.from_dict({"step": 1, "total_ms": "12"}, "profile.steps[0]")
    with pytest.raises(InputError, match=r"profile.launch.launch_to_start_us.median must be a number or null"):
        records.Launch.from_dict({"launch_to_start_us": {"median": "x"}}, "profile.launch")


def test_absent_fields_take_their_defaults_and_unknown_ones_are_kept():
    s = records.Step.from_dict({"step": 3, "total_ms": 1.5, "from_a_newer_perfstack": [1]}, "profile.steps[0]")
    assert (s.step, s.total_ms, s.kernels, s.categories) == (3, 1.5, 0, {})
    assert s.to_dict()["from_a_newer_perfstack"] == [1]
    launch = records.Launch.from_dict({"launch_to_start_us": {"median": 4.0, "from": "launch return"}}, "l")
    assert launch.launch_to_start_us.median == 4.0 and launch.launch_to_start_us.origin == "launch return"
    assert launch.to_dict()["launch_to_start_us"]["from"] == "launch return"


def test_the_overhead_the_operators_and_the_top_kernels_are_typed(profile):
    s = records.load(profile)
    o = s.overhead
    assert o.method in ("measured", "estimated", "none") and o.step_ms == profile["overhead"]["step_ms"]
    assert o.cpu_scale == profile["overhead"]["cpu_scale"] and o.note
    top = s.ops[0]
    assert top.op == profile["ops"][0]["op"] and top.time_ms_per_step == profile["ops"][0]["time_ms_per_step"]
    assert s.top_kernels[0].count == profile["top_kernels"][0]["count"] > 0


def test_an_overhead_without_a_replay_model_reads_back_without_the_model_figures():
    d = {"profiled_step_ms": 5.0, "events_per_step": 120.0, "method": "none", "cpu_scale": 1.0, "step_ms": 5.0,
         "note": "no replay model for this trace"}
    o = records.Overhead.from_dict(d, "profile.overhead")
    assert o.model_step_ms is None and o.cpu_inflation is None and o.to_dict() == d
    op = records.OpRow.from_dict({"op": "aten::mm", "category": "gemm", "tflops": None}, "profile.ops[0]")
    assert "bound" not in op.to_dict() and op.dtype is None


@pytest.mark.parametrize("section, message", [
    ({"overhead": {"method": "estimated", "cpu_scale": "fast"}}, r"profile.overhead.cpu_scale must be a number, not 'fast'"),
    ({"overhead": {"events_per_step": [1]}}, r"profile.overhead.events_per_step must be a number, not a list"),
    ({"ops": [{"op": "aten::add", "flops_per_step": {"x": 1}}]}, r"profile.ops\[0\].flops_per_step must be a number"),
    ({"ops": [{"op": "aten::add", "bound": 3}]}, r"profile.ops\[0\].bound must be one of compute, memory or null, not 3"),
    ({"overhead": {"step_ms": 4.0, "cpu_scale": None}}, r"profile.overhead.cpu_scale must be a number, not None"),
    ({"busy_ms": "12"}, r"profile.busy_ms must be a number, not '12'"),
    ({"overhead": {"method": 3}}, r"profile.overhead.method must be one of \"\", none, measured, estimated, not 3"),
])
def test_a_value_of_the_wrong_kind_is_refused_naming_the_field(section, message):
    # it took the field's default before: a wrongly typed busy_ms loaded as 0.0
    with pytest.raises(InputError, match=message):
        records.load(section)


def test_an_unknown_key_is_kept_beside_the_known_ones():
    k = records.TopKernel.from_dict({"name": "k", "count": 2, "origin": "kept"}, "profile.top_kernels[0]")
    assert (k.name, k.count, k.time_ms_per_step, k.extra) == ("k", 2, 0.0, {"origin": "kept"})
    assert k.to_dict() == {"name": "k", "count": 2, "origin": "kept"}


def test_the_kernel_classes_are_typed_and_read_back_to_the_same_json(profile):
    classes = records.load(profile).kernel_classes
    assert classes and all(isinstance(k, records.KernelClass) for k in classes)
    assert [k.name for k in classes] == [d["name"] for d in profile["kernel_classes"]]
    for k, d in zip(classes, profile["kernel_classes"]):
        assert k.to_dict() == d


def test_a_kernel_class_named_by_its_class_keeps_that_key():
    k = records.KernelClass.from_dict({"class": "gemm", "time_ms": 2.0, "gbps": None}, "profile.kernel_classes[0]")
    assert (k.name, k.kclass, k.time_ms, k.gbps) == (None, "gemm", 2.0, None)
    assert k.to_dict() == {"class": "gemm", "time_ms": 2.0, "gbps": None}  # written back as read
    with pytest.raises(InputError, match=r"profile.kernel_classes\[0\].bytes must be a number or null"):
        records.load({"kernel_classes": [{"name": "gemm", "bytes": "many"}]})


def test_the_whatifs_are_typed_by_finding_and_a_malformed_entry_is_refused(profile):
    s = records.load(profile)
    assert s.whatif and all(isinstance(w, records.WhatIf) for w in s.whatif.values())
    fid, d = next(iter(profile["whatif"].items()))
    assert (s.whatif[fid].ms, s.whatif[fid].pct_profiled) == (d["ms"], d["pct_profiled"])
    with pytest.raises(InputError, match=r"profile.whatif.host-sync.ms must be a number, not '2'"):
        records.load({"whatif": {"host-sync": {"ms": "2", "pct": 3.0}}})
    with pytest.raises(InputError, match=r"profile.whatif.launch-bound must be a JSON object, not 7"):
        records.load({"whatif": {"host-sync": {"ms": 2.0}, "launch-bound": 7}})
    with pytest.raises(InputError, match=r"profile.whatif must be an object, not a list"):
        records.load({"whatif": ["host-sync"]})


def test_the_ranks_the_waste_the_compiled_code_and_the_telemetry_are_typed(profile):
    s = records.load(profile)
    assert all(isinstance(r, records.RankRow) and isinstance(r.comm, records.Comm) for r in s.ranks or [])
    assert [r.to_dict() for r in s.ranks or []] == profile.get("ranks", [])
    assert (s.ranks is None) == ("ranks" not in profile)  # a single rank's section has no ranks
    assert isinstance(s.compiled, records.Compiled) and s.compiled.to_dict() == profile["compiled"]
    assert s.waste.to_dict() == profile["waste"]
    captured = records.load(json.loads(CAPTURE.read_text())["profile"])
    t = captured.telemetry
    assert isinstance(t, records.Telemetry) and t.samples >= t.busy_samples > 0 and isinstance(t.reasons, list)


def test_the_waste_is_typed_by_finding_and_keeps_the_ids_the_json_holds():
    d = {"gemm-misaligned": {"groups": [{"dtype": "bf16", "shapes": ["4095x4096x4096"], "tflops": 300.0}]},
         "fp32-matmul": {"kernels_per_step": 4.0, "tflops": None, "speedup": 2.5}, "a-newer-waste": {"x": 1}}
    w = records.load({"waste": d}).waste
    assert w.gemm_misaligned.groups[0].shapes == ["4095x4096x4096"] and w.gemm_misaligned.groups[0].tflops == 300.0
    assert (w.fp32_matmul.tflops, w.fp32_matmul.speedup, w.unfused_elementwise) == (None, 2.5, None)
    assert w.to_dict() == d  # read back in the order and with the values read
    assert records.load({}).waste == records.WasteFound() and records.load({}).telemetry is None


def test_a_loaded_section_writes_back_the_json_it_was_read_from():
    # an older or hand-edited section: keys out of the order perfstack writes, keys a newer perfstack
    # writes, keys this one adds with a default (n_idle_gaps)
    old = {"step_ms": 12.0, "file": "t.json", "a-newer-key": {"x": [1, 2]}, "steps": [{"total_ms": 12.0, "step": 1}],
           "whatif": {"host-sync": {"ms": 2.0}}, "ops": [{"name": "mm", "calls_per_step": 2}],
           "launch": {"kernels_per_step": 3}, "precision": None}
    s = records.load(json.loads(json.dumps(old)))
    assert s.n_idle_gaps == 0 and s.ops[0].calls_per_step == 2 and list(s.whatif) == ["host-sync"]
    assert json.dumps(s.to_dict()) == json.dumps(old)


def test_a_loaded_section_writes_the_fields_set_since_after_the_keys_it_was_read_with():
    s = records.load({"step_ms": 12.0, "newer": 1, "whatif": {"a": {"ms": 1.0}}})
    s.unprofiled, s.n_idle_gaps, s.file = {"step_ms": 10.0}, 0, ""  # a default set since is not written
    s.whatif = {}
    s.extra["newest"] = 2
    assert s.to_dict() == {"step_ms": 12.0, "newer": 1, "whatif": {}, "unprofiled": {"step_ms": 10.0}, "newest": 2}
    assert list(s.to_dict()) == ["step_ms", "newer", "whatif", "unprofiled", "newest"]


def test_every_committed_profile_run_saves_back_as_it_was_read():
    from perfstack.model import Run
    root = Path(__file__).parents[2]
    seen = 0
    for p in sorted([*root.glob("tests/fixtures/**/*.json"), *root.glob("docs/examples/**/*.json")]):
        d = json.loads(p.read_text())
        if isinstance(d, dict) and isinstance(d.get("profile"), dict) and "schema_version" in d:
            assert json.dumps(Run.load(p).to_dict()["profile"]) == json.dumps(d["profile"]), p
            seen += 1
    assert seen >= 2
