"""Traces → one Run: analyse each file (one per rank), correct for the profiler's overhead, replay
each candidate fix through the CPU/GPU model, combine ranks, and rank the findings."""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from perfstack.errors import InputError
from perfstack.model import Finding, Run
from perfstack.records.meta import run_meta
from perfstack.profile import accumulation, busy, comm, copies, efficiency, recompute, replays, rules, scatter, waste
from perfstack.profile.analysis import Analysis
from perfstack.profile.analyze import analyze
from perfstack.records.profile.means import OverheadMethod
from perfstack.records.profile import (Allocator, Launch, Overhead, RankRow, Section, Sync, WasteFound,
                                       WhatIf)
from perfstack.profile.recovery import PROFILER_US_PER_EVENT, PROFILER_US_PER_EVENT_HIGH
from perfstack.profile.replays import RECORDED, Job, Replays
from perfstack.profile.simulate import Scenario, Timeline, solve_scale
from perfstack.profile.straggler import straggler
from perfstack.profile.registry import Context
from perfstack.profile.telemetry import telemetry_summary
from perfstack.profile.trace import Trace, collector_paused, load

if TYPE_CHECKING:
    from perfstack.specs.table import GpuSpec

MIN_SCALE = 0.2
FLAT = 1.08  # a replay this much longer at the CPU as recorded than at the estimate is told apart by a measure


def _spec(name: str | None) -> GpuSpec | None:
    if not name:
        return None
    try:
        from perfstack.specs import lookup
        return lookup(name)
    except Exception:  # the spec table is optional for analysis
        return None


def overhead(p: Section, rp: Replays | None, unprofiled_ms: float | None, note: str | None) -> Overhead:
    """How much of the profiled step is the profiler, and the CPU scale that removes it."""
    n = max(1, p.n_steps)
    profiled = p.step_ms or 0.0
    if rp is None:
        return Overhead(profiled_step_ms=p.step_ms, events_per_step=p.events_per_step, method="none", cpu_scale=1.0,
                        step_ms=unprofiled_ms or p.step_ms,
                        note="no replay model for this trace (launches not attributable): figures are of the profiled step")
    estimated, high = _estimates(p, rp.tl)
    rp.want(_overhead_jobs(estimated, unprofiled_ms))
    model = rp.recorded() / 1e3 / n
    method: OverheadMethod
    if unprofiled_ms:
        method = "measured"
        scale, how, calibrated = _measured_scale(rp, n, model, estimated, unprofiled_ms)
        how = (note or "step time measured without the profiler") + how
    else:
        method, scale, calibrated = "estimated", estimated, True
        how = (f"estimated: {p.events_per_step:.0f} recorded CPU events per step × {PROFILER_US_PER_EVENT} µs "
               "each (H100 calibration); pass --step-ms with the step time measured without the profiler to "
               "replace the estimate")
    # where the CPU's speed without the profiler is the estimate (not measured, or a GPU-bound step whose
    # measured time says nothing of it), the other end of what it may be
    fast = round(high, 4) if calibrated else None
    return Overhead(profiled_step_ms=p.step_ms, events_per_step=p.events_per_step, model_step_ms=round(model, 4),
                    model_fit=round(model / profiled, 3) if profiled else None,
                    method=method, note=how, cpu_scale=round(scale, 4), cpu_inflation=round(1 / scale, 3),
                    step_ms=round(rp.recorded(scale) / 1e3 / n, 4) if method != "measured" else unprofiled_ms,
                    model_unprofiled_ms=round(rp.recorded(scale) / 1e3 / n, 4), fast_cpu_scale=fast)


def _estimates(p: Section, tl: Timeline) -> tuple[float, float]:
    """The CPU scales that take the profiler's calibrated cost per recorded event out of the CPU work: at the
    estimate, and at the high end of what it may be."""
    cpu_work = (sum(tl.gap) + sum(d for d, k in zip(tl.dur, tl.kind) if k != 1) + tl.tail_us) / max(1, p.n_steps) / 1e3

    def at(us_per_event: float) -> float:
        removed = us_per_event * p.events_per_step / 1e3
        return max(MIN_SCALE, 1 - removed / cpu_work) if cpu_work > 0 else 1.0
    return at(PROFILER_US_PER_EVENT), at(PROFILER_US_PER_EVENT_HIGH)


def _overhead_jobs(estimated: float, unprofiled_ms: float | None) -> list[Job]:
    return [(RECORDED, 1.0), (RECORDED, estimated)] + ([(RECORDED, MIN_SCALE)] if unprofiled_ms else [])


def _early_jobs(p: Section, tl: Timeline, unprofiled_ms: float | None) -> list[Job]:
    """The replays ``overhead`` and ``whatifs`` will ask for that are known before the waste is found: the
    second process works on them while this one looks for it. Where the step time is measured, the scale it
    gives is not known yet: only the replays as recorded."""
    estimated, high = _estimates(p, tl)
    cpu_side = _cpu_scenarios(p)
    if unprofiled_ms:
        return [*_overhead_jobs(estimated, unprofiled_ms), (RECORDED, MIN_SCALE),
                *((sc, 1.0) for sc in cpu_side.values())]
    scale = round(estimated, 4)  # as the overhead section keeps it
    return [(RECORDED, scale), (RECORDED, MIN_SCALE), *_overhead_jobs(estimated, unprofiled_ms),
            *_jobs(cpu_side, cpu_side, scale, round(high, 4), True)]


def _measured_scale(rp: Replays, n: int, model: float, estimated: float,
                    unprofiled_ms: float) -> tuple[float, str, bool]:
    """The CPU scale that replays the trace at the step time measured without the profiler, what the note
    adds about it, and whether it is the calibrated estimate after all (the measured time cannot tell it)."""
    target = unprofiled_ms * 1e3 * n
    floor, at_estimate = rp.recorded(MIN_SCALE), rp.recorded(estimated)
    # Nearly flat between the calibrated estimate and the CPU as recorded (``model``): every CPU speed in
    # that range replays within a few % of the measured time, inside a measured step's own noise; the
    # measured time cannot choose among them (solving would take the slowest, as recorded)
    flat = model * 1e3 * n < at_estimate * FLAT
    if at_estimate < floor * 1.05 or floor > target * 1.02 or flat:
        # The step is GPU-bound (a faster CPU barely changes it), or even a CPU five times faster
        # would not make it that short: the measured time says nothing about the CPU's speed, and
        # what differs is on the GPU side (run-to-run noise, clocks).
        return estimated, (f"; the step is bound by its GPU work ({floor / 1e3 / n:.2f} ms per step in the trace), "
                           "so the CPU-side correction is the calibrated estimate"), True
    scale = solve_scale(rp.tl, target, MIN_SCALE)
    if scale == 1.0 and unprofiled_ms > model * 1.05:
        return scale, (f"; the profiled trace replays at {model:.2f} ms, faster than the measured "
                       f"{unprofiled_ms:.2f} ms: CPU-side figures are left as recorded"), False
    return scale, "", False


def find_waste(A: Analysis, spec: GpuSpec | None,
               each: Callable[[waste.Waste], None] | None = None) -> list[waste.Waste]:
    """The busy-GPU waste: what the kernels do slowly, and what the step repeats that it need not. ``each`` is
    told of each waste as soon as it is final."""
    found = busy.detect(A, spec, each)
    for w in _patterns(A, spec):
        found.append(w)
        if each is not None:
            each(w)
    return found


class _EarlyFixes:
    """The fixes' scenarios, made as the waste is found and wanted from the replays at once: the second
    process, if any, replays one fix while this one looks for the next. Only where the CPU scale is the
    estimate (``overhead``), known before the waste is; ``whatifs`` takes them where its scale and its
    ``cpu_free`` are the ones they were made with."""

    def __init__(self, p: Section, A: Analysis, rp: Replays) -> None:
        estimated, high = _estimates(p, rp.tl)
        self.p, self.A, self.rp = p, A, rp
        self.scale, self.fast = round(estimated, 4), round(high, 4)  # as the overhead section keeps them
        self.cpu_free = rp.recorded(self.scale) < rp.recorded(MIN_SCALE) * 1.05
        self.made: dict[str, Scenario] = {}

    def __call__(self, w: waste.Waste) -> None:
        if not w.new_dur:
            return
        tl = self.rp.tl
        new = {w.id: _fix_scenario(w, self.A, tl, self.cpu_free)}
        if w.id == "unfused-elementwise":
            graphed = _compile_graphs(self.p, self.A, tl, [w], new, self.cpu_free)
            if graphed is not None:
                new[COMPILE_GRAPHS] = graphed
        self.made.update(new)
        self.rp.want(_jobs(new, {}, self.scale, self.fast, True))


def whatifs(p: Section, A: Analysis, rp: Replays | None, found: list[waste.Waste],
            early: _EarlyFixes | None = None) -> tuple[WasteFound, dict[str, WhatIf]]:
    """The busy-GPU waste found (``waste``: evidence by id) and the recoverable time of each candidate
    fix (``whatif``), replayed at the corrected CPU speed and as recorded."""
    evidence = WasteFound.of({w.id: w.evidence for w in found})
    if rp is None:
        return evidence, _whatifs_unreplayed(p, A, found)
    tl = rp.tl
    n = max(1, p.n_steps)
    scale = p.overhead.cpu_scale if p.overhead else 1.0
    o = p.overhead or Overhead()
    fast = o.fast_cpu_scale
    cpu_side = _cpu_scenarios(p)
    # Fused ops stop dispatching, but compiled code adds its own per-call cost (guards, graph launch) that
    # a trace of eager code cannot show: on a CPU-bound step the CPU side of fusion is unknown (on the
    # validation's CPU-bound MLP, torch.compile made the step 9% slower), so only GPU time counts there.
    floor = rp.recorded(MIN_SCALE)
    cpu_free = rp.recorded(scale) < floor * 1.05
    made = early.made if early is not None and (early.scale, early.cpu_free) == (scale, cpu_free) else {}
    scenarios = {**cpu_side, **{w.id: made.get(w.id) or _fix_scenario(w, A, tl, cpu_free) for w in found if w.new_dur}}
    graphed = made.get(COMPILE_GRAPHS) or _compile_graphs(p, A, tl, found, scenarios, cpu_free)
    if graphed is not None:
        scenarios[graphed.name] = graphed
    saved_ms = {w.id: w.saved_us(A.gpu) / 1e3 / n for w in found if w.new_dur}
    base_c, base_p = rp.recorded(scale), rp.recorded(1.0)
    # A GPU-side fix's figure is a range over the CPU's unknown speed, except where the trace's GPU work alone
    # is longer than the step measured without the profiler: the profiled GPU side is inflated itself (ranks
    # drifting apart under the profiler), and GPU-side figures keep their cautious end
    gpu_range = fast is not None and not (o.method == "measured" and o.step_ms and floor > o.step_ms * 1e3 * n * 1.02)
    rp.want(_jobs(scenarios, cpu_side, scale, fast, gpu_range))
    base_f: float | None = None
    out: dict[str, WhatIf] = {}

    def capped(name: str, r: float) -> float:
        if o.method != "measured" or not o.step_ms:
            return r
        if name in cpu_side:
            # A CPU-side fix leaves the GPU's work as it is: the step cannot get shorter than the GPU's own
            # busy time, so the fix recovers at most the idle the measured step leaves the GPU
            return min(r, max(0.0, o.step_ms - p.busy_ms) * 1e3 * n)
        if name == COMPILE_GRAPHS:
            # compiled and graphed, the step still runs the GPU work compilation leaves: at most the measured
            # step less that (the GPU's busy time less what fusion saves)
            left = p.busy_ms - saved_ms.get("unfused-elementwise", 0.0)
            return min(r, max(0.0, o.step_ms - left) * 1e3 * n)
        if name in COMM_SIDE:
            # Removing collectives leaves the compute: the step cannot get shorter than the GPU's busy time
            # outside communication. Under the profiler the ranks drift apart and collectives run exposed
            # that the unprofiled step hides under backward (2-rank DDP with accumulation on H200s: 204 ms
            # of all-reduce per profiled step in a 143 ms unprofiled one)
            return min(r, max(0.0, o.step_ms - compute_busy_ms(p)) * 1e3 * n)
        return r

    for name, sc in scenarios.items():
        rc, rr = capped(name, base_c - rp.replay(scale, sc)), base_p - rp.replay(1.0, sc)
        w = WhatIf(ms=round(max(0.0, rc) / 1e3 / n, 4), pct=round(100 * max(0.0, rc) / base_c, 1) if base_c else 0.0,
                   ms_profiled=round(max(0.0, rr) / 1e3 / n, 4),
                   pct_profiled=round(100 * max(0.0, rr) / base_p, 1) if base_p else 0.0)
        gpu_side = name not in cpu_side and name != COMPILE_GRAPHS
        # (below 1% no CPU-side rule fires: the replays are spared on large traces)
        if fast is not None and (gpu_range if gpu_side else w.pct >= 1):
            base_f = rp.recorded(fast) if base_f is None else base_f
            r = base_f - rp.replay(fast, sc)
            rf = max(0.0, capped(name, r) if gpu_side else r)
            ms_f, pct_f = round(rf / 1e3 / n, 4), round(100 * rf / base_f, 1) if base_f else 0.0
            w = replace(w, ms_fast_cpu=ms_f, pct_fast_cpu=pct_f)
            if gpu_side:
                # A GPU-side fix gains more the faster the CPU is: at the calibrated estimate the CPU may cap a
                # gain it would not cap without the profiler. The CPU's speed is unknown between the two ends
                # (3 and 7 µs of profiler per recorded event), so the claim is their middle, the figure at most
                # half the range from either (docs/profile.md: the hold-out's GPU-bound steps measured between
                # the two ends, nearer the fast one)
                w = replace(w, ms=round((w.ms + ms_f) / 2, 4), pct=round((w.pct + pct_f) / 2, 1),
                            ms_slow_cpu=w.ms, pct_slow_cpu=w.pct)
        out[name] = w
    return evidence, out


def _jobs(scenarios: dict[str, Scenario], cpu_side: dict[str, Scenario], scale: float, fast: float | None,
          gpu_range: bool) -> Iterable[Job]:
    """The replays ``whatifs`` asks for, in its order: each scenario's at the corrected CPU scale and as
    recorded, then at the fast CPU end where there is one (a CPU-side fix's only where it recovers ≥ 1%,
    which its first figure tells: wanted all the same, the second process being idle otherwise)."""
    for name, sc in scenarios.items():
        yield sc, scale
        yield sc, 1.0
        gpu_side = name not in cpu_side and name != COMPILE_GRAPHS
        if fast is not None and (gpu_range or not gpu_side):
            yield RECORDED, fast
            yield sc, fast


COMM_SIDE = frozenset({"ddp-sync-per-microbatch"})  # fixes that remove collectives and nothing else
# A what-if named after a fix rather than a finding: torch.compile(mode="reduce-overhead") does what two findings
# name (fusion, and CUDA-graph dispatch), and its gain is their replay together, not the larger of the two
COMPILE_GRAPHS = "compile-cudagraphs"


def _compile_graphs(p: Section, A: Analysis, tl: Timeline, found: list[waste.Waste],
                    scenarios: dict[str, Scenario], cpu_free: bool) -> Scenario | None:
    """Compiled with CUDA graphs: the fusion scenario (what Inductor does to the kernels: chains fused, GEMMs
    padded, convolutions in channels_last) with every launch replayed from a graph. None where neither part
    applies (no fusion found, and a step too short of kernels or already graphed). ``scenarios``: the fixes'
    own, made with ``cpu_free``; the fusion fix's durations and bubbles are taken from its one."""
    launch = p.launch or Launch()
    graph = launch.kernels_per_step >= 50 and not launch.graph_launches_per_step
    eager = graph_eager(A, tl) if graph else frozenset[int]()
    fused = next((w for w in found if w.id == "unfused-elementwise" and w.new_dur), None)
    if fused is None:
        return Scenario(COMPILE_GRAPHS, graph=True, eager=eager) if graph else None
    made = scenarios.get(fused.id)
    if made is None:
        sc = _fix_scenario(fused, A, tl, True)
    elif cpu_free:
        sc = made  # the same scenario
    else:  # the same kernels, with the launches fusion leaves empty gone (see _fix_scenario)
        sc = replace(made, no_dispatch=_no_dispatch(fused, tl, True))
    return replace(sc, name=COMPILE_GRAPHS, graph=graph, eager=eager)


def graph_eager(A: Analysis, tl: Timeline) -> frozenset[int]:
    """The actions compiling the model with CUDA graphs leaves eager (the compile-cudagraphs what-if; launch-bound's
    own graphs the whole step): those that launch the optimizer step's kernels. torch.compile(model,
    mode="reduce-overhead"), the fix as it is applied, captures the forward and backward, not the optimizer step,
    whose launches stay one by one (a per-parameter optimizer's thousands: fused=True is their fix,
    optimizer-not-fused)."""
    phase, index = A.att.phase, tl.g_index
    return frozenset(a for k, a in enumerate(tl.g_action) if a >= 0 and phase[index[k]] == "optimizer")


def compute_busy_ms(p: Section) -> float:
    """The GPU's busy time per step outside communication (the breakdown partitions the step's wall time)."""
    return sum(v for k, v in (p.breakdown() or {}).items() if k not in ("comm", "idle"))


def _patterns(A: Analysis, spec: GpuSpec | None) -> Iterator[waste.Waste]:
    """What the step repeats that it need not: copies of growing tensors, recomputed activations, a tensor's
    whole gradient filled and added once per slice, extra all-reduce rounds. Each may carry evidence without new
    durations (nothing to replay: then no what-if). One at a time, each as its detector finds it."""
    for detect in (lambda: copies.detect(A, spec), lambda: recompute.detect(A), lambda: scatter.detect(A, spec),
                   lambda: accumulation.detect(A)):
        w = detect()
        if w is not None:
            yield w


def _whatifs_unreplayed(p: Section, A: Analysis, found: list[waste.Waste]) -> dict[str, WhatIf]:
    """Without a replay model: a waste's GPU time saved counts only on a GPU-bound step."""
    n = max(1, p.n_steps)
    step = (p.overhead.step_ms if p.overhead else None) or 0.0
    bound = p.timeline.bound if p.timeline else None
    out: dict[str, WhatIf] = {}
    for w in found:
        if not w.new_dur:
            continue
        ms = min(step, w.saved_us(A.gpu) / 1e3 / n) if bound == "gpu" else 0.0
        out[w.id] = WhatIf(ms=round(ms, 4), pct=round(100 * ms / step, 1) if step else 0.0,
                           ms_profiled=round(ms, 4), pct_profiled=round(100 * ms / p.step_ms, 1) if p.step_ms else 0.0)
    return out


def _cpu_scenarios(p: Section) -> dict[str, Scenario]:
    """CPU-side scenarios, each replayed only where the trace has what it removes (replays cost time
    on large traces)."""
    scenarios: dict[str, Scenario] = {}
    sync, alloc, launch = p.sync or Sync(), p.allocator or Allocator(), p.launch or Launch()
    if sync.calls_per_step > 1:
        scenarios["host-sync"] = Scenario("one sync per step", keep_sync="last-per-step")
    if p.data_wait_ms > 0:
        scenarios["dataloader-stall"] = Scenario("batches ready when asked", no_dataloader=True)
    if alloc.calls_per_step > 0 or alloc.ms_per_step > 0:
        scenarios["allocator-churn"] = Scenario("no allocator calls", no_allocator=True)
    if launch.kernels_per_step >= 50 and not launch.graph_launches_per_step:
        scenarios["launch-bound"] = Scenario("CUDA-graph dispatch", graph=True)  # the whole step, optimizer too
    return scenarios


# kernels a fix merges into one: the bubbles between them go with them
_MERGING = ("unfused-elementwise", "large-vocab-loss", "attention-unfused", "optimizer-not-fused")
# work a fix takes out of the program: its operators stop dispatching whatever bounds the step
_REMOVING = ("activation-recompute", "sliced-backward", "ddp-sync-per-microbatch", "optimizer-not-fused")


def _fix_scenario(w: waste.Waste, A: Analysis, tl: Timeline, cpu_free: bool) -> Scenario:
    """The timeline with one busy-GPU fix applied: its kernels' new durations, the bubbles between
    merged kernels gone, and (where the CPU side is free) the actions left with nothing to dispatch."""
    at, new_dur = tl.positions(), w.new_dur
    n = len(at)
    d = array("d", tl.g_dur)
    # a merging fix: an event changed whose predecessor on its stream (in start order) is changed too loses its
    # bubble; only the changed events are looked at, in the loop that sets their durations
    bub = array("d", tl.g_bubble) if w.id in _MERGING else None
    prev, index = (tl.prev_on_stream(), tl.g_index) if bub is not None else (array("q"), array("q"))
    for gi, new in new_dur.items():
        k = at[gi] if 0 <= gi < n else -1
        if k >= 0:
            d[k] = new
            if bub is not None and (j := prev[k]) >= 0 and index[j] in new_dur:
                bub[k] = 0.0
    return Scenario(w.id, g_dur=d, g_bubble=bub, no_dispatch=_no_dispatch(w, tl, cpu_free))


def _no_dispatch(w: waste.Waste, tl: Timeline, cpu_free: bool) -> frozenset[int]:
    """The actions a fix leaves with nothing to dispatch (where the CPU side is free, or the fix removes work)."""
    gone: set[int] = set()
    if w.merged and (cpu_free or w.id in _REMOVING):
        # an action whose every event is fused into another no longer dispatches anything: as many of its
        # events merged as it launches (counted in one pass over the merged events, not a test per action)
        at, action = tl.positions(), tl.g_action
        n = len(at)
        merged = Counter([action[k] for k in [at[i] for i in w.merged if 0 <= i < n] if k >= 0])
        gone = {a for a, n in merged.items() if a >= 0 and n == len(tl.events[a])}
    return frozenset(gone)


def summarize(path: str | Path, spec_name: str | None = None, unprofiled_step_ms: float | None = None,
              unprofiled_note: str | None = None,
              model_flops: float | None = None) -> tuple[Section, GpuSpec | None]:
    """One trace's summary, with efficiency, overhead, what-ifs and MFU, and the spec of its GPU. Each
    pass returns its own part, from the section as the passes before it left it; none changes another's."""
    with collector_paused():
        return _summarize(path, spec_name, unprofiled_step_ms, unprofiled_note, model_flops)


def _summarize(path: str | Path, spec_name: str | None, unprofiled_step_ms: float | None,
               unprofiled_note: str | None, model_flops: float | None) -> tuple[Section, GpuSpec | None]:
    trace = load(path)
    helper = replays.start(len(trace.runtime))  # started now, it is ready when the timeline is
    try:
        return _analysed(trace, helper, spec_name, unprofiled_step_ms, unprofiled_note, model_flops)
    finally:
        if helper is not None:
            helper.close()


def _analysed(trace: Trace, helper: replays.Helper | None, spec_name: str | None, unprofiled_step_ms: float | None,
              unprofiled_note: str | None, model_flops: float | None) -> tuple[Section, GpuSpec | None]:
    A = Analysis(trace)
    building = replays.build(trace, A.att, A.windows, A.cs, helper)  # the second process builds the timeline ...
    analysed = analyze(trace, A)  # ... while this one sums up the steps and the kernels
    rp = replays.timeline(trace, A.att, A.windows, A.cs, helper, building)
    if rp is not None:
        rp.want([(RECORDED, 1.0), (RECORDED, MIN_SCALE)])
    p = analysed.section
    spec = _spec(spec_name or p.device_name)
    gemms, ops, classes = efficiency.against_peaks(p.gemms, p.ops, analysed.ops_all, spec)
    p = replace(p, gemms=gemms, ops=ops, gpu_spec=spec.name if spec else None, kernel_classes=classes)
    early = None
    if rp is not None:
        if p.launch is not None and (eager := graph_eager(A, rp.tl)):
            p = replace(p, launch=replace(p.launch, optimizer_launches_per_step=round(len(eager) / max(1, p.n_steps), 1)))
        rp.want(_early_jobs(p, rp.tl, unprofiled_step_ms))  # the second process, if any, replays ...
        early = _EarlyFixes(p, A, rp) if not unprofiled_step_ms else None
    wasted = find_waste(A, spec, early)  # ... while this one looks for the waste
    p = replace(p, overhead=overhead(p, rp, unprofiled_step_ms, unprofiled_note))
    found, whatif = whatifs(p, A, rp, wasted, early)
    p = replace(p, waste=found, whatif=whatif)
    if p.comm is not None and p.comm.ms_per_step:
        # the overlap model, and whether DistributedDataParallel is already in use (the fix then differs)
        p = replace(p, comm=p.comm.with_overlap_model({**comm.overlap_model(A, p), "ddp": accumulation.uses_ddp(A)}))
    gemm_flops, model_tflops, mfu = efficiency.mfu(p, analysed.ops_all, spec, model_flops)
    return replace(p, gemm_flops_per_step=gemm_flops, model_tflops=model_tflops, mfu=mfu), spec


def profile_run(paths: Iterable[str | Path], model_flops_per_step: float | None = None,
                telemetry: list[dict[str, Any]] | None = None, command: str = "profile", *,
                unprofiled_step_ms: float | None = None, unprofiled_note: str | None = None) -> Run:
    """``unprofiled_step_ms``: the step time measured without the profiler (capture mode measures it
    around the profiled window; ``--step-ms`` gives it in trace mode); ``unprofiled_note`` says how."""
    files = [Path(p) for p in paths]
    if not files:
        raise InputError("no trace files given", hint="perfstack profile --trace FILE [FILE...]")
    summaries, spec = _ranks(files, unprofiled_step_ms, unprofiled_note, model_flops_per_step)
    main = _combined(summaries, spec, telemetry)
    findings = _findings(summaries, main, Context(spec=spec, model_flops_per_step=model_flops_per_step))
    meta = run_meta(command, traces=[str(p) for p in files], gpu=summaries[0].device_name)
    warnings = [w for s in summaries for w in s.warnings]
    if warnings:
        meta.warnings = warnings
    return Run(meta=meta, findings=findings, profile=main)


def _ranks(files: list[Path], unprofiled_step_ms: float | None, unprofiled_note: str | None,
           model_flops: float | None) -> tuple[list[Section], GpuSpec | None]:
    """Each trace's summary in rank order (a trace that names no rank takes its place in the list),
    and the first rank's GPU spec; two traces of one rank are refused."""
    summaries = []
    for i, path in enumerate(files):
        s, s_spec = summarize(path, None, unprofiled_step_ms, unprofiled_note, model_flops)
        if s.rank is None:
            s = replace(s, rank=i if len(files) > 1 else 0)
        summaries.append((s, s_spec))
    if len({s.rank for s, _ in summaries}) != len(summaries):
        raise InputError("several traces claim the same rank: " + ", ".join(f"{s.file} (rank {s.rank})"
                                                                          for s, _ in summaries),
                         hint="give one trace per rank of the same run")
    summaries.sort(key=lambda ss: ss[0].rank or 0)
    return [s for s, _ in summaries], summaries[0][1]


RANK_FIELDS = ("rank", "file", "step_ms", "busy_pct", "idle_ms", "compute_ms", "breakdown_ms", "idle_by_reason_ms",
               "comm", "device_name")


def _rank_row(s: Section) -> RankRow:
    return RankRow(**{k: getattr(s, k) for k in RANK_FIELDS})


def _combined(summaries: list[Section], spec: GpuSpec | None, telemetry: list[dict[str, Any]] | None) -> Section:
    """The Run's profile section: the first rank's summary, with every rank's row, the straggler and
    the files where there are several, and the GPU telemetry sampled during a capture."""
    main = summaries[0]
    if len(summaries) > 1:
        ranks = [_rank_row(s) for s in summaries]
        main = replace(main, ranks=ranks, straggler=straggler(summaries), files=[s.file for s in summaries])
    if telemetry:
        main = replace(main, telemetry=telemetry_summary(telemetry, spec))
    return main


def _findings(summaries: list[Section], main: Section, ctx: Context) -> list[Finding]:
    """Every rank's findings (the straggler and telemetry are the run's); where ranks share an id, the
    one that recovers most."""
    by_id: dict[str, Finding] = {}
    for s in summaries:
        for f in rules.evaluate(replace(s, straggler=main.straggler, telemetry=main.telemetry), ctx):
            if len(summaries) > 1 and f.id not in ("straggler-rank", "throttled-during-run"):
                f.subject = f.subject or f"rank{s.rank}"
            prev = by_id.get(f.id)
            if prev is None or (f.recoverable_ms or 0) > (prev.recoverable_ms or 0):
                by_id[f.id] = f
    return rules.rank(list(by_id.values()))
