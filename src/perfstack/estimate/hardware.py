"""The GPU an estimate runs on: peaks from the spec table, or achievable figures from a bench Run.

``--calibrate RUN.json`` replaces the datasheet peaks with what ``perfstack bench`` measured on a
real machine: ``gemm.<dtype>.best`` (TFLOP/s) for compute and ``hbm.copy`` (GB/s, read + write
counted) for memory bandwidth. Each figure says where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfstack import specs
from perfstack.errors import InputError, UsageError
from perfstack.model import Run

DEFAULT_GPU = "h100-sxm"


@dataclass(frozen=True)
class Hardware:
    spec: specs.GpuSpec
    dtype: str  # compute dtype whose peak is used
    peak_flops: float  # FLOP/s
    hbm_bw: float  # B/s
    capacity: float  # bytes of device memory
    link_bw: float  # B/s per direction between GPUs of one node
    link: str
    flops_source: str
    bw_source: str
    assumptions: tuple[str, ...] = ()
    host_launch_us: float | None = None  # bench launch.eager: host cost per kernel launched from PyTorch
    host_source: str = "the book's ≈10 µs per kernel launched from PyTorch (bench launch.eager measures it)"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.spec.id, "name": self.spec.name, "dtype": self.dtype, "peak_flops": self.peak_flops,
                "hbm_bytes_per_s": self.hbm_bw, "capacity_bytes": self.capacity, "link_bytes_per_s": self.link_bw,
                "link": self.link, "flops_source": self.flops_source, "bw_source": self.bw_source,
                "spec_source": self.spec.source}


def find_gpu(name: str) -> specs.GpuSpec:
    spec = specs.lookup(name)
    if spec is None:
        near = specs.close_matches(name)
        ids = ", ".join(s.id for s in specs.load())
        raise UsageError(f"GPU {name!r} is not in the spec table",
                         hint=(f"close matches: {', '.join(near)}" if near else f"known GPUs: {ids}"))
    return spec


def link_of(spec: specs.GpuSpec) -> tuple[float, str]:
    """Per-direction GB/s between two GPUs of a node: NVLink (table is bidirectional) or PCIe."""
    if spec.nvlink_gbps_per_gpu:
        per_dir = spec.nvlink_gbps_per_gpu / 2
        return per_dir * 1e9, f"NVLink {spec.nvlink_gen} ({per_dir:g} GB/s per direction)"
    if spec.pcie_gen and spec.pcie_lanes:
        gbps = specs.pcie_gbps(spec.pcie_gen, spec.pcie_lanes)
        return gbps * 1e9, f"PCIe Gen{spec.pcie_gen} x{spec.pcie_lanes} ({gbps:.1f} GB/s per direction)"
    return 0.0, "no GPU-to-GPU link known"


def _run_gpu_name(run: Run) -> str | None:
    gpus = run.facts.value("gpu.list")
    if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict):
        return gpus[0].get("name")
    for m in run.measurements:
        name = m.params.get("gpu") or m.params.get("device_name")
        if isinstance(name, str):
            return name
    return None


def _measured(run: Run, *names: str) -> tuple[float, str] | None:
    by_name = {m.name: m for m in run.measurements}
    for n in names:
        m = by_name.get(n)
        if m is not None and m.status == "ok" and m.value:
            return float(m.value), n
    return None


def resolve(gpu: str | None, dtype: str, calibrate: str | Path | None = None) -> Hardware:
    """The GPU's peaks for ``dtype`` (fp32, bf16, fp16, fp8), calibrated from a Run when given."""
    notes: list[str] = []
    run = Run.load(calibrate) if calibrate else None
    if gpu is None and run is not None:
        gpu = _run_gpu_name(run)
        if gpu:
            notes.append(f"GPU taken from the calibration Run: {gpu}")
    if gpu is None:
        gpu = DEFAULT_GPU
        notes.append(f"no --gpu given: {DEFAULT_GPU} assumed")
    spec = find_gpu(gpu)
    peak_t = spec.peak_tflops(dtype)
    use_dtype = dtype
    if peak_t is None and dtype == "fp8":
        peak_t, use_dtype = spec.peak_tflops("bf16") or spec.peak_tflops("fp16"), "bf16"
        notes.append(f"{spec.name} has no FP8 tensor cores: FP8 weights are computed in 16-bit")
    if peak_t is None and dtype == "bf16":
        peak_t, use_dtype = spec.peak_tflops("fp16"), "fp16"
        notes.append(f"{spec.name} has no BF16 peak in the table: FP16 used")
    if peak_t is None or spec.hbm_tbps is None or spec.hbm_gb is None:
        raise InputError(f"the spec table has no {dtype} peak or memory figures for {spec.name}")
    flops, flops_src = peak_t * 1e12, f"spec table: {spec.name} dense {use_dtype} peak {peak_t:g} TFLOP/s"
    bw, bw_src = spec.hbm_tbps * 1e12, f"spec table: {spec.name} memory bandwidth {spec.hbm_tbps:g} TB/s"
    if run is not None:
        got = _measured(run, f"gemm.{use_dtype}.best", f"gemm.{use_dtype}.ref")
        if got:
            flops, flops_src = got[0] * 1e12, f"measured {got[1]} = {got[0]:,.0f} TFLOP/s from {calibrate}"
        else:
            notes.append(f"{calibrate} has no gemm.{use_dtype} result: compute uses the spec peak")
        got = _measured(run, "hbm.copy")
        if got:
            bw, bw_src = got[0] * 1e9, f"measured hbm.copy = {got[0]:,.0f} GB/s (read + write) from {calibrate}"
        else:
            notes.append(f"{calibrate} has no hbm.copy result: bandwidth uses the spec peak")
    host_us, host_src = None, Hardware.host_source
    if run is not None:
        got = _measured(run, "launch.eager")
        if got:
            host_us, host_src = got[0], f"measured launch.eager = {got[0]:.2f} µs per kernel from {calibrate}"
    link, link_name = link_of(spec)
    return Hardware(spec=spec, dtype=use_dtype, peak_flops=flops, hbm_bw=bw, capacity=spec.hbm_gb * 1e9,
                    link_bw=link, link=link_name, flops_source=flops_src, bw_source=bw_src, assumptions=tuple(notes),
                    host_launch_us=host_us, host_source=host_src)
