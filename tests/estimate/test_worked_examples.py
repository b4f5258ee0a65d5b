"""The worked examples of reference/estimate_formulas.md §2, through perfstack's own functions.

Rows the sources got right are reproduced (with the unit the source used: several quote GiB as
"GB"). The 22 rows the reference marks ✗ are here too, asserting the right value and, where it
matters, that the source's printed figure is NOT what the formula gives.
"""

import math

import pytest

from perfstack import specs
from perfstack.estimate import catalog, comms, flops, hardware, infer, memory
from perfstack.estimate.config import parse_config
from perfstack.estimate.latency import pipeline_bubble, ridge
from perfstack.estimate.params import count

GB, GiB, MiB, KiB = 1e9, 2**30, 2**20, 1024


def kv_tok(name_or_spec, b=2.0):
    spec = catalog.get(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    return memory.kv_cache(spec, b).per_token


def mha(L, heads, d_h, kv=None):
    """A hypothetical architecture from the book (no real model card)."""
    return parse_config(dict(model_type="llama", num_hidden_layers=L, hidden_size=heads * d_h,
                             num_attention_heads=heads, num_key_value_heads=kv or heads,
                             intermediate_size=4 * heads * d_h, vocab_size=32000))


# --- §2.1 KV cache ----------------------------------------------------------------------------

def test_we01_llama3_8b_kv():
    assert kv_tok("llama-3-8b") == 128 * KiB
    assert kv_tok("llama-3-8b") * 4096 == 512 * MiB
    assert kv_tok("llama-3-8b") * 32768 == 4 * GiB


def test_we02_llama3_70b_kv_units_mixed():
    t = kv_tok("llama-3-70b")
    assert t == 320 * KiB
    assert t * 4096 == 1280 * MiB  # the source's "1.28 GB" is 1,280 MiB / 1000
    assert t * 4096 / GB == pytest.approx(1.342, abs=1e-3)
    assert t * 32768 == 10 * GiB


def test_we03_llama31_405b_kv():
    t = kv_tok("llama-3.1-405b")
    assert t == 504 * KiB
    assert t * 4096 / MiB == 2016 and t * 32768 / GiB == 15.75


def test_we04_llama70b_batch32_32k():
    assert 32 * kv_tok("llama-3-70b") * 32768 == 320 * GiB


def test_we05_gqa_plus_fp8_is_16x_for_llama3_70b():
    spec = catalog.get("llama-3-70b")
    as_mha = spec.with_overrides(n_kv_heads=spec.n_heads)
    assert kv_tok(as_mha, 2) / kv_tok(spec, 1) == 16


def test_we06_we07_llama_class_13b_mha_gqa_mqa():
    m = mha(40, 40, 128)
    assert kv_tok(m) == 819_200
    assert kv_tok(m) * 4096 / GB == pytest.approx(3.355, abs=1e-3)
    assert kv_tok(m, 1) * 4096 / GB == pytest.approx(1.678, abs=1e-3)
    assert kv_tok(mha(40, 40, 128, kv=8)) * 4096 / GB == pytest.approx(0.6711, abs=1e-4)
    assert kv_tok(mha(40, 40, 128, kv=8), 1) * 4096 / GB == pytest.approx(0.3355, abs=1e-4)
    assert kv_tok(mha(40, 40, 128, kv=1)) * 4096 / GB == pytest.approx(0.0839, abs=1e-4)


def test_we08_hypothetical_70b_mha32():
    m = mha(80, 32, 128)
    assert kv_tok(m) == 1_310_720
    assert kv_tok(m) * 250_000 / GB == pytest.approx(327.68)
    # the real Llama-3 70B (8 KV heads) holds the same 250K tokens in 81.9 GB
    assert kv_tok("llama-3-70b") * 250_000 / GB == pytest.approx(81.92)


def test_we10_40_layers_16x64_fp16():
    assert kv_tok(mha(40, 16, 64)) * 1000 / GB == pytest.approx(0.1638, abs=1e-4)


def test_we11_wrong_1gib_buffer_holds_819_tokens_not_4_to_8k():
    """✗ 002:20432 says a 1 GiB buffer holds the KV of ~4-8k tokens of the 80-layer/32-head model."""
    assert GiB // kv_tok(mha(80, 32, 128)) == 819
    assert GiB // kv_tok(mha(80, 32, 128, kv=8)) == 3276  # even with 8 KV heads
    assert kv_tok(mha(80, 32, 128)) * 7500 / GB == pytest.approx(9.83, abs=0.01)


def test_we13_wrong_180_minus_70_is_110():
    """✗ 002:19645: 122 GB is 192 − 70, the raw B200 capacity the book says not to use."""
    b200 = specs.lookup("b200")
    assert b200.hbm_gb - 70 == 110 and b200.hbm_gb - 70 != 122


def test_we14_int8_to_int4_kv_halves():
    assert memory.DTYPE_BYTES["int4"] / memory.DTYPE_BYTES["int8"] == 0.5


# --- §2.2 memory fit ---------------------------------------------------------------------------

def _llama70_4k():
    return infer.InferSettings(batch=1, prompt=4000, gen=96)


def test_we15_wrong_llama3_70b_bf16_does_not_fit_one_h200():
    """✗ 001:801 totals ≈147 GB and calls it a (barely) fit on a 141 GB H200: it does not fit."""
    m = catalog.get("llama-3-70b").with_overrides(max_seq_len=None)
    est = infer.estimate(m, hardware.resolve("h200", "bf16"), _llama70_4k())
    assert est.memory["weights_bytes"] / GB == pytest.approx(141.1, abs=0.1)
    assert est.memory["total_bytes"] > 141e9
    fit = {r.gpu: r.gpus_needed for r in est.fit}
    assert fit["h200"] == 2 and fit["h100-sxm"] == 2  # 2×H100 (160 GB) does hold it ✓


def test_we17_wrong_formula_100t_params_16bit_is_200tb_or_181_9tib():
    """✗ 002:427 multiplies by 8 bits/byte; 100T × 2 B = 200 TB = 181.9 TiB (the source's "182 TB")."""
    b = 100e12 * memory.DTYPE_BYTES["bf16"]
    assert b == 200e12 and b / 2**40 == pytest.approx(181.9, abs=0.05)


def test_we18_gpus_for_100t_params():
    b = 100e12 * 2
    assert math.ceil(b / (192 * GB)) == 1042 and math.ceil(b / (specs.lookup("b200").hbm_gb * GB)) == 1112
    assert math.ceil(math.ceil(b / (288 * GB)) / 8) == 87  # B300 nodes: round up, not 86


def test_we19_8xb200_and_r1_fp8():
    assert 8 * specs.lookup("b200").hbm_gb == 1440 and 4 * specs.lookup("b200").hbm_gb == 720
    r1 = memory.weight_bytes(catalog.get("deepseek-v3"), 1.0)
    assert r1 / GB == pytest.approx(671, abs=0.1) and r1 < 720 * GB < memory.weight_bytes(catalog.get("deepseek-v3"), 2)


def test_we20_70b_4bit_fits_128gb():
    m = catalog.get("llama-3-70b")
    w = memory.weight_bytes(m, 2.0, quant="int4")
    # 4.25 bits per block weight (group-128 scales) = 37.2 GB, + 2.1 GB of embeddings/head kept 16-bit
    assert w / GB == pytest.approx(0.53125 * (count(m).total - 2 * 128256 * 8192) / 1e9 + 2 * 128256 * 8192 * 2 / 1e9,
                                   rel=1e-3)
    assert 37 * GB < w < 128 * GB
    assert w / 500e9 == pytest.approx(0.08, abs=0.005)  # ITL floor at ~500 GB/s ≈ 70-80 ms


def test_we21_wrong_framing_140gb_does_not_fit_an_80gb_a100():
    """≈/✗ 003:32: the load time is right, but 140 GB cannot be loaded into an 80 GB A100."""
    assert 140 / 32 == pytest.approx(4.4, abs=0.05)
    assert 140 > specs.lookup("a100-sxm4-80gb").hbm_gb
    assert specs.pcie_gbps(4, 16) == pytest.approx(31.5, abs=0.1)  # per direction


def test_we23_wrong_fp16_weights_keep_about_1x_memory():
    """✗ 002:21062: FP16 weights + FP8 activations is ≈1.0× the FP16 memory when weights dominate."""
    m = catalog.get("llama-3-8b")
    s16 = infer.InferSettings(batch=1, prompt=512, gen=64)
    s16_fp8kv = infer.InferSettings(batch=1, prompt=512, gen=64, kv_dtype="fp8")
    hw = hardware.resolve("h100-sxm", "bf16")
    a = infer.estimate(m, hw, s16).memory["total_bytes"]
    b = infer.estimate(m, hw, s16_fp8kv).memory["total_bytes"]
    assert b / a > 0.95
    m70 = catalog.get("llama-3-70b")
    w4 = memory.weight_bytes(m70, 2.0, quant="int4") / memory.weight_bytes(m70, 2.0)
    assert 0.25 < w4 < 0.30  # INT4 weights ≈0.27× (scales, 16-bit embeddings), not the table's 0.2


def test_we25_adam_three_copies_vs_16_bytes_per_param():
    assert 100e12 * 3 == 300e12  # the source's arithmetic
    m = catalog.get("llama-3-8b")
    t = memory.training(m, 1, 128, "bf16", "adamw")
    assert (t.params + t.grads + t.optimizer + t.master) / count(m).total == 16


def test_we26_we27_mig_memory():
    assert 180 / 8 == pytest.approx(22.5)
    assert 132 / 7 == pytest.approx(18.9, abs=0.05) and 2 * 2 / 7 * 132 == pytest.approx(75.4, abs=0.05)
    assert 2 * 45 == 90  # ✗ 002:2074: two 2g.45gb slices are 90 GB, not 45


# --- §2.3 compute, time, throughput --------------------------------------------------------------

def test_we28_wrong_100t_params_29t_tokens_is_1_74e28():
    """✗ 002:411 quotes 1.2e29; 6·N·T = 1.74e28 (the 1.2e29 needs T ≈ 200T tokens)."""
    m = mha(1, 1, 1)
    flops_6nt = 6 * 100e12 * 29e12
    assert flops_6nt == pytest.approx(1.74e28)
    assert 1.2e29 / flops_6nt == pytest.approx(6.9, abs=0.05)
    assert m is not None


def test_we29_gpt3_compute():
    assert 6 * 175e9 * 300e9 == pytest.approx(3.15e23)


def test_we30_ridge_h100_from_the_spec_table():
    h = hardware.resolve("h100-sxm", "bf16")
    assert ridge(h.peak_flops, h.hbm_bw) == pytest.approx(295, abs=1)


def test_we31_to_we35_intensity_arithmetic():
    assert 1 / 12 == pytest.approx(0.0833, abs=1e-4) and 80 / 8 == 10 and 10 / (1 / 12) == pytest.approx(120)
    assert 15 / 10 == 1.5 and 170 / 21 == pytest.approx(8.1, abs=0.05) and 170 / 15 == pytest.approx(11.3, abs=0.05)
    assert 4 / 12 == pytest.approx(0.333, abs=1e-3) and 4 / 36 == pytest.approx(0.111, abs=1e-3)
    assert 10_000 / 80 == 125 and 10 * 1.5 == 15 and 1 / 4 == 0.25


def test_we36_wrong_fp8_is_2x_bf16_not_3x():
    """✗ 002:8626 "2-3×": the dense FP8/BF16 peak ratio is 2.0 (001:655 ✓)."""
    h = specs.lookup("h100-sxm")
    assert h.fp8 / h.bf16 == pytest.approx(2.0, abs=0.01)


def test_we37_wrong_bf16_tensor_core_vs_fp32_is_15x_not_4x():
    """✗ 002:8618: H100 989/67 = 14.8×, A100 312/19.5 = 16×."""
    assert specs.lookup("h100-sxm").bf16 / specs.lookup("h100-sxm").fp32 == pytest.approx(14.8, abs=0.1)
    assert specs.lookup("a100-sxm4-80gb").bf16 / specs.lookup("a100-sxm4-80gb").fp32 == pytest.approx(16.0)


def test_we38_to_we47_throughput_arithmetic():
    assert 100_000 / 10 == 10_000 and 8 * 1500 == 12_000 and 10_000 / 12_000 == pytest.approx(0.8333, abs=1e-4)
    assert 300 / 1000 == 0.30 and 5 / 8 == 0.625
    assert [round(x / 24 * 100, 2) for x in (10.5, 9.0, 4.0, 0.5)] == [43.75, 37.5, 16.67, 2.08]
    assert 10 + 12 == 22 and max(10, 12) == 12  # F22 overlap
    assert 70 / 100 == 0.7 and 1 - 0.5 / 48.5 == pytest.approx(0.9897, abs=1e-4)
    assert 200 * 5e-6 * 50 == pytest.approx(0.05) and 5 / 20 == 0.25


def test_we48_wrong_speculative_expression():
    """✗ 001:479 prints 1 + (0.7 − 1)·(1/50) = 0.994; Leviathan with γ = 1 gives (1+α)/(1+c) = 1.667."""
    alpha, c = 0.7, 1 / 50
    assert 1 + (alpha - 1) * c == pytest.approx(0.994)

    def speedup(gamma):
        return (1 - alpha ** (gamma + 1)) / (1 - alpha) / (gamma * c + 1)

    assert speedup(1) == pytest.approx(1.667, abs=1e-3)
    assert speedup(3) == pytest.approx(2.39, abs=0.01) and speedup(5) == pytest.approx(2.67, abs=0.01)


def test_we49_we55_we56():
    assert 100 / 4 == 25 and 5 / (100 / 5) == 0.25
    assert 200 / 60 * 1.3 == pytest.approx(4.33, abs=0.01) and 300 / 60 * 1.3 == pytest.approx(6.5)


def test_we50_wrong_3_4_to_150_tok_s_is_44x():
    """✗ 002:718: the quoted per-GPU rates differ 44×, not "roughly 30×"."""
    assert 150 / 3.4 == pytest.approx(44.1, abs=0.1)


def test_we51_power():
    assert 100 * 0.7 == 70 and 50 * 1.0 == 50


def test_we52_wrong_framing_disaggregated_goodput():
    """✗ 002:19323: goodput is already per GPU; total rps 10 vs 1.6 is 6.25× for 3× the GPUs."""
    assert min(5.6 * 2, 10) / 3 == pytest.approx(3.33, abs=0.01)
    assert (min(5.6 * 2, 10) / 3) / 1.6 == pytest.approx(2.08, abs=0.01)
    assert 10 / 1.6 == 6.25


def test_we53_we54_chunked_prefill_attention_pairs():
    """002:18521-18560 T(N) = N(N+1)/2: perfstack's causal pair count."""
    m = mha(1, 1, 1)
    t = lambda n: flops.attention_pairs(m, n)  # noqa: E731
    assert t(20_000) == 200_010_000
    assert t(10_000) + (t(20_000) - t(10_000)) == t(20_000)  # chunking does not change the total
    assert t(10_000) == 50_005_000 and t(20_000) - t(10_000) == 150_005_000
    assert t(6000) == 18_003_000 and t(2000) == 2_001_000
    assert 2 * t(6000) + t(2000) == 38_007_000 and 3 * t(2000) == 6_003_000
    assert t(2000) * 2 + t(6000) == 22_005_000
    assert 1 - 22_005_000 / 38_007_000 == pytest.approx(0.421, abs=1e-3)


def test_we57_wrong_60_to_95_percent_is_1_58x():
    assert 95 / 60 == pytest.approx(1.58, abs=0.01)  # ✗ 002:18640 "double"


def test_we58_wrong_routing_60_percent_to_a_10x_smaller_model_is_2_2x():
    assert 1 / (0.6 * 0.1 + 0.4 * 1) == pytest.approx(2.17, abs=0.01)  # ✗ 002:19033 "5×"


def test_we61_we64():
    assert 2 / 8 == 0.25
    assert 1e9 / 100e9 == 0.01 and 1e9 / 900e9 == pytest.approx(1.1e-3, abs=1e-4)


def test_we63_llama2_70b_bf16_on_one_h100_misses_40ms_tpot():
    m = parse_config(dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                          num_attention_heads=64, num_key_value_heads=8, vocab_size=32000))
    assert count(m).total == pytest.approx(68.98e9, rel=1e-3)
    assert memory.weight_bytes(m, 2.0) / hardware.resolve("h100-sxm", "bf16").hbm_bw == pytest.approx(0.0412,
                                                                                                       abs=5e-4)


# --- §2.4 communication and links ---------------------------------------------------------------

def test_we65_two_rank_all_reduce_sends_s_per_rank():
    assert comms.ring_allreduce(2, 400e6) == 400e6
    assert 400e6 / 4e-3 == 100e9 and 800 / 8 == 100 and 1024 * 1024 * 100 * 4 == 400 * MiB


def test_we66_wrong_tree_and_ring_steps_for_72_gpus():
    """✗ 002:22788: log2 72 = 6.17 → 7 levels; a ring all-reduce takes 2·71 = 142 steps."""
    assert math.ceil(math.log2(72)) == 7 and 2 * (72 - 1) == 142


def test_we69_wrong_nvlink5_is_900_gb_s_per_direction():
    """✗ 002:22675 (100 GB/s per port per direction would give 3.6 TB/s)."""
    b200 = specs.lookup("b200")
    assert b200.nvlink_gbps_per_gpu == 1800
    assert hardware.link_of(b200)[0] == 900e9
    assert 18 * 100 * 2 == 3600


def test_we70_to_we74_link_arithmetic():
    assert 72 * 1.8 == pytest.approx(129.6) and 3.2 * 18 == pytest.approx(57.6) and 1800 / 128 == pytest.approx(14.06,
                                                                                                          abs=0.01)
    assert 100 / 8 == 12.5 and 2 * 800 == 1600


def test_we75_wrong_pcie_gen5_x16_vs_gen4_x8_is_4x():
    """✗ 001:91 says "8× regression" and "≈1 GB/s per GT/s per lane"."""
    assert specs.pcie_gbps(5, 16) / specs.pcie_gbps(4, 8) == pytest.approx(4.0)
    assert specs.pcie_gbps(5, 1) / 32 == pytest.approx(0.123, abs=1e-3)


def test_we76_wrong_10gb_all_reduce_over_72_gpus_takes_22ms():
    """✗ 002:23671 "tens of GB in a few ms"."""
    assert comms.ring_allreduce(72, 10e9) / 900e9 == pytest.approx(21.9e-3, abs=0.1e-3)


def test_we77_to_we86_system_arithmetic():
    assert 192 * 72 == 13_824 and 13_824 / 1024 == 13.5
    assert 72 * 288 == 20_736 and 36 * 500 == 18_000 and 576 * 288 == 165_888
    assert 8 * 3 * 8 == 192 and 192 / 80 == 2.4 and 8 / 3.35 == pytest.approx(2.39, abs=0.01)
    assert 18 * 6 + 20 == 128 and 8 * 200 / 1000 == 1.6 and 100 * 8 * 200 / 1000 == 160
    assert 9.6 / 8 == pytest.approx(1.2) and 100 / 10 == 10


def test_we82_wrong_gb200_superchip_is_864_gb():
    assert 480 + 2 * 192 == 864  # ≈900 ✓; "~500 TB/s" LPDDR5X is ~500 GB/s ✗


def test_we87_wrong_allocated_stays_0_8_gb():
    sizes = [2e8 * 4, 1e7 * 4, 5e7 * 4]
    assert sizes == [0.8e9, 0.04e9, 0.2e9] and sum(sizes) == pytest.approx(1.04e9)
    assert sizes[0] / GB == 0.8  # ✗ 002:2836 prints 0.000 GB allocated while this buffer is live


def test_we88_wrong_64_gpu_layout_needs_128():
    assert 60 / 4 == 15 and 4 * 2 == 8 and 2 * 64 == 128


def test_we89_we90_we92_to_we96():
    assert 16 / 4 == 4 and 8 * 72 == 576 and 1024 * 2 == 2048
    assert 139 / 80 == pytest.approx(1.74, abs=0.01) and 4 * 10 == 40
    assert 1 - 30 / 45 == pytest.approx(1 / 3) and 1 - 173 / 248 == pytest.approx(0.302, abs=1e-3)


# --- §2.5 derived reference cases R-01..R-12 ---------------------------------------------------

def test_r01_ttft_llama3_70b():
    m = catalog.get("llama-3-70b")
    pmm, pat = flops.prefill(m, 1, 4096)
    N = count(m).total
    assert 2 * N * 4096 / (989e12 * 0.5) == pytest.approx(1.169, abs=1e-3)
    assert pat == pytest.approx(4 * 80 * 64 * 128 * 4096 * 4097 / 2)  # causal half of 4.40e13
    assert 4 * 80 * 64 * 128 * 4096**2 == pytest.approx(4.40e13, rel=1e-3)
    # matmul parameters only: the input embedding is a lookup, the head runs for the last position only
    head = 128256 * 8192
    assert pmm == 2 * (count(m).matmul_active - head) * 4096 + 2 * head
    assert pmm == pytest.approx(2 * N * 4096, rel=0.04)


def test_r02_r03_itl():
    assert (141.1e9 + 1.34e9) / (2 * 3.35e12 * 0.7) == pytest.approx(30.4e-3, abs=0.1e-3)
    m = catalog.get("llama-3-8b")
    w = memory.weight_bytes(m, 2)
    kv = memory.kv_cache(m, 2).per_token
    assert (w + kv * 2048) / (3.35e12 * 0.7) == pytest.approx(6.96e-3, abs=0.02e-3)
    itl64 = (w + 64 * kv * 2048) / (3.35e12 * 0.7)
    assert itl64 == pytest.approx(14.17e-3, abs=0.02e-3) and 64 / itl64 == pytest.approx(4515, abs=10)


def test_r04_max_concurrent_8k_sequences():
    m = catalog.get("llama-3-8b")
    free = 80e9 - memory.weight_bytes(m, 2) - 2e9
    assert free / GB == pytest.approx(61.94, abs=0.01)
    assert int(free // (memory.kv_cache(m, 2).per_token * 8192)) == 57


def test_r05_training_step_70b():
    t = 6 * 70e9 * 1e6 / (8 * 989e12 * 0.45)
    assert t == pytest.approx(118, abs=0.5) and 1e6 / t == pytest.approx(8477, abs=5)


def test_r06_zero_stages_llama3_8b():
    m = catalog.get("llama-3-8b")
    per = {z: memory.training(m, 1, 128, "bf16", "adamw", zero=z, dp=8) for z in range(4)}
    states = {z: (t.params + t.grads + t.optimizer + t.master) / GB for z, t in per.items()}
    assert states[0] == pytest.approx(128.5, abs=0.05)
    assert states[1] == pytest.approx(44.2, abs=0.05)
    assert states[2] == pytest.approx(30.1, abs=0.05)
    assert states[3] == pytest.approx(16.1, abs=0.05)


def test_r07_decode_compute_bound_batch():
    h = hardware.resolve("h100-sxm", "bf16")
    assert ridge(h.peak_flops, h.hbm_bw) * 2 / 2 == pytest.approx(295, abs=1)


def test_r08_mla_vs_gqa():
    assert kv_tok("deepseek-v3") == 70_272
    assert kv_tok("llama-3-70b") / kv_tok("deepseek-v3") == pytest.approx(4.66, abs=0.01)


def test_r09_mistral_sliding_window():
    kv = memory.kv_cache(catalog.get("mistral-7b"), 2)
    assert kv.per_seq(32768) == 0.5 * GiB and kv.per_token_window * 32768 == 4 * GiB


def test_r10_r11_r12_comms_and_bubble():
    w = memory.weight_bytes(catalog.get("llama-3-8b"), 2)
    assert comms.ring_allreduce(8, w) / GB == pytest.approx(28.1, abs=0.05)
    assert comms.ring_allreduce(8, w) / 450e9 == pytest.approx(62e-3, abs=1e-3)
    assert 1 * 4096 * 8192 * 2 / 1e6 == pytest.approx(67.1, abs=0.05)
    assert 2 * 80 * 4096 * 8192 * 2 / GB == pytest.approx(10.7, abs=0.05)
    assert pipeline_bubble(4, 16) == pytest.approx(3 / 19)
