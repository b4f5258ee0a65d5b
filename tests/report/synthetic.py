"""Runs for the renderer and diff tests, built on the recorded doctor Runs.

The facts, findings and checks are the live doctor Runs recorded on the H100 and 2xH200 machines
(tests/fixtures/runs). The bench figures follow the shape the bench modules write (names, params,
raw samples in seconds, stats from bench.timing.summarize); their values are the H100 figures
DESIGN.md quotes, with seeded noise, unless the recorded full bench Runs are used. With
``recorded=True`` the profile section is perfstack's own analysis of traces recorded on the same
machines (tests/fixtures/traces); otherwise a hand-built profile in the shape report.views documents.
The estimates come from the estimate package.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from perfstack.bench.timing import summarize
from perfstack.bench.verdict import judge, lower_is_better
from perfstack.records import estimates as estimate_record
from perfstack.records.estimates import Estimates
from perfstack.model import Finding, Measurement, Run, Severity
from perfstack.records import profile as records

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
# One planted problem per machine: a stalled DataLoader on the H100, unoverlapped all-reduces on 2xH200.
RECORDED_TRACES = {"h100": ["h100/dataloader-stall.pt.trace.json.gz"],
                   "h200x2": ["h200x2/ddp-not-overlapped.rank0.pt.trace.json.gz",
                              "h200x2/ddp-not-overlapped.rank1.pt.trace.json.gz"]}
KIB, MIB, GIB = 2**10, 2**20, 2**30


def size_label(n: int) -> str:
    for unit, k in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return f"{n}B"


def doctor(name: str = "h100") -> Run:
    return Run.load(RUNS / f"{name}-doctor.json")


@lru_cache(maxsize=4)
def _recorded(name: str) -> dict[str, Any] | None:
    p = RUNS / f"{name}-bench-full.json"
    return json.loads(p.read_text()) if p.exists() else None


@lru_cache(maxsize=4)
def recorded_profile(name: str = "h100") -> tuple[dict[str, Any], list[Finding]]:
    """perfstack's analysis of a trace recorded on that machine: (Run.profile, ranked findings)."""
    from perfstack.profile.summary import profile_run
    run = profile_run([TRACES / t for t in RECORDED_TRACES[name]])
    return run.profile.to_dict(), run.findings


def recorded_bench(name: str = "h100") -> Run | None:
    """The full bench Run recorded on that machine, when it is in the fixtures (a fresh copy)."""
    data = _recorded(name)
    return Run.from_dict(json.loads(json.dumps(data))) if data else None


def _m(rng: random.Random, bench: str, name: str, value: float, unit: str, work: float, params: dict[str, Any],
       n: int = 40, cv: float = 0.01, peak: float | None = None, expected: float | None = None,
       scale: float = 1.0) -> Measurement:
    """A figure with raw samples: ``work`` units per repetition at ``value`` units/s (times ``scale``)."""
    value *= scale
    t = work / value
    samples = [t * (1 + rng.gauss(0, cv)) for _ in range(n)]
    stats = summarize(samples)
    m = Measurement(bench=bench, name=name, value=work / stats["median"], unit=unit, params=params, samples=samples,
                    stats=stats)
    source = {"h2d": "PCIe Gen5 x16 per direction", "d2h": "PCIe Gen5 x16 per direction",
              "collective": "NVLink 4 bus bandwidth"}.get(bench, "NVIDIA H100 SXM5 80GB dense peak (spec table)")
    return judge(m, peak, source if peak else "", expected)


def bench_measurements(seed: int = 1, scale: float = 1.0, gpus: int = 1) -> list[Measurement]:
    """H100-like figures; ``scale`` multiplies every rate (0.9 = a 10% regression)."""
    rng = random.Random(seed)
    out: list[Measurement] = []
    for dtype, best, peak, exp in (("fp32", 51.0, 66.9, None), ("tf32", 378.0, 494.7, None),
                                   ("bf16", 784.0, 989.4, 0.8), ("fp16", 770.0, 989.4, 0.8),
                                   ("fp8", 1310.0, 1978.9, None)):
        shape = (4096, 4096, 8192) if dtype == "bf16" else (8192, 8192, 8192)
        flops = 2 * shape[0] * shape[1] * shape[2]
        p = {"dtype": dtype, "m": shape[0], "n": shape[1], "k": shape[2], "flops": flops}
        out.append(_m(rng, "gemm", f"gemm.{dtype}.ref", best * 0.97, "TFLOP/s", flops / 1e12, p, peak=peak,
                      expected=exp, scale=scale))
        out.append(_m(rng, "gemm", f"gemm.{dtype}.best", best, "TFLOP/s", flops / 1e12, p, peak=peak, expected=exp,
                      scale=scale))
    for kind, gbps, per_rep in (("copy", 3010.0, 2 * 4 * GIB), ("read", 3150.0, 4 * GIB), ("write", 3050.0, 4 * GIB)):
        out.append(_m(rng, "hbm", f"hbm.{kind}", gbps, "GB/s", per_rep / 1e9,
                      {"buffer_bytes": 4 * GIB, "bytes_per_rep": per_rep}, peak=3350.0, expected=0.9, scale=scale))
    pcie = 63.0
    for direction, pinned, pageable in (("h2d", 55.0, 19.0), ("d2h", 54.0, 13.0)):
        for memory, top in (("pinned", pinned), ("pageable", pageable)):
            best = None
            for i in range(10):
                nbytes = 4 * KIB * 4**i
                latency = 9e-6 if memory == "pinned" else 25e-6
                bw = nbytes / (latency + nbytes / (top * 1e9)) / 1e9
                m = _m(rng, direction, f"{direction}.{memory}.{size_label(nbytes)}", bw, "GB/s", nbytes / 1e9,
                       {"bytes": nbytes, "memory": memory, "sweep": True}, n=30, cv=0.02, peak=pcie,
                       expected=0.85, scale=scale)
                out.append(m)
                if nbytes >= 16 * MIB and (best is None or m.value > best.value):
                    best = m
            assert best is not None
            h = Measurement(**{**best.to_dict(), "name": f"{direction}.{memory}.best",
                               "params": {**best.params, "sweep": False}})
            out.append(h)
    for mode, us, ref in (("eager", 6.5, 20.0), ("graph", 1.2, 2.0)):
        t = us * 1e-6 * 1000
        samples = [t * (1 + rng.gauss(0, 0.02)) for _ in range(40)]
        stats = summarize(samples)
        m = Measurement(bench="launch", name=f"launch.{mode}", value=stats["median"] / 1000 * 1e6, unit="us",
                        params={"kernels": 1000}, samples=samples, stats=stats)
        out.append(lower_is_better(m, ref, f"≈{ref:g} µs reference"))
    if gpus > 1:
        for op, factor in (("all_reduce", 1.0), ("all_gather", 0.5)):
            for i in range(12):
                nbytes = 64 * KIB * 2**i * 2
                busbw = 360.0 * nbytes / (nbytes + 8 * MIB)
                m = _m(rng, "collective", f"collective.{op}.{size_label(nbytes)}", busbw, "GB/s", nbytes / 1e9 * factor,
                       {"op": op, "bytes": nbytes, "world_size": gpus, "sweep": True}, n=20, cv=0.03,
                       peak=450.0, scale=scale)
                m.params.update(busbw_gbps=round(m.value, 3), algbw_gbps=round(m.value / factor, 3))
                out.append(m)
    return out


PROFILE = {
    "trace": "train_step.pt.trace.json",
    "steps": [
        {"step": s, "total_ms": sum(c.values()), "categories": c}
        for s, c in enumerate([
            {"compute": 61.0, "communication": 9.5, "memcpy": 6.2, "dataloader": 14.0, "idle": 8.1},
            {"compute": 60.4, "communication": 9.9, "memcpy": 6.0, "dataloader": 12.5, "idle": 7.6},
            {"compute": 60.9, "communication": 9.7, "memcpy": 6.3, "dataloader": 13.6, "idle": 8.4},
        ], start=1)
    ],
    "idle_gaps": [
        {"step": 1, "start_ms": 3.2, "duration_ms": 12.5, "before": "DataLoader.__next__", "after": "aten::copy_"},
        {"step": 2, "start_ms": 44.0, "duration_ms": 4.1, "before": "cudaStreamSynchronize", "after": "aten::mm"},
    ],
    "kernel_classes": [
        {"name": "gemm (bf16)", "time_ms": 48.0, "flops": 2.9e13, "bytes": 1.6e10},
        {"name": "elementwise", "time_ms": 7.5, "flops": 2.0e10, "bytes": 1.9e10},
        {"name": "attention", "time_ms": 5.0, "flops": 1.6e12, "bytes": 2.0e9},
    ],
}

ESTIMATES = {
    "model": "llama-3-8b", "gpu": "H100 SXM5 80GB", "batch": 8, "seq_len": 4096, "dtype": "bf16",
    "memory": {
        "weights": {"value": 16.06, "unit": "GB", "formula": "params × 2 bytes"},
        "kv_cache": {"value": 17.18, "unit": "GB", "formula": "2 × layers × kv_heads × head_dim × seq × batch × 2 B"},
        "activations": {"value": 6.2, "unit": "GB", "formula": "batch × seq × hidden × 34 B (no recompute)"},
        "workspace": {"value": 1.5, "unit": "GB", "formula": "cuBLAS + NCCL + allocator slack"},
        "total": {"value": 40.94, "unit": "GB", "formula": "sum of the above"},
    },
    "latency": {
        "prefill_compute_bound": {"value": 0.532, "unit": "s", "formula": "2 × params × tokens / peak FLOP/s"},
        "decode_memory_bound": {"value": 10.0, "unit": "ms", "formula": "(weights + KV) / HBM bandwidth"},
        "decode_compute_bound": {"value": 0.13, "unit": "ms", "formula": "2 × params × batch / peak FLOP/s"},
    },
}


def profile_findings() -> list[Finding]:
    return [
        Finding(id="dataloader-stall", layer="framework", severity=Severity.WARNING,
                title="The GPU waits on the data loader", evidence="13.4 ms of 99 ms per step in DataLoader.__next__",
                fix="num_workers=8, pin_memory=True, persistent_workers=True", recoverable_ms=12.1,
                recoverable_pct=12.2),
        Finding(id="sync-in-step", layer="framework", severity=Severity.INFO,
                title="A host synchronization inside the step", evidence="cudaStreamSynchronize after loss.item()",
                fix="log the loss every N steps, not every step", recoverable_ms=4.0, recoverable_pct=4.0),
    ]


def estimates(gpu: str = "h100-sxm") -> Estimates:
    """What `perfstack estimate` writes for Llama-2-7B serving on ``gpu``; the hand-built nested
    form when the estimate package is not importable."""
    try:
        from perfstack.estimate import catalog, hardware, infer
        return infer.estimate(catalog.get("llama-2-7b"), hardware.resolve(gpu, "bf16"),
                              infer.InferSettings(batch=8, prompt=2048, gen=256))
    except Exception:
        return estimate_record.from_dict(ESTIMATES)


def full_run(name: str = "h100", seed: int = 1, scale: float = 1.0, recorded: bool = True) -> Run:
    """doctor + bench + profile + estimates in one Run, as the e2e test renders it: the recorded bench
    figures of that machine where they exist (``recorded``), else figures built here with ``seed``/``scale``."""
    run = doctor(name)
    recorded = recorded_bench(name) if recorded else None
    gpus = len(run.facts.value("gpu.list") or []) or 1
    run.measurements = recorded.measurements if recorded and scale == 1.0 else bench_measurements(seed, scale, gpus)
    profile, found = recorded_profile(name) if recorded else (PROFILE, profile_findings())
    run.profile = records.load(json.loads(json.dumps(profile)))
    run.estimates = estimates("h200" if name.startswith("h200") else "h100-sxm")
    run.findings = run.findings + list(found)
    run.meta.command = "doctor"
    return run
