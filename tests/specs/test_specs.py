from __future__ import annotations

import json
from importlib import resources

import pytest

from perfstack import specs
from perfstack.specs import (
    DTYPES,
    GpuSpec,
    SpecTableError,
    close_matches,
    load,
    lookup,
    lookup_or_derive,
    pcie_gbps,
    practical_fraction,
)

# Names as NVML / nvidia-smi report them -> table id.
NVML_NAMES = {
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA H200": "h200",
    "NVIDIA H200 NVL": "h200-nvl",
    "NVIDIA H20": "h20",
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "Tesla V100-SXM2-32GB": "v100-sxm2-32gb",
    "Tesla V100-SXM2-16GB": "v100-sxm2-16gb",
    "Tesla T4": "t4",
    "NVIDIA A10": "a10",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "NVIDIA B200": "b200",
    "NVIDIA GB200": "gb200",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA GeForce RTX 5090": "rtx-5090",
}

UNKNOWN_NAMES = [
    "NVIDIA GeForce RTX 4090 D",
    "NVIDIA GeForce RTX 4090 Laptop GPU",
    "NVIDIA A10G",
    "NVIDIA L40",
    "NVIDIA H800",
    "NVIDIA H100",  # ambiguous between SXM, PCIe and NVL: must not guess
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
    "NVIDIA A100",
    "NVIDIA T400",
    "NVIDIA GeForce RTX 3090",
    "Tesla V100-PCIE-16GB",
    "AMD Instinct MI300X",
    "",
    "   ",
    "garbage",
    "h100",
]


@pytest.mark.parametrize("name,expected", sorted(NVML_NAMES.items()))
def test_lookup_every_nvml_name(name: str, expected: str) -> None:
    spec = lookup(name)
    assert spec is not None and spec.id == expected
    assert [s.id for s in specs.matches(name)] == [expected]  # exactly one row, never ambiguous


@pytest.mark.parametrize("name", UNKNOWN_NAMES)
def test_unknown_names_return_none(name: str) -> None:
    assert lookup(name) is None


def test_lookup_is_case_and_space_insensitive_and_accepts_ids() -> None:
    assert lookup("  nvidia   h100   pcie ").id == "h100-pcie"
    assert lookup("NVIDIA H100 80GB HBM3\n").id == "h100-sxm"
    assert lookup("h100-sxm").id == "h100-sxm"
    assert lookup("A100-SXM4-40GB").id == "a100-sxm4-40gb"  # older drivers omit the NVIDIA prefix


def test_tricky_neighbours_resolve_apart() -> None:
    sxm, pcie, nvl = lookup("NVIDIA H100 80GB HBM3"), lookup("NVIDIA H100 PCIe"), lookup("NVIDIA H100 NVL")
    assert (sxm.sm_count, pcie.sm_count) == (132, 114)
    assert sxm.bf16 == pytest.approx(989.4) and pcie.bf16 == pytest.approx(756)
    assert nvl.hbm_gb == 94
    a40, a80 = lookup("NVIDIA A100-SXM4-40GB"), lookup("NVIDIA A100 80GB PCIe")
    assert a40.id == "a100-sxm4-40gb" and a40.hbm_gb == 40 and a40.tdp_w == 400
    assert a80.id == "a100-pcie-80gb" and a80.hbm_gb == 80 and a80.hbm_tbps == pytest.approx(1.935)
    assert lookup("NVIDIA H200").id == "h200" and lookup("NVIDIA H20").id == "h20"


def test_no_two_rows_claim_the_same_name() -> None:
    names = list(NVML_NAMES) + [s.name for s in load()] + UNKNOWN_NAMES
    for name in names:
        assert len(specs.matches(name)) <= 1, name


def test_every_row_has_a_source_and_sane_values() -> None:
    rows = load()
    assert len(rows) >= 20
    assert len({r.id for r in rows}) == len(rows)
    for r in rows:
        assert r.source.strip() and any(ch.isdigit() for ch in r.source), r.id  # names a document and year
        assert r.fp32 is not None and r.fp32 > 0, r.id
        for lo, hi in [("fp32", "bf16"), ("fp32", "fp16"), ("fp32", "tf32"), ("tf32", "bf16"), ("bf16", "fp8"),
                       ("fp64", "fp64_tensor"), ("fp8", "fp4")]:
            a, b = getattr(r, lo), getattr(r, hi)
            if a is not None and b is not None:
                assert b >= a, f"{r.id}: {hi} {b} < {lo} {a}"
        if r.bf16 is not None and r.fp16 is not None:
            assert r.bf16 == r.fp16, r.id
        assert r.hbm_tbps is not None and 0.1 < r.hbm_tbps < 20, r.id
        assert r.hbm_gb is not None and 8 <= r.hbm_gb <= 300, r.id
        if r.sm_count is not None:
            assert 20 <= r.sm_count <= 200, r.id
        if r.nvlink_gbps_per_gpu is not None:
            assert r.nvlink_gen is not None and r.nvlink_gbps_per_gpu in (300, 600, 900, 1800), r.id
        assert not r.derived


def test_peaks_are_dense_not_sparse() -> None:
    h100 = lookup("h100-sxm")
    assert h100.bf16 < 1000 and h100.fp8 < 2000 and h100.tf32 < 500
    assert h100.hbm_tbps == pytest.approx(3.35) and h100.hbm_gb == 80 and h100.l2_mb == 50
    h200 = lookup("h200")
    assert (h200.bf16, h200.fp8, h200.sm_count) == (h100.bf16, h100.fp8, 132)
    assert h200.hbm_gb == 141 and h200.hbm_tbps == pytest.approx(4.8)
    a100 = lookup("a100-sxm4-80gb")
    assert (a100.bf16, a100.tf32, a100.fp32) == (312, 156, 19.5)
    assert lookup("b200").bf16 == 2250 and lookup("l4").bf16 < 130 and lookup("l40s").bf16 < 400


def test_consumer_cards_use_fp32_accumulate_rates() -> None:
    r4090 = lookup("NVIDIA GeForce RTX 4090")
    assert r4090.bf16 == pytest.approx(165.2) and "FP32-accumulate" in r4090.notes
    assert lookup("NVIDIA GeForce RTX 5090").bf16 == pytest.approx(209.5)


def test_peak_tflops_and_aliases() -> None:
    h100 = lookup("h100-sxm")
    assert h100.peak_tflops("bf16") == h100.peak_tflops("bfloat16") == h100.peak_tflops("torch.bfloat16") == 989.4
    assert h100.peak_tflops("float32") == 66.9
    assert h100.peak_tflops("fp4") is None
    assert lookup("v100-sxm2-32gb").peak_tflops("bf16") is None
    with pytest.raises(ValueError):
        h100.peak_tflops("bf17")
    assert set(DTYPES) == {"fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"}


def test_load_is_cached_and_returns_a_copy() -> None:
    a, b = load(), load()
    assert a == b and a is not b and a[0] is b[0]
    a.clear()
    assert load()


def test_json_validates_against_the_dataclass() -> None:
    raw = json.loads(resources.files("perfstack.specs").joinpath("gpus.json").read_text(encoding="utf-8"))
    assert [GpuSpec.from_dict(r) for r in raw] == load()
    row = dict(raw[0])
    with pytest.raises(SpecTableError, match="unknown field"):
        GpuSpec.from_dict({**row, "bf16_sparse": 1.0})
    with pytest.raises(SpecTableError, match="missing field"):
        GpuSpec.from_dict({k: v for k, v in row.items() if k != "source"})
    with pytest.raises(SpecTableError, match="source"):
        GpuSpec.from_dict({**row, "source": " "})
    with pytest.raises(SpecTableError, match="fp32"):
        GpuSpec.from_dict({**row, "fp32": "15.7"})
    with pytest.raises(SpecTableError, match="sm_count"):
        GpuSpec.from_dict({**row, "sm_count": 80.5})
    with pytest.raises(SpecTableError, match="arch"):
        GpuSpec.from_dict({**row, "arch": "pascal"})
    with pytest.raises(SpecTableError, match="regex"):
        GpuSpec.from_dict({**row, "match": ["(unclosed"]})
    with pytest.raises(SpecTableError, match="derived"):
        GpuSpec.from_dict({**row, "derived": True})  # table rows are never derived


def test_to_dict_round_trips() -> None:
    for r in load():
        assert GpuSpec.from_dict({k: v for k, v in r.to_dict().items() if k != "derived"}) == r


def test_pcie_bandwidth() -> None:
    assert pcie_gbps(5, 16) == pytest.approx(63.0, abs=0.1)
    assert pcie_gbps(4, 16) == pytest.approx(31.5, abs=0.1)
    assert pcie_gbps(3, 16) == pytest.approx(15.75, abs=0.01)
    assert pcie_gbps(1, 16) == pytest.approx(4.0) and pcie_gbps(2, 1) == pytest.approx(0.5)
    assert pcie_gbps(6, 16) == pytest.approx(128.0)
    assert pcie_gbps(5, 8) == pytest.approx(pcie_gbps(4, 16))
    assert specs.PCIE_TABLE[5][16] == pytest.approx(63.02)
    assert specs.pcie_practical_gbps(5, 16) == pytest.approx(0.85 * pcie_gbps(5, 16))
    for bad in [(7, 16), (0, 16), (5, 3), (5, 0), (True, 16)]:
        with pytest.raises(ValueError):
            pcie_gbps(*bad)


def test_derive_unknown_hopper_matches_the_h100_table() -> None:
    spec = lookup_or_derive("NVIDIA H999 Prototype", sm_count=132, clock_mhz=1980, compute_capability="9.0")
    assert spec is not None and spec.derived and spec.arch == "hopper"
    h100 = lookup("h100-sxm")
    assert spec.fp32 == pytest.approx(h100.fp32, rel=0.05)
    assert spec.bf16 is None  # Hopper Tensor peaks are not derivable from max clock
    assert "derived" in spec.source and spec.notes


def test_derive_tensor_where_sound() -> None:
    a100 = lookup_or_derive("NVIDIA A100-SXM4-64GB-custom", sm_count=108, clock_mhz=1410, compute_capability=(8, 0))
    assert a100.bf16 == pytest.approx(312, rel=0.01) and a100.fp32 == pytest.approx(19.5, rel=0.01)
    v100 = lookup_or_derive("Tesla V100-PCIE-16GB", sm_count=80, clock_mhz=1530, compute_capability="70")
    assert v100.fp16 == pytest.approx(125, rel=0.01) and v100.bf16 is None
    ada = lookup_or_derive("NVIDIA GeForce RTX 4080", sm_count=76, clock_mhz=2505, compute_capability="8.9")
    assert ada.fp32 == pytest.approx(48.7, rel=0.01) and ada.bf16 is None and ada.fp16 is None


def test_lookup_or_derive_prefers_table_and_needs_hints() -> None:
    assert lookup_or_derive("NVIDIA H100 PCIe", sm_count=1, clock_mhz=1, compute_capability="9.0").id == "h100-pcie"
    assert lookup_or_derive("mystery GPU") is None
    assert lookup_or_derive("mystery GPU", sm_count=100, clock_mhz=1500, compute_capability="6.0") is None
    assert lookup_or_derive("mystery GPU", sm_count=100, clock_mhz=1500) is None


def test_close_matches_for_not_in_table_hints() -> None:
    assert "NVIDIA GeForce RTX 4090" in close_matches("NVIDIA GeForce RTX 4090 D")
    assert any("H100" in m for m in close_matches("NVIDIA H100"))
    assert close_matches("zzzz") == []


def test_practical_fractions_have_sources() -> None:
    assert practical_fraction["gemm_bf16"].fraction == pytest.approx(0.8)
    assert practical_fraction["hbm_copy"].fraction == pytest.approx(0.9)
    assert practical_fraction["pcie_pinned"].fraction == pytest.approx(0.85)
    for key, pf in practical_fraction.items():
        assert isinstance(pf, float) and f"{pf}" == str(pf.fraction)  # usable as a plain number
        assert 0 < pf.fraction < 1 and pf.source and pf.applies_to, key
        assert pf.of in DTYPES or pf.of in ("hbm_tbps", "pcie_gbps", "nvlink_gbps_per_gpu"), key
