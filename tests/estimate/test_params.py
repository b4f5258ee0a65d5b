"""Parameter counts against the published figures (model cards / papers), within 0.5 %."""

import pytest

from perfstack.estimate import catalog
from perfstack.estimate.params import count

PUBLISHED_TOTAL = {  # the figures the model cards print
    "llama-3-8b": 8.03e9, "llama-3-70b": 70.6e9, "llama-3.1-405b": 405.9e9, "mistral-7b": 7.24e9,
    "mixtral-8x7b": 46.7e9, "qwen2.5-7b": 7.62e9, "qwen2.5-72b": 72.7e9, "deepseek-v3": 671e9, "gpt2": 124.4e6,
    "gpt2-medium": 354.8e6, "llama-2-7b": 6.74e9, "qwen2.5-0.5b": 0.494e9, "gemma-2-9b": 9.24e9,
    "gpt-neox-20b": 20.55e9, "mixtral-8x22b": 141e9, "deepseek-v2": 236e9, "qwen1.5-moe-a2.7b": 14.3e9,
}


@pytest.mark.parametrize("name,published", sorted(PUBLISHED_TOTAL.items()))
def test_total_within_half_a_percent(name, published):
    assert count(catalog.get(name)).total == pytest.approx(published, rel=0.005)


@pytest.mark.parametrize("name,published", [("mixtral-8x7b", 12.9e9), ("mixtral-8x22b", 39e9),
                                            ("qwen1.5-moe-a2.7b", 2.7e9)])
def test_active_within_half_a_percent(name, published):
    assert count(catalog.get(name)).active == pytest.approx(published, rel=0.005)


def test_exact_counts_match_the_safetensors_totals():
    # what Hugging Face reports for the released checkpoints
    assert count(catalog.get("llama-3-8b")).total == 8_030_261_248
    assert count(catalog.get("mistral-7b")).total == 7_241_732_096
    assert count(catalog.get("mixtral-8x7b")).total == 46_702_792_704
    assert count(catalog.get("qwen2.5-7b")).total == 7_615_616_512
    assert count(catalog.get("gpt2")).total == 124_439_808


def test_deepseek_v3_active_is_37_6b_not_exactly_37b():
    """DeepSeek publishes "37B activated" (two significant figures). Counting every weight a token
    uses -- MLA, 1 shared + 8 routed experts on 58 MoE layers, 3 dense layers, embeddings and head --
    gives 37.55 B; without the 0.93 B input-embedding table 36.63 B. Neither is within 0.5 % of the
    rounded 37; both round to it at the precision it is given (±1.5 %)."""
    c = count(catalog.get("deepseek-v3"))
    assert c.active == pytest.approx(37.55e9, rel=1e-3)
    assert c.active - 129280 * 7168 == pytest.approx(36.63e9, rel=1e-3)
    assert c.active == pytest.approx(37e9, rel=0.015)
    assert c.total == pytest.approx(671.03e9, rel=1e-4)  # the MTP layer (14 B, HF total 685 B) is not counted


def test_tied_embeddings_counted_once():
    tied, untied = catalog.get("qwen2.5-0.5b"), catalog.get("qwen2.5-0.5b").with_overrides(tied_embeddings=False)
    assert count(untied).total - count(tied).total == 151936 * 896
    # the tied table is still an output projection for FLOPs
    assert count(tied).matmul_active == count(untied).matmul_active
