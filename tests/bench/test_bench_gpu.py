"""GPU tier: each benchmark in a small configuration on the real device, with sanity bounds.
Skipped without CUDA (conftest)."""

import pytest

from perfstack.bench import BenchContext, collectives, gemm, hbm, launch, p2p, transfer
from perfstack.host.live import LiveHost
from perfstack.probes import collect

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ctx():
    return BenchContext(suite="quick", facts=collect(LiveHost()), options={"hbm_max_bytes": 512 * 2**20})


def by_name(ms):
    return {m.name: m for m in ms}


def test_gemm_bf16_reaches_tensor_core_speeds(ctx):
    import torch

    ms = by_name(gemm.run(ctx))
    assert ms["gemm.bf16.ref"].status == "ok" and ms["gemm.bf16.ref"].value > 10
    assert ms["gemm.bf16.best"].value >= ms["gemm.bf16.ref"].value * 0.98
    assert ms["gemm.tf32.ref"].value > ms["gemm.fp32.ref"].value  # 'high' uses TF32 tensor cores
    assert ms["gemm.bf16.aligned"].value > ms["gemm.bf16.misaligned"].value
    assert len(ms["gemm.bf16.ref"].samples) >= 20 and ms["gemm.bf16.ref"].telemetry.get("before")
    if torch.cuda.get_device_capability() >= (8, 9):
        assert ms["gemm.fp8.ref"].value > ms["gemm.bf16.ref"].value
    else:
        assert ms["gemm.fp8.ref"].status == "skipped"
    assert torch.get_float32_matmul_precision() == "highest"  # restored


def test_hbm_copy_and_read(ctx):
    ms = by_name(hbm.run(ctx))
    assert ms["hbm.copy"].value > 100 and ms["hbm.read"].value > 100
    assert ms["hbm.copy"].params["buffer_bytes"] <= 512 * 2**20


def test_pinned_beats_pageable(ctx):
    for direction, run in (("h2d", transfer.run_h2d), ("d2h", transfer.run_d2h)):
        ms = by_name(run(ctx))
        assert ms[f"{direction}.pinned.best"].value > ms[f"{direction}.pageable.best"].value > 0.5
        assert ms[f"{direction}.pinned.256MiB"].params["sweep"]


def test_graph_replay_is_cheaper_than_eager_launches(ctx):
    ms = by_name(launch.run(ctx))
    assert 0 < ms["launch.graph"].value < ms["launch.eager"].value
    assert ms["launch.eager"].params["kernels_per_rep"] == launch.KERNELS


def test_p2p_pairs(ctx):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    ms = p2p.run(ctx)
    assert len(ms) == torch.cuda.device_count() * (torch.cuda.device_count() - 1)
    assert all(m.status == "ok" and m.value > 1 for m in ms)


def test_nccl_collectives_are_correct_and_fast(ctx):
    import torch

    n = torch.cuda.device_count()
    if n < 2:
        pytest.skip("needs 2 GPUs")
    results, why = collectives.launch(collectives.Job(world=n, ops=collectives.OPS, sizes=(16 * 2**20,), budget_s=0.05),
                                     deadline_s=180)
    assert why == ""
    ms = collectives.to_measurements(results, n)
    assert all(m.status == "ok" for m in ms), [m.reason for m in ms if m.status != "ok"]
    assert all(m.value > 1 for m in ms)


def test_one_rank_collectives_replay_from_a_cuda_graph_and_time_nccl_not_python():
    results, why = collectives.launch(collectives.Job(world=1, ops=collectives.OPS, sizes=(4 * 2**10, 2**20), budget_s=0.05),
                                     deadline_s=180)
    assert why == ""
    for row in results["rows"]:
        assert row["wrong_ranks"] == [] and row["mode"] == "graph", row
        assert row["ops_per_batch"] > 1  # a small call is far shorter than the 1 ms batch target
    eager, why = collectives.launch(collectives.Job(world=1, ops=("all_reduce",), sizes=(4 * 2**10,), budget_s=0.05,
                                                     graph=False), deadline_s=180)
    assert why == "" and eager["rows"][0]["mode"] == "eager" and "issue_s_per_op" in eager["rows"][0]


def test_direct_nccl_and_torch_paths_agree_on_results_and_the_direct_one_is_not_slower():
    """Both paths check every op's result; at a small size the direct calls (what nccl-tests times)
    take no longer per call than the same calls through torch.distributed."""
    import torch

    n = torch.cuda.device_count()
    runs = {via: collectives.launch(collectives.Job(world=n, ops=collectives.OPS, sizes=(4 * 2**10,), budget_s=0.05, via=via),
                                         deadline_s=180)
            for via in ("nccl", "torch")}
    for via, (results, why) in runs.items():
        assert why == "" and results["meta"]["via"] == via, (via, results and results["meta"])
        assert all(r["wrong_ranks"] == [] for r in results["rows"]), results["rows"]
    per_call = {via: {r["op"]: min(r["samples"]) for r in res["rows"]} for via, (res, _) in runs.items()}
    for op in collectives.OPS:
        assert per_call["nccl"][op] <= per_call["torch"][op] * 1.1, (op, per_call)
