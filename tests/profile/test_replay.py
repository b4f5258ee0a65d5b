"""The replay model on hand-built timelines whose answer is known, the operator cost formulas, and
the analysis of real traces mutated at random (it must never raise anything but InputError)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.profile import flops
from perfstack.profile.simulate import LAUNCH, SYNC, Scenario, Timeline, replay, solve_scale
from perfstack.profile.summary import profile_run


def loop(cpu_per_kernel: float, gpu_per_kernel: float, kernels: int, steps: int = 3, sync_each: bool = False,
         host_us: float = 0.0) -> Timeline:
    """``steps`` steps of ``kernels`` launches, each after ``cpu_per_kernel`` µs of CPU work;
    optionally a sync after every kernel, and ``host_us`` of host work (outside operators) after it."""
    t = Timeline(t0=0.0, n_steps=steps, tail_us=0.0, latency_us=0.0)
    for s in range(steps):
        for _ in range(kernels):
            e = len(t.g_dur)
            t.g_dur.append(gpu_per_kernel)
            t.g_stream.append(7)
            t.g_bubble.append(0.0)
            t.g_dep.append(False)
            t.g_index.append(e)
            t.g_action.append(len(t.kind))
            t.add(LAUNCH, 0.0, s, cpu_per_kernel, 0.0, 0.0, cpu_per_kernel, [e])
            if sync_each:
                t.add(SYNC, 0.0, s, host_us, 0.0, 0.0, 0.0, [])
    return t


def test_gpu_bound_loop_takes_its_gpu_time():
    t = loop(cpu_per_kernel=10, gpu_per_kernel=100, kernels=50)
    assert replay(t) == pytest.approx(10 + 3 * 50 * 100)


def test_cpu_bound_loop_takes_its_cpu_time_and_faster_kernels_recover_nothing():
    t = loop(cpu_per_kernel=100, gpu_per_kernel=10, kernels=50)
    base = replay(t)
    assert base == pytest.approx(3 * 50 * 100 + 10)
    faster = Scenario(g_dur=[1.0] * len(t.g_dur))
    assert base - replay(t, 1.0, faster) == pytest.approx(9.0)  # only the last kernel's tail


def test_a_cuda_graph_removes_dispatch_on_a_cpu_bound_loop():
    t = loop(cpu_per_kernel=100, gpu_per_kernel=10, kernels=50)
    graph = replay(t, 1.0, Scenario(graph=True))
    assert graph == pytest.approx(3 * 50 * 10 + 1.0, rel=0.01)


def test_syncs_serialize_a_loop_with_host_work_and_removing_them_overlaps_it():
    # each kernel 100 µs of GPU; after each, 80 µs of host work that waits for it when synced
    t = loop(cpu_per_kernel=5, gpu_per_kernel=100, kernels=10, sync_each=True, host_us=80)
    synced = replay(t)
    free = replay(t, 1.0, Scenario(keep_sync="last-per-step"))
    assert synced > free
    assert free == pytest.approx(3 * 10 * 100 + 5, rel=0.05)  # GPU-bound once the host stops waiting


def test_the_profiler_scale_is_solved_from_a_measured_step():
    t = loop(cpu_per_kernel=100, gpu_per_kernel=10, kernels=50)
    scale = solve_scale(t, target_us=replay(t) / 2)
    assert scale == pytest.approx(0.5, abs=0.01)
    assert solve_scale(t, target_us=replay(t) * 2) == 1.0  # slower than recorded: nothing to remove


def test_a_dependent_event_waits_for_the_other_stream():
    t = loop(cpu_per_kernel=1, gpu_per_kernel=100, kernels=2, steps=1)
    t.g_stream[1] = 9  # second kernel on another stream: concurrent unless it depends on the first
    assert replay(t) == pytest.approx(2 + 100, abs=1)
    t.g_dep[1] = True
    assert replay(t) == pytest.approx(1 + 200, abs=1)


# -- operator costs --------------------------------------------------------------------------------

def test_conv_flops_from_shapes_stride_and_padding():
    # ResNet-50's first convolution as the profiler records it (cudnn_convolution: padding, stride, dilation)
    c = flops.cost("aten::cudnn_convolution", [[128, 3, 224, 224], [64, 3, 7, 7], [], [], []],
                   ["c10::BFloat16", "c10::BFloat16"], ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "1"])
    assert c.flops == 2 * 128 * 64 * 112 * 112 * 3 * 7 * 7
    same = flops.cost("aten::convolution", [[128, 3, 224, 224], [64, 3, 7, 7], [], [], []],
                      ["float", "float"], ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"])
    assert same.flops == c.flops and same.dtype == "fp32"
    assert flops.cost("aten::cudnn_convolution", [[1, 3, 8, 8], [4, 3, 3, 3]], ["float", "float"], None).flops is None


# A transposed convolution in each form the profiler records it (a conv VAE's decoder on an H200): the
# module's op, aten::convolution and _convolution with transposed=True, and cuDNN's own op, whose arguments
# are in another order (padding, output_padding, stride, dilation). PyTorch's flop counter gives 2·N·Cin·H·W·
# Cout·r·s for each (torch.utils.flop_counter, checked for these shapes), and twice that for the backward.
X, W = [128, 256, 8, 8], [256, 128, 4, 4]  # stride 2, padding 1: 8x8 -> 16x16, 256 -> 128 channels
TRANSPOSED = {
    "aten::conv_transpose2d": ["", "", "", "[2, 2]", "[1, 1]", "[0, 0]", "1", "[1, 1]"],
    "aten::convolution": ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1"],
    "aten::_convolution": ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1", "False", "False", "True",
                           "True"],
    "aten::cudnn_convolution_transpose": ["", "", "[1, 1]", "[0, 0]", "[2, 2]", "[1, 1]", "1", "False", "False",
                                          "True"],
}


@pytest.mark.parametrize("name", sorted(TRANSPOSED))
def test_transposed_conv_flops_in_every_recorded_form(name):
    c = flops.cost(name, [X, W, [128], [], [], [], [], [], []], ["float", "float", "float"], TRANSPOSED[name])
    assert c.flops == 2 * 128 * 256 * 8 * 8 * 128 * 4 * 4
    assert c.shape == "N128 C256→K128 16x16 k4x4 transposed"
    assert c.bytes == 4 * (128 * 256 * 8 * 8 + 256 * 128 * 4 * 4 + 128 * 128 * 16 * 16)
    bwd = flops.cost("aten::convolution_backward", [[128, 128, 16, 16], X, W, [], [], [], [], [], [], [], []],
                     ["float"] * 3, ["", "", "", "[128]", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1",
                                     "[True, True, True]"])
    assert bwd.flops == 2 * c.flops


@pytest.mark.parametrize("name", ["aten::cudnn_convolution", *sorted(TRANSPOSED)])
@pytest.mark.parametrize("stride", ["[0, 0]", "[-1, 2]", "[]", "two"])
def test_a_convolution_with_a_nonsense_stride_gets_no_flops_and_never_raises(name, stride):
    args = list(TRANSPOSED.get(name, ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1"]))
    args[4 if name == "aten::cudnn_convolution_transpose" else 3] = stride  # (where each form keeps its stride)
    c = flops.cost(name, [X, [128, 256, 4, 4] if name == "aten::cudnn_convolution" else W], ["float", "float"],
                   args)
    assert c.flops is None and c.bytes and c.bytes > 0


def test_a_conv_vae_whose_decoder_is_transposed_convolutions_is_profiled():
    # recorded on an H200 (benchmarks/record_matrix_profiles.sh): cuDNN's transposed op crashed the profile
    trace = Path(__file__).parents[1] / "fixtures" / "traces" / "validation" / "h200-matrix" / "conv-vae.pt.trace.json.gz"
    run = profile_run([trace])
    up = next(r for r in run.profile.ops if r.op == "aten::cudnn_convolution_transpose")  # (the largest row)
    assert 20 < up.tflops < 494.7  # achieved, under the H200's dense TF32 peak
    assert run.findings[0].id == "fp32-conv"


def test_attention_flops_halved_when_causal_and_scaled_for_backward():
    q = [8, 16, 2048, 64]
    fwd = flops.cost("aten::_scaled_dot_product_flash_attention", [q, q, q, []], ["c10::BFloat16"] * 3,
                     ["", "", "", "0.", "True", "False", ""])
    full = flops.cost("aten::_scaled_dot_product_flash_attention", [q, q, q, []], ["c10::BFloat16"] * 3,
                      ["", "", "", "0.", "False", "False", ""])
    assert full.flops == 4 * 8 * 16 * 2048 * 2048 * 64 and fwd.flops == full.flops / 2
    bwd = flops.cost("aten::_scaled_dot_product_flash_attention_backward", [q, q, q, q, q], ["c10::BFloat16"] * 5,
                     None)
    assert bwd.flops == 2.5 * full.flops


def test_gemm_and_elementwise_costs():
    g = flops.cost("aten::addmm", [[4096], [8192, 4096], [4096, 4096]], ["c10::BFloat16"] * 3, None)
    assert g.flops == 2 * 8192 * 4096 * 4096 and g.gemm == (1, 8192, 4096, 4096)
    e = flops.cost("aten::gelu", [[8192, 4096], []], ["c10::BFloat16", ""], None)
    assert e.flops is None and e.bytes == 2 * 8192 * 4096 * 2 and e.big_numel == 8192 * 4096


# -- hostile traces ----------------------------------------------------------------------------------

REAL = Path(__file__).parents[1] / "fixtures" / "traces" / "h100" / "fp32-matmul.pt.trace.json.gz"
DOC = json.loads(gzip.decompress(REAL.read_bytes()))


def _mutate(doc: dict, seed: int) -> dict:
    rng = random.Random(seed)
    d = json.loads(json.dumps(doc))
    evs = d["traceEvents"]
    for _ in range(rng.randint(1, 40)):
        e = rng.choice(evs)
        if not isinstance(e, dict):
            continue
        what = rng.randrange(8)
        if what == 0:
            e["ts"] = e.get("ts", 0) + rng.uniform(-1e5, 1e5)
        elif what == 1:
            e["dur"] = rng.choice([0, 1e-3, 1e9, e.get("dur", 1) * 10])
        elif what == 2 and isinstance(e.get("args"), dict):
            e["args"]["correlation"] = rng.choice([0, -1, 10**12, rng.randint(0, 10**6)])
        elif what == 3 and isinstance(e.get("args"), dict):
            e["args"]["Input Dims"] = rng.choice([[], [[]], [[0, 0]], [[-1]], [[2**40]], "x", [[1, 2], [3]]])
        elif what == 4:
            e["name"] = rng.choice(["ProfilerStep#1", "ProfilerStep#1", "aten::mm", "", "Optimizer.step#X.step",
                                    "cudaDeviceSynchronize", "Torch-Compiled Region: 0/0"])
        elif what == 5:
            evs.remove(e)
        elif what == 6 and isinstance(e.get("args"), dict):
            e["args"]["stream"] = rng.choice([0, 7, 13, -3])
        else:
            e["tid"] = rng.choice([0, 1, "x", None])
    return d


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), step_ms=st.one_of(st.none(), st.floats(0.01, 1e4)))
def test_mutated_real_traces_never_crash_the_analysis(tmp_path, seed, step_ms):
    p = tmp_path / f"m{seed}.json"
    p.write_text(json.dumps(_mutate(DOC, seed)))
    try:
        run = profile_run([p], unprofiled_step_ms=step_ms)
    except InputError:
        return
    json.dumps(run.to_dict(), default=str)
    for f in run.findings:
        assert f.recoverable_ms is not None and f.recoverable_ms >= 0
