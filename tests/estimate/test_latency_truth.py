"""The estimate's expected TTFT and ITL against the truth set measured on an H100 and an H200
(benchmarks/estimate_latency_truth.py: prefill replayed as a CUDA graph, an engine-grade decode; rows in
benchmarks/results/estimate-truth/), and the kernel count the fixed cost rests on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfstack.estimate import config, infer
from perfstack.estimate.hardware import resolve
from perfstack.estimate.kernels import count

TRUTH = Path(__file__).parents[2] / "benchmarks" / "results" / "estimate-truth"
GPUS = {"h100": "h100-sxm", "h200": "h200"}
ROWS = [(card, r) for card in GPUS for r in json.loads((TRUTH / f"{card}.json").read_text())["rows"]]


def spec(r: dict) -> config.ModelSpec:
    return config.ModelSpec(name=r["config"], model_type="llama", n_layers=r["layers"], d_model=r["d"],
                            n_heads=r["heads"], n_kv_heads=r["kv"], head_dim=r["d"] // r["heads"], d_ff=r["ffn"],
                            vocab_size=r["vocab"], max_seq_len=8192, tied_embeddings=r["config"] != "8b")


def expected(card: str, r: dict, launch: str = "graph") -> dict:
    s = infer.InferSettings(batch=r["batch"], prompt=r["prompt"], gen=r["gen"], launch=launch)
    e = infer.estimate(spec(r), resolve(GPUS[card], "bf16"), s)
    time, flops = e.time or {}, e.flops or {}
    return {"ttft_expected_s": time["ttft_expected_s"], "itl_expected_s": time["itl_expected_s"],
            "kernels_per_step": flops["kernels_per_step"], "regime": e.regime or {}}


@pytest.mark.parametrize("card,r", ROWS, ids=[f"{c}-{r['config']}-b{r['batch']}" for c, r in ROWS])
def test_expected_ttft_and_itl_within_20_percent_of_the_truth_set(card, r):
    e = expected(card, r)
    assert e["itl_expected_s"] * 1e3 == pytest.approx(r["itl_ms"], rel=0.20)
    assert e["ttft_expected_s"] * 1e3 == pytest.approx(r["prefill_graph_ms"], rel=0.20)


@pytest.mark.parametrize("card,r", ROWS[:3], ids=[f"{c}-{r['config']}-b{r['batch']}" for c, r in ROWS[:3]])
def test_the_kernel_count_is_within_a_tenth_of_what_ran(card, r):
    assert count(spec(r)).per_step == pytest.approx(r["kernels_decode_step"], rel=0.10)


def test_eager_launches_bound_a_small_model_by_its_host():
    r = next(r for c, r in ROWS if c == "h100" and r["config"] == "1b" and r["batch"] == 1)
    graph, eager = expected("h100", r), expected("h100", r, "eager")
    assert eager["itl_expected_s"] > graph["itl_expected_s"]
    assert eager["regime"]["decode"] == "launch-bound" and graph["regime"]["decode"] != "launch-bound"


def test_moe_layers_launch_a_kernel_set_per_expert_read():
    dense = config.ModelSpec(name="d", model_type="mixtral", n_layers=4, d_model=1024, n_heads=8, n_kv_heads=8,
                             head_dim=128, d_ff=4096, vocab_size=32000, max_seq_len=4096)
    moe = config.ModelSpec(**{**dense.__dict__, "moe": config.MoE(n_routed=8, top_k=2, d_ff_expert=4096)})
    assert count(moe, 2).layers > count(dense).layers
    assert count(moe, 8).layers - count(moe, 2).layers == pytest.approx(4 * 3 * 6)


def test_tensor_parallel_gpus_each_pay_every_kernels_fixed_cost():
    r = next(r for c, r in ROWS if c == "h100" and r["config"] == "8b" and r["batch"] == 1)
    hw = resolve("h100-sxm", "bf16")
    one, two = (infer.estimate(spec(r), hw, infer.InferSettings(batch=1, prompt=1024, gen=128, tp=tp)) for tp in (1, 2))
    assert (two.time or {})["kernel_floor_s"] == pytest.approx((one.time or {})["kernel_floor_s"])
    assert (two.time or {})["itl_expected_s"] < (one.time or {})["itl_expected_s"]
