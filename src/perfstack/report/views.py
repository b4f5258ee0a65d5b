"""Everything a report shows that is not already a field of the Run, computed once, here.

``build(run)`` turns a Run into a ``RunView``: the doctor's findings grouped by layer with the
"fix this first" set, the bench figures as fractions of peak, bandwidth-vs-size series, the roofline
(ceilings from the spec table, measured points placed by arithmetic intensity), the profile's
per-step breakdown and ranked findings, and the estimates as memory stacks and latency bounds. The
renderers only format a RunView, the terminal's, Markdown's and HTML's alike; a section that is
absent from the Run is None.

The profile section is the Run's typed records (``Run.profile``, a ``perfstack.records.profile.Section``).
Estimates section (``perfstack estimate``): a nested dict whose leaves are {"value", "unit", "formula"}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from perfstack.audit import summary as audit_summary
from perfstack.model import LAYERS, CheckResult, Finding, Measurement, Run, layer_rank
from perfstack.records.profile import KernelClass, OpRow, Section, Step
from perfstack.records.estimates import EstimateSheet
from perfstack.report.estimate_view import TIME_UNITS, EstimateView, estimate_view
from perfstack.report.try_view import TryView, try_view
from perfstack.rules import fix_first

MAX_GAPS = 10  # the largest idle gaps a report lists; the Run keeps them all
MAX_STEPS = 16  # steps a report shows one by one; past that, a chosen few (the Run keeps them all)
SLOWEST, FASTEST = 10, 3  # the chosen few: the slowest steps, the fastest, and the median one

# Facts shown at the top of every report, in this order.
KEY_FACTS = (("GPUs", "gpu.summary"), ("driver", "driver.version"), ("CUDA (driver)", "driver.cuda_version"),
             ("torch", "python.torch"), ("NCCL", "python.nccl"), ("cuDNN", "python.cudnn"),
             ("kernel", "system.kernel_release"), ("CPU", "cpu.model"), ("container", "container.runtime"))
# The columns of a before/after figure table (benchmarks, load tests) in the HTML and Markdown reports,
# and which of them hold numbers.
DELTA_COLUMNS = ("figure", "before", "after", "change", "95% interval", "p", "verdict", "note")
DELTA_NUMERIC = (1, 2, 3, 4, 5)
ROOF_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
ELEM_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
OUT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "int8": 4}
# Benchmarks whose sweeps share one chart, and the charts' titles.
CHART_OF = {"h2d": "transfer", "d2h": "transfer", "collectives": "collective"}
BENCH_TITLES = {"transfer": "Host ↔ device copies: bandwidth vs size", "p2p": "GPU ↔ GPU copies: bandwidth vs size",
                "collective": "Collectives: bus bandwidth vs message size", "hbm": "HBM bandwidth vs size",
                "storage": "Storage reads: bandwidth vs size"}
RATE_TO_GBPS = {"gb/s": 1.0, "tb/s": 1e3, "mb/s": 1e-3, "gib/s": 2**30 / 1e9, "mib/s": 2**20 / 1e9}
_SIZE_SEGMENT = re.compile(r"^\d+(\.\d+)?(B|KiB|MiB|GiB|KB|MB|GB)$")


@dataclass
class DoctorView:
    summary: dict[str, Any]
    fix_first: list[Finding]
    layers: list[tuple[str, str, list[Finding]]]  # (layer id, layer name, findings)
    not_checked: list[CheckResult]
    findings: list[Finding] = field(default_factory=list)  # as the Run lists them
    source: str = ""  # what was audited: "live machine", a bundle's path
    bundle: str = ""  # how complete the audited bundle was (host.bundle), or ""


@dataclass
class Curve:
    bench: str
    title: str
    y_label: str
    series: list[tuple[str, list[tuple[float, float]]]]  # (name, [(bytes, value)])
    refs: list[tuple[str, float]]  # (label, value) dashed lines: the peaks


@dataclass
class BenchView:
    rows: list[Measurement]  # headline figures (sweep points left out)
    bars: list[dict[str, Any]]  # label, fraction, expected, text, verdict
    curves: list[Curve]
    sweep_points: int
    measurements: list[Measurement] = field(default_factory=list)  # every figure, sweep points included, in order


@dataclass
class RooflineView:
    gpu: str
    ceilings: list[tuple[str, float]]  # (dtypes, TFLOP/s)
    slopes: list[tuple[str, float, bool]]  # (label, TB/s, measured)
    points: list[tuple[str, float, float, str]]  # (label, FLOP/byte, TFLOP/s, group)
    source: str
    ridges: dict[str, float] = field(default_factory=dict)  # ceiling label -> FLOP/byte where it meets HBM peak


@dataclass
class ProfileView:
    categories: list[str]
    steps: list[tuple[str, list[tuple[str, float]]]]  # (step label, [(category, ms)])
    step_ms: float | None
    gaps: list[dict[str, Any]]
    ranked: list[Finding]  # findings with recoverable time, largest first
    kernels: list[KernelClass]  # with name, intensity and TFLOP/s filled where derivable
    timing: list[tuple[str, str]] = field(default_factory=list)  # (label, value): profiled vs unprofiled, bound
    ops: list[OpRow] = field(default_factory=list)  # operators by GPU time, with efficiency
    section: Section = field(default_factory=Section)  # the profile section, typed (empty when the Run has none)
    warnings: list[str] = field(default_factory=list)  # what reading the traces warned of
    shown_steps: list[Step] = field(default_factory=list)  # the section's steps a report shows, in step order
    steps_note: str | None = None  # which steps were chosen, where not all are shown


@dataclass
class RunView:
    title: str
    gpus: str
    meta: list[tuple[str, str]]
    facts: list[tuple[str, str]]
    doctor: DoctorView | None = None
    bench: BenchView | None = None
    roofline: RooflineView | None = None
    profile: ProfileView | None = None
    estimates: EstimateView | None = None
    trial: TryView | None = None
    absent: list[str] = field(default_factory=list)  # sections this Run does not have


# -- helpers ----------------------------------------------------------------------------------
def gpu_name(run: Run, profile: Section | None) -> str | None:
    gpus = run.facts.value("gpu.list") or []
    for g in gpus:
        if isinstance(g, dict) and g.get("name"):
            return str(g["name"])
    # a profile Run has no machine facts: the traced device's name
    name = (profile.device_name if profile else None) or run.meta.gpu
    return str(name) if isinstance(name, str) and name else None


def gpu_spec(run: Run, profile: Section | None) -> Any:
    """The spec-table row of the Run's first GPU, or None (unknown SKU, or no spec table)."""
    name = gpu_name(run, profile)
    if not name:
        return None
    try:
        from perfstack.specs import lookup
        return lookup(name)
    except Exception:  # the spec table is optional for a report: charts then show measured points only
        return None


def _fact_text(v: Any) -> str:
    if isinstance(v, dict):
        return v.get("PRETTY_NAME") or ", ".join(f"{k}={x}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return str(v)


# -- doctor -----------------------------------------------------------------------------------
def doctor_view(run: Run) -> DoctorView | None:
    findings = [f for f in run.findings if f.recoverable_ms is None]  # profile findings have their own section
    if not run.checks and not findings:
        return None
    counted = Run(meta=run.meta, facts=run.facts, findings=findings, checks=run.checks)
    layers = [(lid, name, [f for f in findings if f.layer == lid]) for lid, name in LAYERS.items()]
    extra = sorted({f.layer for f in findings if f.layer not in LAYERS})
    layers += [(lid, lid, [f for f in findings if f.layer == lid]) for lid in extra]
    return DoctorView(summary=audit_summary(counted), fix_first=fix_first(findings), layers=layers,
                      not_checked=[c for c in run.checks if c.status in ("not-checked", "not-applicable")],
                      findings=findings, source=run.meta.source or "", bundle=run.meta.bundle or "")


# -- bench ------------------------------------------------------------------------------------
def bar_row(m: Measurement) -> dict[str, Any]:
    """One bar of the "% of peak" chart; the renderer words the text from value, unit and peak."""
    return {"label": m.name, "fraction": m.fraction, "expected": m.expected_fraction, "verdict": m.verdict,
            "value": m.value, "unit": m.unit, "peak": m.peak}


def is_latency(m: Measurement) -> bool:
    """Figures where lower is better: their "fraction" is reference / value, not a share of a peak."""
    return m.unit.strip() in TIME_UNITS


def series_key(m: Measurement) -> str:
    """Which curve a sweep point belongs to: params["series"], the collective's op, or the
    figure's name without its size segment ("h2d.pinned.256MiB" -> "h2d.pinned")."""
    if m.params.get("series"):
        return str(m.params["series"])
    if m.bench.startswith("collective") and m.params.get("op"):
        return str(m.params["op"])
    parts = [p for p in m.name.split(".") if not _SIZE_SEGMENT.match(p)]
    return ".".join(parts) or m.name


def curves(measurements: list[Measurement]) -> list[Curve]:
    """Sweep points (params sweep=True with bytes) as bandwidth-vs-size series, one chart per
    benchmark family; collectives plot bus bandwidth. Peaks become dashed reference lines."""
    groups: dict[str, dict[str, list[tuple[float, float]]]] = {}
    refs: dict[str, dict[float, str]] = {}
    units: dict[str, str] = {}
    for m in measurements:
        size = m.params.get("bytes")
        if m.status != "ok" or not m.params.get("sweep") or not isinstance(size, (int, float)) or size <= 0:
            continue
        busbw = m.params.get("busbw_gbps")
        y = float(busbw) if isinstance(busbw, (int, float)) else m.value
        if y is None:
            continue
        chart = CHART_OF.get(m.bench, m.bench)
        groups.setdefault(chart, {}).setdefault(series_key(m), []).append((float(size), float(y)))
        units.setdefault(chart, "GB/s" if isinstance(busbw, (int, float)) else m.unit)
        if m.peak:
            refs.setdefault(chart, {}).setdefault(float(m.peak), _peak_label(m))
    out = []
    for chart, series in groups.items():
        if sum(len(ps) for ps in series.values()) < 2:
            continue
        bus = chart == "collective"
        y_label = ("bus bandwidth" if bus else "bandwidth") + f" ({units[chart]})"
        out.append(Curve(chart, BENCH_TITLES.get(chart, f"{chart}: bandwidth vs size"), y_label,
                         [(k, sorted(v)) for k, v in series.items()],
                         [(label, v) for v, label in refs.get(chart, {}).items()]))
    return out


def _peak_label(m: Measurement) -> str:
    src = m.peak_source.split(" (")[0].strip() if m.peak_source else ""
    return f"peak: {src}" if src and len(src) <= 40 else f"peak ({m.bench})"


def bench_view(run: Run) -> BenchView | None:
    ms = run.measurements
    if not ms:
        return None
    rows = [m for m in ms if not m.params.get("sweep")]
    bars = [bar_row(m) for m in rows if m.status == "ok" and m.fraction is not None and not is_latency(m)]
    return BenchView(rows=rows, bars=bars, curves=curves(ms), sweep_points=len(ms) - len(rows), measurements=ms)


# -- roofline ---------------------------------------------------------------------------------
def gemm_intensity(p: Mapping[str, Any]) -> float | None:
    """FLOP per byte of DRAM traffic for an M×N×K GEMM that reads A and B once and writes C once."""
    try:
        m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    except (KeyError, TypeError, ValueError):
        return None
    dtype = str(p.get("dtype", "bf16"))
    if dtype not in ELEM_BYTES:
        return None
    traffic = (m * k + k * n) * ELEM_BYTES[dtype] + m * n * OUT_BYTES[dtype]
    return 2 * m * n * k / traffic if traffic else None


def rate_tbps(value: float | None, unit: str) -> float | None:
    k = RATE_TO_GBPS.get(unit.strip().lower())
    return value * k / 1e3 if value is not None and k is not None else None


def roofline_view(run: Run, spec: Any, profile: Section | None) -> RooflineView | None:
    points = _roofline_points(run, profile)
    ceilings, slopes = _spec_roofs(spec)
    measured_bw = _measured_bandwidth(run)
    if measured_bw is not None:
        slopes.append(measured_bw)
    if not points and not any(measured for _, _, measured in slopes):
        return None  # nothing measured: a roofline of ceilings alone says nothing about this machine
    source = getattr(spec, "source", "") if spec is not None else ""
    peak_bw = next((bw for _, bw, measured in slopes if not measured), None)
    ridges = {label: v / peak_bw for label, v in ceilings} if peak_bw else {}
    return RooflineView(gpu=getattr(spec, "name", None) or gpu_name(run, profile) or "this GPU", ceilings=ceilings,
                        slopes=slopes, points=points, source=source, ridges=ridges)


def _roofline_points(run: Run, profile: Section | None) -> list[tuple[str, float, float, str]]:
    """The GEMM figures of bench and the kernel classes of a profile: (label, FLOP/byte, TFLOP/s, group)."""
    points: list[tuple[str, float, float, str]] = []
    for m in run.measurements:
        if m.bench == "gemm" and m.status == "ok" and m.value and m.unit == "TFLOP/s" and not m.params.get("sweep"):
            ai = gemm_intensity(m.params)
            if ai:
                points.append((m.name, ai, m.value, f"GEMM {m.params.get('dtype', '')}".strip()))
    for k in profile_kernels(profile):
        if k.intensity and k.tflops:
            points.append((str(k.name), k.intensity, k.tflops, "profile kernel classes"))
    return points


def _spec_roofs(spec: Any) -> tuple[list[tuple[str, float]], list[tuple[str, float, bool]]]:
    """The SKU's compute ceilings (dtypes of one peak share a line) and its HBM roof, from the spec table."""
    ceilings: list[tuple[str, float]] = []
    slopes: list[tuple[str, float, bool]] = []
    if spec is None:
        return ceilings, slopes
    by_peak: dict[float, list[str]] = {}
    for d in ROOF_DTYPES:
        try:
            v = spec.peak_tflops(d)
        except Exception:
            v = None
        if v:
            by_peak.setdefault(float(v), []).append(d)
    ceilings = [("/".join(ds), v) for v, ds in by_peak.items()]
    if getattr(spec, "hbm_tbps", None):
        slopes.append((f"HBM peak {spec.hbm_tbps:g} TB/s", float(spec.hbm_tbps), False))
    return ceilings, slopes


def _measured_bandwidth(run: Run) -> tuple[str, float, bool] | None:
    """The measured bandwidth roof: the device-to-device copy (read + write), else the best HBM figure."""
    hbm = [m for m in run.measurements if m.bench == "hbm" and m.status == "ok" and rate_tbps(m.value, m.unit)
           and not m.params.get("sweep")]
    best = next((m for m in hbm if m.name == "hbm.copy"), None) or max(
        hbm, key=lambda m: rate_tbps(m.value, m.unit) or 0.0, default=None)
    if best is None:
        return None
    tb = rate_tbps(best.value, best.unit) or 0.0
    return (f"HBM measured ({best.name}) {tb:.2f} TB/s", tb, True)


# -- profile ----------------------------------------------------------------------------------
def profile_kernels(profile: Section | None) -> list[KernelClass]:
    """Kernel classes with a name, intensity (FLOP/byte) and achieved TFLOP/s filled where derivable."""
    if profile is None:
        return []
    out = []
    for k in profile.kernel_classes:
        intensity, tflops = k.intensity, k.tflops
        if not intensity and k.flops is not None and k.bytes:
            intensity = k.flops / k.bytes
        if not tflops and k.flops is not None and k.time_ms:
            tflops = k.flops / (k.time_ms / 1e3) / 1e12
        name = k.name if k.name is not None else k.kclass or "kernels"
        out.append(replace(k, name=name, intensity=intensity, tflops=tflops))
    return out


def profile_view(run: Run, profile: Section | None) -> ProfileView | None:
    ranked = sorted((f for f in run.findings if f.recoverable_ms is not None), key=lambda f: -(f.recoverable_ms or 0))
    if profile is None and not ranked:
        return None
    p = profile or Section()
    mean = p.breakdown()
    shown, steps_note = chosen_steps(p.steps)
    steps = _step_bars(shown, mean)
    cats: list[str] = []
    for _, segs in steps:
        cats += [c for c, _ in segs if c not in cats]
    gaps = sorted((g.to_dict() for g in p.idle_gaps), key=lambda g: -(g.get("duration_ms") or 0))[:MAX_GAPS]
    return ProfileView(categories=cats, steps=steps, step_ms=p.step_time(mean), gaps=gaps, ranked=ranked,
                       kernels=profile_kernels(p), timing=profile_timing(p), ops=p.ops[:15],
                       section=p, warnings=list(run.meta.warnings or []), shown_steps=shown,
                       steps_note=steps_note)


def chosen_steps(steps: list[Step]) -> tuple[list[Step], str | None]:
    """The steps a report shows, in step order: all of them up to MAX_STEPS; past that (a long recording
    has hundreds), the slowest, where a stall, a checkpoint save or a straggling input shows, the fastest
    and the median step, with a line that says so. The mean over every step is shown beside them."""
    if len(steps) <= MAX_STEPS:
        return list(steps), None
    by_time = sorted(range(len(steps)), key=lambda i: (steps[i].total_ms, i))
    median = by_time[len(by_time) // 2]
    keep = sorted({*by_time[-SLOWEST:], *by_time[:FASTEST], median})
    walls = [steps[i].total_ms for i in by_time]
    mid = steps[median].total_ms
    slow = sum(w > 1.1 * mid for w in walls)  # how common the slow steps are, which the chosen few cannot show
    note = (f"{len(steps)} steps (wall {walls[0]:.2f}–{walls[-1]:.2f} ms, median {mid:.2f}; {slow} over 1.1× the "
            f"median): shown are the {SLOWEST} slowest, the {FASTEST} fastest and the median; the Run holds every step")
    return [steps[i] for i in keep], note


def _step_bars(shown: list[Step], mean: dict[str, float] | None) -> list[tuple[str, list[tuple[str, float]]]]:
    """Each shown step's time by category, then the mean over every step (alone when no step has
    categories)."""
    steps = [(f"step {s.step}", [(c, float(v)) for c, v in s.categories.items()]) for s in shown]
    if mean and not steps:
        steps = [("mean step", list(mean.items()))]
    elif mean and len(steps) > 1:
        steps.append(("mean", list(mean.items())))
    return steps


def _fmt(v: Any, unit: str = "") -> str:
    return f"{v:.2f}{unit}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"


def profile_timing(p: Section) -> list[tuple[str, str]]:
    """The step's timing facts: profiled, without the profiler, which side bounds it, how far the CPU runs ahead."""
    out: list[tuple[str, str]] = []
    o, t = p.overhead, p.timeline
    if o is not None:
        out.append(("profiled step", _fmt(o.profiled_step_ms, " ms")))
        how = {"measured": "measured", "estimated": "estimated"}.get(o.method, "")
        if how:
            out.append((f"without the profiler ({how})", _fmt(o.step_ms, " ms")))
            out.append(("profiler CPU inflation", _fmt(o.cpu_inflation, "×")))
    if t is not None:
        out.append(("bound by", {"gpu": "GPU", "cpu": "CPU", "syncs": "host syncs (CPU and GPU take turns)"}
                     .get(str(t.bound), str(t.bound))))
        out.append(("CPU ahead of GPU (median)", _fmt(t.cpu_ahead_ms, " ms")))
    if p.mfu is not None:
        out.append(("MFU", f"{100 * p.mfu.value:.1f}%"))
    return out


# -- the whole report -------------------------------------------------------------------------
def build(run: Run) -> RunView:
    profile = run.profile
    spec = gpu_spec(run, profile)
    keys = ("command", "created", "source", "bundle", "host_id", "tool_version", "elapsed_s")
    meta = run.meta.shown(keys)
    facts = [(label, _fact_text(run.facts.value(key))) for label, key in KEY_FACTS
             if run.facts.value(key) not in (None, "", [], {})]
    os_name = run.facts.value("system.os_release")
    if isinstance(os_name, dict) and os_name.get("PRETTY_NAME"):
        facts.insert(7, ("OS", str(os_name["PRETTY_NAME"])))
    trial = try_view(run)
    gpus = run.facts.value("gpu.summary") or _described_gpu(run, profile, trial) or "no NVIDIA GPU seen"
    view = RunView(title=f"perfstack {run.meta.command or 'report'}",
                   gpus=str(gpus), meta=meta, facts=facts,
                   doctor=doctor_view(run), bench=bench_view(run), roofline=roofline_view(run, spec, profile),
                   profile=profile_view(run, profile), estimates=estimate_view(run, spec), trial=trial)
    view.absent = [name for name, part in (("doctor", view.doctor), ("bench", view.bench),
                                           ("profile", view.profile), ("estimates", view.estimates)) if part is None]
    return view


def _described_gpu(run: Run, profile: Section | None, trial: TryView | None) -> str | None:
    """The GPU a Run without machine facts describes: the device its trace names, the one its trial ran on,
    or the one its estimate is for."""
    if trial is not None and run.meta.gpu:
        return f"{trial.gpu} (the GPU the script ran on)"
    name = gpu_name(run, profile) if profile is not None else None
    if name:
        return f"{name} (the traced GPU)"
    est = run.estimates
    if isinstance(est, EstimateSheet) and est.gpu_name:
        return f"{est.gpu_name} (the GPU estimated for)"
    return None


def layer_name(layer: str) -> str:
    return LAYERS.get(layer, layer)


__all__ = ["RunView", "build", "layer_name", "layer_rank"]
