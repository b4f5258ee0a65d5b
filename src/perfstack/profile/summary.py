"""Traces → one Run: analyse each file (one per rank), combine ranks, add GEMM efficiency and MFU
against the spec table, telemetry, and the ranked findings."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Iterable

from perfstack import __version__
from perfstack.errors import InputError
from perfstack.model import Run
from perfstack.profile import rules
from perfstack.profile.analyze import analyze
from perfstack.profile.trace import load

GEMM_PEAK_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8"}


def _spec(name: str | None):
    if not name:
        return None
    try:
        from perfstack.specs import lookup
        return lookup(name)
    except Exception:  # the spec table is optional for analysis
        return None


def _efficiency(p: dict, spec: Any, model_flops: float | None) -> None:
    """kernel_classes (for the HTML roofline), achieved TFLOP/s vs peak, MFU."""
    classes = []
    for g in p["gemms"]:
        dt = g["dtype"]
        peak_dtype = GEMM_PEAK_DTYPE.get(dt or "") or ("tf32" if dt == "fp32" and g["tensor_cores"] else
                                                       "fp32" if dt == "fp32" else None)
        peak = spec.peak_tflops(peak_dtype) if spec and peak_dtype else None
        g["peak_tflops"] = peak
        g["pct_of_peak"] = round(100 * g["tflops"] / peak, 1) if peak and g["tflops"] else None
        label = f"GEMM {dt or '?'} " + {True: "Tensor Cores", False: "no Tensor Cores", None: "TC ?"}[g["tensor_cores"]]
        if g["misaligned"]:
            label += " misaligned"
        classes.append({"name": label, "time_ms": g["time_ms_per_step"], "flops": g["flops_per_step"] or None,
                        "bytes": g["bytes_per_step"] or None, "tflops": g["tflops"], "peak_tflops": peak})
    for cat, ms in p["breakdown_ms"].items():
        if cat not in ("gemm", "idle", "cpu"):
            classes.append({"name": cat, "time_ms": round(ms, 4), "flops": None, "tflops": None})
    p["kernel_classes"] = classes
    flops = sum(g["flops_per_step"] for g in p["gemms"])
    main = max(p["gemms"], key=lambda g: g["time_ms_per_step"], default=None)
    peak = None
    if main and spec:
        d = main["dtype"]
        peak = spec.peak_tflops("tf32" if d == "fp32" and main["tensor_cores"] else d) if d in (
            "bf16", "fp16", "fp8", "int8", "fp32") else None
    step_s = p["step_ms"] / 1e3
    p["gemm_flops_per_step"] = flops
    p["gemm_tflops_per_step_time"] = round(flops / step_s / 1e12, 2) if step_s and flops else None
    p["mfu"] = None
    if model_flops and peak and step_s:
        p["mfu"] = {"value": round(model_flops / step_s / (peak * 1e12), 4), "source": "--model-flops-per-step",
                    "peak_tflops": peak, "dtype": main["dtype"]}
    elif flops and peak and step_s:
        p["mfu"] = {"value": round(flops / step_s / (peak * 1e12), 4),
                    "source": "GEMM FLOPs from the trace's Input Dims (attention and other ops not counted)",
                    "peak_tflops": peak, "dtype": main["dtype"]}


def _straggler(ranks: list[dict]) -> dict | None:
    if len(ranks) < 2:
        return None
    nc = {r["rank"]: r["step_ms"] - r["comm"]["ms_per_step"] for r in ranks}
    worst = max(nc, key=nc.get)
    others = [v for k, v in nc.items() if k != worst]
    med = statistics.median(others)
    w = next(r for r in ranks if r["rank"] == worst)
    comps: dict[str, float] = {}
    for key in set().union(*(r["breakdown_ms"] for r in ranks)) - {"comm"}:
        comps[f"GPU {key}"] = w["breakdown_ms"].get(key, 0.0) - statistics.median(
            [r["breakdown_ms"].get(key, 0.0) for r in ranks if r["rank"] != worst])
    for key in set().union(*(r["idle_by_reason_ms"] for r in ranks)):
        comps[f"idle ({key})"] = w["idle_by_reason_ms"].get(key, 0.0) - statistics.median(
            [r["idle_by_reason_ms"].get(key, 0.0) for r in ranks if r["rank"] != worst])
    cause, delta = max(comps.items(), key=lambda kv: kv[1]) if comps else ("unknown", 0.0)
    return {"rank": worst, "non_comm_ms": round(nc[worst], 4), "others_median_ms": round(med, 4),
            "excess_ms": round(max(0.0, nc[worst] - med), 4), "cause": f"{cause} (+{delta:.2f} ms per step)"}


def profile_run(paths: Iterable[str | Path], model_flops_per_step: float | None = None,
                telemetry: list[dict] | None = None, command: str = "profile") -> Run:
    paths = [Path(p) for p in paths]
    if not paths:
        raise InputError("no trace files given", hint="perfstack profile --trace FILE [FILE...]")
    summaries = []
    for i, path in enumerate(paths):
        s = analyze(load(path))
        if s["rank"] is None:
            s["rank"] = i if len(paths) > 1 else 0
        summaries.append(s)
    ranks = sorted({s["rank"] for s in summaries})
    if len(ranks) != len(summaries):
        raise InputError("several traces claim the same rank: " + ", ".join(f"{s['file']} (rank {s['rank']})"
                                                                          for s in summaries),
                         hint="give one trace per rank of the same run")
    summaries.sort(key=lambda s: s["rank"])
    spec = _spec(summaries[0]["device_name"])
    for s in summaries:
        _efficiency(s, spec, model_flops_per_step)
    main = dict(summaries[0])
    main["gpu_spec"] = spec.name if spec else None
    if len(summaries) > 1:
        main["ranks"] = [{k: s[k] for k in ("rank", "file", "step_ms", "busy_pct", "idle_ms", "compute_ms",
                                            "breakdown_ms", "idle_by_reason_ms", "comm", "device_name")}
                         for s in summaries]
        main["straggler"] = _straggler(summaries)
        main["files"] = [s["file"] for s in summaries]
    if telemetry:
        main["telemetry"] = rules.telemetry_summary(telemetry, spec)
    findings = []
    by_id: dict[str, Any] = {}
    for s in summaries:
        p = dict(s)
        p["straggler"] = main.get("straggler")
        p["telemetry"] = main.get("telemetry")
        fs = rules.evaluate(p, rules.Context(spec=spec, model_flops_per_step=model_flops_per_step))
        for f in fs:
            if len(summaries) > 1 and f.id not in ("straggler-rank", "throttled-during-run"):
                f.subject = f.subject or f"rank{s['rank']}"
            prev = by_id.get(f.id)
            if prev is None or (f.recoverable_ms or 0) > (prev.recoverable_ms or 0):
                by_id[f.id] = f
    findings = rules.rank(list(by_id.values()))
    meta = {"command": command, "tool": "perfstack", "version": __version__,
            "traces": [str(p) for p in paths], "gpu": summaries[0]["device_name"]}
    warnings = [w for s in summaries for w in s["warnings"]]
    if warnings:
        meta["warnings"] = warnings
    return Run(meta=meta, findings=findings, profile=main)
