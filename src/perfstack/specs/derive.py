"""Peaks for a GPU the table does not know, from SM count x clock x per-SM rate.

peak FLOP/s = SMs x clock (Hz) x FLOP per clock per SM, with one FMA counted as 2 FLOP.

FP32 (CUDA cores, FLOP/clk/SM = 2 x FP32 lanes per SM):

| compute capability | arch | FP32 lanes/SM | FLOP/clk/SM | check against the table |
|---|---|---|---|---|
| 7.0 | Volta | 64 | 128 | V100: 80 x 1530 MHz x 128 = 15.7 TF |
| 7.5 | Turing | 64 | 128 | T4: 40 x 1590 x 128 = 8.1 TF |
| 8.0 | Ampere GA100 | 64 | 128 | A100: 108 x 1410 x 128 = 19.5 TF |
| 8.6 | Ampere GA10x | 128 | 256 | A10: 72 x 1695 x 256 = 31.2 TF |
| 8.9 | Ada | 128 | 256 | RTX 4090: 128 x 2520 x 256 = 82.6 TF |
| 9.0 | Hopper | 128 | 256 | H100 SXM: 132 x 1980 x 256 = 66.9 TF |
| 10.0 | Blackwell (datacenter) | 128 | 256 | B200: 148 SMs -> 75 TF needs ~1.98 GHz |
| 12.0 | Blackwell (GeForce/RTX PRO) | 128 | 256 | RTX 5090: 170 x 2407 x 256 = 104.8 TF |

Dense FP16/BF16 Tensor Core (FP32 accumulate) is derived only where one per-SM rate holds for
every product of that compute capability and the published peak equals SMs x max clock x rate:

| cc | fp16 FLOP/clk/SM | bf16 | check |
|---|---|---|---|
| 7.0 | 1024 | none (no BF16) | V100: 80 x 1530 x 1024 = 125 TF |
| 8.0 | 2048 | 2048 | A100: 108 x 1410 x 2048 = 312 TF; A30: 56 x 1440 x 2048 = 165 TF |

Everywhere else the Tensor peak is left None, because it is not sound to derive:
7.5, 8.6, 8.9 and 12.0 run FP32-accumulate Tensor math at full rate on datacenter/pro parts
but at half rate on GeForce parts (T4 65 TF vs RTX 2080 Ti; A10 vs RTX 3090; L40S vs RTX 4090);
9.0 and 10.0 publish Tensor peaks at a clock below the max boost (H100 SXM: 1830 of 1980 MHz,
H100 PCIe: ~1620 of 1755, H100 NVL lower still) and export parts such as H20 are rate-limited.
"""

from __future__ import annotations

from perfstack.specs.table import GpuSpec, lookup

# compute capability -> (arch, FP32 FLOP/clk/SM, FP16 Tensor FLOP/clk/SM or None, BF16 Tensor FLOP/clk/SM or None)
PER_SM_RATES: dict[str, tuple[str, int, int | None, int | None]] = {
    "7.0": ("volta", 128, 1024, None),
    "7.5": ("turing", 128, None, None),
    "8.0": ("ampere", 128, 2048, 2048),
    "8.6": ("ampere", 256, None, None),
    "8.9": ("ada", 256, None, None),
    "9.0": ("hopper", 256, None, None),
    "10.0": ("blackwell", 256, None, None),
    "12.0": ("blackwell", 256, None, None),
}

_TENSOR_WHY_NOT: dict[str, str] = {
    "7.5": "GeForce Turing runs FP32-accumulate Tensor math at half the T4 rate",
    "8.6": "GeForce GA10x runs FP32-accumulate Tensor math at half the A10/A40 rate",
    "8.9": "GeForce Ada runs FP32-accumulate Tensor math at half the L4/L40S rate",
    "9.0": "Hopper publishes Tensor peaks below max boost (1830 of 1980 MHz on H100 SXM) and H20 is rate-limited",
    "10.0": "Blackwell publishes Tensor peaks below the max boost clock",
    "12.0": "GeForce Blackwell runs FP32-accumulate Tensor math at half the RTX PRO rate",
}


def _cc_string(cc: object) -> str | None:
    if cc is None:
        return None
    if isinstance(cc, (tuple, list)) and len(cc) == 2:
        return f"{int(cc[0])}.{int(cc[1])}"
    text = str(cc).strip()
    if text.isdigit() and len(text) in (2, 3):  # "90", "100", "120"
        return f"{text[:-1]}.{text[-1]}"
    return text or None


def derive(name: str, sm_count: int, clock_mhz: float, compute_capability: object) -> GpuSpec | None:
    """A spec flagged ``derived=True`` from SM count x max clock x per-SM rate, or None when the
    compute capability is not one whose per-SM rates are known (see the module docstring)."""
    cc = _cc_string(compute_capability)
    if cc not in PER_SM_RATES or not sm_count or not clock_mhz or sm_count <= 0 or clock_mhz <= 0:
        return None
    arch, fp32_rate, fp16_rate, bf16_rate = PER_SM_RATES[cc]
    scale = sm_count * clock_mhz * 1e6 / 1e12  # SM-clocks per second, in tera

    def peak(rate: int | None) -> float | None:
        return round(scale * rate, 1) if rate else None

    why_not = _TENSOR_WHY_NOT.get(cc)
    notes = (
        f"Derived for an unknown GPU: {sm_count} SMs x {clock_mhz:g} MHz x per-SM rate for compute capability {cc} "
        f"(FP32 {fp32_rate} FLOP/clk/SM"
        + (f", FP16 Tensor {fp16_rate}" if fp16_rate else "")
        + (f", BF16 Tensor {bf16_rate}" if bf16_rate else "")
        + "). Only as good as the clock given: pass the max SM clock (nvidia-smi clocks.max.sm)."
        + (f" Tensor peaks left null: {why_not}." if why_not else "")
    )
    return GpuSpec(
        id=f"derived-sm{cc.replace('.', '')}",
        name=str(name),
        arch=arch,
        compute_capability=cc,
        match=(),
        fp64=None,
        fp64_tensor=None,
        fp32=peak(fp32_rate),
        tf32=None,
        bf16=peak(bf16_rate),
        fp16=peak(fp16_rate),
        fp8=None,
        int8=None,
        fp4=None,
        hbm_gb=None,
        hbm_tbps=None,
        l2_mb=None,
        sm_count=int(sm_count),
        boost_clock_mhz=int(round(clock_mhz)),
        tdp_w=None,
        nvlink_gen=None,
        nvlink_gbps_per_gpu=None,
        pcie_gen=None,
        pcie_lanes=None,
        memory_type=None,
        source="derived: SM count x clock x per-SM rate (perfstack.specs.derive.PER_SM_RATES)",
        notes=notes,
        derived=True,
    )


def lookup_or_derive(
    name: str,
    sm_count: int | None = None,
    clock_mhz: float | None = None,
    compute_capability: object = None,
) -> GpuSpec | None:
    """The table row for ``name``; else a derived spec when SM count, clock and a known compute
    capability are given; else None. A table hit always wins over the hints."""
    spec = lookup(name)
    if spec is not None:
        return spec
    if sm_count is None or clock_mhz is None:
        return None
    return derive(name, sm_count, clock_mhz, compute_capability)
