"""Unit checks of the memory, FLOP, latency and communication models."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfstack.estimate import catalog, comms, flops, hardware, infer, memory, train
from perfstack.estimate.latency import moe_experts_touched, roofline
from perfstack.estimate.params import count

H100 = hardware.resolve("h100-sxm", "bf16")


def test_tp_shards_weights_and_kv_heads_until_each_gpu_has_one():
    m = catalog.get("llama-3-70b")  # 8 KV heads
    assert memory.kv_cache(m, 2, tp=4).per_token == memory.kv_cache(m, 2).per_token / 4
    assert memory.kv_cache(m, 2, tp=16).per_token == memory.kv_cache(m, 2, tp=8).per_token  # replicated
    assert memory.weight_bytes(m, 2, tp=4) == memory.weight_bytes(m, 2) / 4


def test_mla_latent_is_not_sharded_and_window_caps():
    assert memory.kv_cache(catalog.get("deepseek-v3"), 2, tp=8).per_token == 70_272
    g = catalog.get("gemma-2-9b")  # 21 of 42 layers local (W = 4096)
    kv = memory.kv_cache(g, 2)
    assert kv.per_seq(8192) == kv.per_token * 8192 + kv.per_token_window * 4096


def test_quantized_weights_and_fp8_kv():
    m = catalog.get("llama-3-8b")
    s = dict(batch=4, prompt=1024, gen=128)
    base = infer.estimate(m, H100, infer.InferSettings(**s)).memory
    q = infer.estimate(m, H100, infer.InferSettings(**s, weights="int4", kv_dtype="fp8")).memory
    assert q["kv_cache_bytes"] == base["kv_cache_bytes"] / 2
    assert q["weights_bytes"] < 0.4 * base["weights_bytes"]


def test_fp8_weights_use_the_fp8_peak():
    m = catalog.get("llama-3-8b")
    hw8 = hardware.resolve("h100-sxm", "fp8")
    assert hw8.peak_flops == pytest.approx(1978.9e12)
    a100 = hardware.resolve("a100-sxm4-80gb", "fp8")  # no FP8 tensor cores: computed in 16-bit
    assert a100.dtype == "bf16" and any("no FP8" in x for x in a100.assumptions)
    assert infer.estimate(m, hw8, infer.InferSettings(1, 512, 16, weights="fp8")).time["ttft_s"] > 0


def test_max_batch_fits_and_one_more_does_not():
    m = catalog.get("llama-3-8b")
    for chunk in (None, 512):
        def total(b):
            s = infer.InferSettings(batch=b, prompt=8000, gen=192, prefill_chunk=chunk)
            return infer.estimate(m, H100, s)
        bmax = total(1).capacity["max_batch"]
        assert total(bmax).memory["total_bytes"] <= 80e9 < total(bmax + 1).memory["total_bytes"]
        if chunk:  # a chunked prefill leaves room for KV: R-04 gives 57 with KV only and 2 GB overhead
            assert 45 < bmax < 57
        else:  # eager whole-prompt prefill of every sequence at once holds 8000·(3d + 3F)·2 B each
            assert 20 < bmax < 35


def test_decode_turns_compute_bound_past_the_ridge():
    m = catalog.get("llama-3-8b")
    small = infer.estimate(m, H100, infer.InferSettings(batch=1, prompt=128, gen=2))
    big = infer.estimate(m, H100, infer.InferSettings(batch=1024, prompt=16, gen=2))
    assert small.regime["decode"] == "memory-bound" and big.regime["decode"] == "compute-bound"


def test_moe_decode_reads_only_the_experts_it_touches():
    assert moe_experts_touched(8, 2, 1) == 2
    assert moe_experts_touched(256, 8, 1) == pytest.approx(8)
    assert 7.9 < moe_experts_touched(8, 2, 64) <= 8
    m = catalog.get("mixtral-8x7b")
    b1 = infer.estimate(m, H100, infer.InferSettings(batch=1, prompt=64, gen=2)).flops["decode_step_bytes"]
    assert b1 == pytest.approx(count(m).active * 2, rel=0.01)


def test_training_memory_by_optimizer_and_precision():
    m = catalog.get("llama-3-8b")
    N = count(m).total
    t = {o: memory.training(m, 1, 512, "bf16-mixed", o) for o in ("adamw", "sgd", "adam8bit", "adafactor")}
    assert t["adamw"].optimizer == 8 * N and t["sgd"].optimizer == 4 * N and t["adam8bit"].optimizer == 2 * N
    assert t["adafactor"].optimizer < 0.01 * N * 4
    f32 = memory.training(m, 1, 512, "fp32", "adamw")
    assert f32.autocast_copies == 0 and f32.master == 0
    b16 = memory.training(m, 1, 512, "bf16", "adamw")
    assert b16.params == 2 * N and b16.master == 4 * N


def test_pipeline_and_tensor_parallel_divide_the_model():
    m = catalog.get("llama-3-70b")
    one = memory.training(m, 1, 2048, "bf16-mixed", "adamw")
    split = memory.training(m, 1, 2048, "bf16-mixed", "adamw", tp=8, pp=4, micro_batches=8)
    assert split.params == pytest.approx(one.params / 32)
    assert split.activations < one.activations


def test_training_flops_6nt_and_8nt():
    m = catalog.get("llama-3-8b")
    mm, at = flops.training_step(m, 4096, 4096)
    mm8, at8 = flops.training_step(m, 4096, 4096, recompute=True)
    assert mm == 6 * count(m).matmul_active * 4096 and mm8 == mm * 8 / 6 and at8 == at * 8 / 6


def test_comms_volumes():
    assert comms.data_parallel(8, 1e9, 4, 2, 0)[0] == pytest.approx(2 * 7 / 8 * 4e9)
    assert comms.data_parallel(8, 1e9, 4, 2, 3)[0] == pytest.approx(7 / 8 * 1e9 * 8)
    assert comms.tensor_parallel(1, 80, 1e6, 4) == 0
    s = train.TrainSettings(batch=1, seq=2048, dp=2, tp=2, pp=2, micro_batches=4)
    est = train.estimate(catalog.get("llama-3-8b"), H100, s)
    assert est.comms["tp_bytes"] > 0 and est.comms["pp_bytes"] > 0
    assert est.time["pipeline_bubble_fraction"] == pytest.approx(1 / 5)


def test_roofline_regimes():
    b = roofline(1e12, 1e9, 1e15, 1e12)
    assert b.seconds == 1e-3 and b.regime == "compute-bound"
    assert roofline(1e9, 1e9, 1e15, 1e12).regime == "memory-bound"


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 64), prompt=st.integers(1, 4000), gen=st.integers(1, 4000))
def test_inference_grows_with_batch_and_length(batch, prompt, gen):
    m = catalog.get("mistral-7b")
    a = infer.estimate(m, H100, infer.InferSettings(batch, prompt, gen))
    b = infer.estimate(m, H100, infer.InferSettings(batch + 1, prompt + 1, gen))
    assert b.memory["total_bytes"] > a.memory["total_bytes"] > a.memory["weights_bytes"]
    assert b.time["ttft_s"] >= a.time["ttft_s"] and a.time["itl_s"] > 0


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 16), seq=st.integers(16, 4096), ckpt=st.booleans())
def test_checkpointing_never_costs_activation_memory(batch, seq, ckpt):
    m = catalog.get("qwen2.5-0.5b")
    t = memory.training(m, batch, seq, "bf16-mixed", "adamw", grad_ckpt=ckpt)
    assert t.activations_ckpt < t.activations_no_ckpt
    assert t.peak_allocated >= t.params + t.optimizer
