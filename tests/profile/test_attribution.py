"""Attribution by launch and what the analysis says when a trace lacks what it needs. Each broken
trace is a real recorded one with one thing taken away or altered, so everything else is real."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perfstack.profile import classify
from perfstack.profile.attribute import attribute
from perfstack.profile.summary import profile_run
from perfstack.profile.trace import load

H100 = Path(__file__).parents[1] / "fixtures" / "traces" / "h100"
REAL = H100 / "host-sync.pt.trace.json.gz"


def doc(path: Path = REAL) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def write(tmp_path: Path, d: dict, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return p


def gpu_events(d: dict) -> list[dict]:
    return [e for e in d["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def test_every_kernel_of_a_real_trace_is_attributed_to_the_step_that_launched_it():
    t = load(REAL)
    windows = [(s.number, s.ts, s.ts + s.dur) for s in t.steps]
    att = attribute(t, t.gpu, windows)
    assert att.method == "launch"
    rt = {r.correlation: r for r in t.runtime}
    for g, s in zip(att.gpu, att.step):
        r = rt[g.correlation]
        inside = [k for k, (_, a, b) in enumerate(windows) if a <= r.ts < b]
        assert s == (inside[0] if inside else -1)


def test_categories_come_from_the_operator_not_the_lambda_in_the_kernel_name():
    t = load(REAL)
    att = attribute(t, t.gpu, [(s.number, s.ts, s.ts + s.dur) for s in t.steps])
    for g, c, ph in zip(att.gpu, att.category, att.phase):
        if "{lambda" in g.name and "multi_tensor_apply" not in g.name and ph != "optimizer":
            assert c != "optimizer", g.name
        if c == "optimizer":
            assert ph == "optimizer"
    # the fused AdamW kernel is the optimizer; element-wise kernels are not
    opt = {g.name for g, c in zip(att.gpu, att.category) if c == "optimizer"}
    assert any("adam" in n.lower() or "multi_tensor" in n for n in opt)


def test_no_correlation_ids_falls_back_to_timestamps_and_says_so(tmp_path):
    d = doc()
    for e in d["traceEvents"]:
        if isinstance(e.get("args"), dict):
            e["args"].pop("correlation", None)
    run = profile_run([write(tmp_path, d)])
    p = run.profile.to_dict()
    assert p["timeline"]["attribution"] != "launch"
    assert any("correlation id" in n for n in p["notes"])
    assert p["busy_ms"] > 0 and p["n_steps"] == 3


def test_no_profiler_steps_is_one_window(tmp_path):
    d = doc()
    d["traceEvents"] = [e for e in d["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    run = profile_run([write(tmp_path, d)])
    assert run.profile.n_steps == 1
    assert any("no ProfilerStep" in n for n in run.profile.notes)


def test_no_gpu_events_is_a_cpu_only_profile(tmp_path):
    d = doc()
    gpu = {id(e) for e in gpu_events(d)}  # once: the list, rebuilt and searched per event, took minutes
    d["traceEvents"] = [e for e in d["traceEvents"] if id(e) not in gpu]
    run = profile_run([write(tmp_path, d)])
    assert any("no GPU kernels" in n for n in run.profile.notes)
    assert run.profile.busy_ms == 0


def test_several_devices_analyses_the_busiest_and_names_the_rest(tmp_path):
    d = doc()
    extra = []
    for e in gpu_events(d)[:50]:
        e2 = json.loads(json.dumps(e))
        e2["args"]["device"] = 1
        e2["args"]["correlation"] = -1  # launched by nothing recorded
        extra.append(e2)
    d["traceEvents"] += extra
    run = profile_run([write(tmp_path, d)])
    assert run.profile.device == 0 and run.profile.other_devices == [1]
    assert any("devices [0, 1]" in n for n in run.profile.notes)


def test_clock_skew_is_reported(tmp_path):
    d = doc()
    for e in gpu_events(d):
        e["ts"] -= 50_000.0  # the GPU clock 50 ms behind the CPU's
    run = profile_run([write(tmp_path, d)])
    assert any("clocks disagree" in n for n in run.profile.notes)
    # attribution by correlation id does not depend on the clocks
    assert run.profile.n_steps == 3 and run.profile.launch.kernels_per_step == 318


def test_truncated_trace_analyses_what_is_there(tmp_path):
    text = gzip.decompress(REAL.read_bytes()).decode()
    p = tmp_path / "cut.json"
    p.write_text(text[: int(len(text) * 0.7)])
    run = profile_run([p])
    assert run.meta.warnings and run.profile.n_steps >= 1


@pytest.mark.parametrize("name,kind,expected", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float> > >(int, {lambda()#1}, std::array<char*, 2ul>)", "kernel",
     "elementwise"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>(...)", "kernel", "optimizer"),
    ("sm90_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nchw", "kernel", "conv"),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(...)", "kernel", "elementwise"),
    ("void wgrad_alg0_engine<float, 128, 6, 8, 3, 3, 5, false, 512>(int, int, ...)", "kernel", "conv"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "comm"),
    ("triton_per_fused_native_layer_norm_0", "kernel", "elementwise"),
    ("triton_red_fused__log_softmax__to_copy_add_1", "kernel", "elementwise"),
    ("triton_tem_fused_mm_0", "kernel", "gemm"),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy", "memcpy"),
])
def test_kernel_names_alone(name, kind, expected):
    assert classify.by_name(kind, name) == expected


def test_operator_family_wins_over_the_kernel_name():
    mul = "void at::native::vectorized_elementwise_kernel<4, {lambda()#1}>(int)"
    assert classify.category("kernel", mul, fam=None, phase="optimizer") == "optimizer"
    assert classify.category("kernel", mul, fam="attention", phase="forward") == "attention"
    assert classify.category("kernel", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>", fam=None) == "elementwise"
    assert classify.category("kernel", "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32", fam="conv") == "conv"
    assert classify.category("kernel", "void at::native::direct_copy_kernel_cuda<float>", fam="gemm") == "copy"
    assert classify.category("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32", fam="gemm") == "gemm"


def test_gemv_is_never_misaligned():
    assert classify.misaligned((1, 1, 2048, 2048), "bf16") == []
    assert classify.misaligned((1, 4095, 4096, 4096), "bf16") == ["M=4095"]


def test_an_op_that_starts_with_its_parent_nests_under_it_whatever_the_file_order():
    # Kineto writes an op and its first child at the same microsecond; the longer is the parent, and a
    # runtime call starting then belongs to the innermost op that is not shorter than it
    from perfstack.profile.attribute import nest
    from perfstack.profile.trace import CpuEvent, Trace

    child = CpuEvent("op", "aten::addmm", 10.0, 5.0, 1)
    parent = CpuEvent("op", "aten::linear", 10.0, 20.0, 1)
    other = CpuEvent("op", "Optimizer.step#AdamW.step", 10.0, 30.0, 2)  # another thread
    launch = CpuEvent("runtime", "cudaLaunchKernel", 10.0, 5.0, 1)
    for ops in ([child, parent, other], [other, parent, child]):
        t = Trace(path="t", ops=ops, runtime=[launch])
        info, rparent = nest(t)
        c, p = ops.index(child), ops.index(parent)
        assert info.parent[c] == p and info.parent[p] == -1 and info.parent[ops.index(other)] == -1
        assert rparent[0] == c  # same start and length: the op holds the call
        assert info.family[c] == "gemm" and info.phase[ops.index(other)] == "optimizer"


def test_cpu_spans_do_not_depend_on_the_order_of_the_ops():
    from perfstack.profile import cpu
    from perfstack.profile.trace import Trace

    t = load(REAL)
    ref = cpu.spans(t)
    shuffled = Trace(path="t", ops=list(reversed(t.ops)), runtime=t.runtime)
    got = cpu.spans(shuffled)
    for a, b in zip((ref.dataloader, ref.alloc, ref.sync, ref.ops), (got.dataloader, got.alloc, got.sync, got.ops)):
        assert (a.starts, a.ends) == (b.starts, b.ends)
    assert len(ref.ops) > 10


def test_the_launch_figures_of_one_pass_are_the_plain_ones():
    # launch delays, early starts and kernel durations come from one pass reading each launch's start as
    # attribution kept it; each list is the one its plain statement gives, on real traces
    from perfstack.profile import analyze
    from perfstack.profile.analysis import Analysis

    for path in (REAL, H100 / "launch-bound.pt.trace.json.gz"):
        A = Analysis(load(path))
        gpu, rts, att = A.gpu, A.trace.runtime, A.att
        delays, early, kdurs = analyze._launch_delays(A)
        assert delays == [g.ts - (rts[j].ts + rts[j].dur) for g, j, s in zip(gpu, att.launch, att.step)
                          if j >= 0 and s >= 0 and g.kind == "kernel"]
        assert early == [-(g.ts - rts[j].ts) for g, j in zip(gpu, att.launch) if j >= 0 and g.ts < rts[j].ts]
        assert kdurs == [g.dur for g, s in zip(gpu, att.step) if s >= 0 and g.kind == "kernel"]
        assert list(att.op_ts) == [o.ts for o in A.trace.ops] and list(att.rt_ts) == [r.ts for r in rts]
        assert len(delays) > 100
