"""A whole load test: find the server, check it streams, run the levels, keep everything in one record.

Ctrl-C stops the level in flight: the requests already answered are kept, those cut short are marked
"interrupted", and the record says it is partial, so a long sweep is never lost to an impatient finger.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import aiohttp


from perfstack.errors import UsageError
from perfstack.loadtest import metrics, server, sweep
from perfstack.loadtest.client import Target
from perfstack.loadtest.load import LevelSpec, event_loop, new_session
from perfstack.loadtest.workers import auto_procs, run_level
from perfstack.records.loadtest import Level, LoadTest, Slo
from perfstack.loadtest.vocabulary import Api, Mode
from perfstack.loadtest.workload import Prompt, Workload

MAX_STREAMS = 100_000  # connections the client keeps open at once (the OS's file limit binds first)


@dataclass
class Plan:
    url: str
    api: Api = "chat"
    model: Optional[str] = None
    mode: Mode = "concurrency"
    loads: list[float] = field(default_factory=lambda: [1.0])
    sweep: bool = False
    sweep_max: float = 512  # the highest concurrency an automatic sweep tries
    requests: int = 100  # measured requests per level (at least 3 per stream in a closed loop)
    warmup: Optional[int] = None  # per level; default one wave (closed) or 5% (open)
    burstiness: float = 1.0
    max_concurrency: Optional[int] = None
    seed: int = 0
    slo: Optional[Slo] = None
    ignore_eos: bool = True
    timeout_s: float = 600.0
    stall_s: float = 60.0
    api_key_env: Optional[str] = "OPENAI_API_KEY"
    client_procs: Optional[int] = None  # None: one per 100 streams, up to the usable CPUs but one
    repeat: int = 1  # runs of every level; figures are medians over them, with intervals
    ramp_s: float = 0.0  # each level's load climbs over this long (rate from 0, or streams one after another)
    arrivals: Optional[list[float]] = None  # mode "trace": the trace's send times; loads are replay speeds


def _warmup(plan: Plan, mode: Mode, load: float) -> int:
    if mode == "trace":
        return plan.warmup or 0  # the trace is the workload: a warm-up is its first requests, if asked
    if plan.warmup is not None:
        return plan.warmup
    if mode == "concurrency":
        return int(load)
    return max(1, min(50, round(plan.requests * 0.05)))


def _n(plan: Plan, mode: Mode, load: float) -> int:
    if mode == "trace":
        return len(plan.arrivals or []) - _warmup(plan, mode, load)
    return max(plan.requests, 3 * int(load)) if mode == "concurrency" else plan.requests


def _spec(plan: Plan, load: float, seed: int) -> LevelSpec:
    """One run of a level at ``load``, as the plan asks for it."""
    mode = plan.mode
    at_s = tuple(t / load for t in plan.arrivals) if mode == "trace" and plan.arrivals else None
    return LevelSpec(mode=mode, load=load, n=_n(plan, mode, load), warmup=_warmup(plan, mode, load), seed=seed,
                     burstiness=plan.burstiness, max_concurrency=plan.max_concurrency, ramp_s=plan.ramp_s, at_s=at_s)


def _note_crowded_cpus(procs: int, notes: list[str]) -> None:
    cpus = _usable_cpus()
    if procs > 1 and procs >= cpus and not any("client processes on" in n for n in notes):
        notes.append(f"{procs} client processes on {cpus} usable CPUs: they wait for each other's CPUs (and "
                     "any server's on this host), and that wait reads as ITL; see the client's CPU wait")


async def _run(plan: Plan, wl: Workload, progress: Callable[[str], None], stop: asyncio.Event) -> LoadTest:
    addr = server.address(plan.url)
    hdrs = server.headers(plan.api_key_env)
    notes: list[str] = []
    if not wl.exact_counts:
        notes.append("prompt lengths counted without the model's tokenizer (approximate); "
                     "figures use the server's own token counts where it reports them")
    async with new_session() as session:
        ident = await server.identify(session, addr, hdrs, plan.model, notes)
        model = plan.model or (ident["models"][0] if ident["models"] else None)
        if not model:
            raise UsageError("the server lists no model; name one with --model")
        if plan.model and ident["models"] and plan.model not in ident["models"]:
            notes.append(f"--model {plan.model} is not among the models the server lists ({', '.join(ident['models'][:5])})")
        target = Target(url=addr.base + server.PATHS[plan.api], api=plan.api, model=model, headers=hdrs,
                        ignore_eos=plan.ignore_eos, timeout_s=plan.timeout_s, stall_s=plan.stall_s,
                        metrics_url=addr.base + "/metrics" if "metrics" in ident else None)
        progress(f"{addr.shown}: model {model}; checking that it streams…")
        await server.probe(session, target, notes, wl.prompts[0])
        if target.metrics_url is None:
            notes.append("the server has no Prometheus /metrics: findings rest on latencies alone")
        runner = _Levels(plan, session, target, wl.cycle(), notes, progress, stop)
        stopped, cap = await _sweep(plan, runner)
        return _record(runner, addr.shown, wl, ident, stopped, cap)


@dataclass
class _Levels:
    """Runs the levels of one load test, one after another, and keeps them."""

    plan: Plan
    session: aiohttp.ClientSession
    target: Target
    prompts: Iterator[Prompt]
    notes: list[str]
    progress: Callable[[str], None]
    stop: asyncio.Event
    levels: list[Level] = field(default_factory=list)

    async def level(self, load: float, seed: int, **mark: bool) -> Level:
        plan, mode, progress = self.plan, self.plan.mode, self.progress
        label = f"{load:g} streams" if mode == "concurrency" else f"the trace at {load:g}× its speed" if (
            mode == "trace") else "all at once" if math.isinf(load) else f"{load:g} req/s"
        what = " (capacity probe)" if mark.get("probe") else " (SLO search)" if mark.get("bisect") else ""
        progress(f"level {len(self.levels) + 1}: {label}{what}, {_n(plan, mode, load)} requests…")
        procs = _procs(plan, mode, load)
        _note_crowded_cpus(procs, self.notes)
        parts: list[Level] = []
        for k in range(plan.repeat):
            if parts and (self.stop.is_set() or parts[-1].stopped):
                break
            if plan.repeat > 1:
                progress(f"  run {k + 1} of {plan.repeat}…")
            parts.append(await run_level(self.session, self.target, self.prompts, _spec(plan, load, seed + 7919 * k),
                                         self.stop, slo=plan.slo, procs=procs))
        lv = merged(parts, plan.slo)
        for name, v in mark.items():
            setattr(lv, name, v)
        self.levels.append(lv)
        progress(_line(lv))
        return lv


async def _sweep(plan: Plan, runner: _Levels) -> tuple[Optional[str], Optional[float]]:
    """The plan's levels: given loads, a doubling sweep, or a rate sweep's probe and fractions; then, with
    an SLO, the bisection of its boundary. Returns why a sweep stopped and the capacity a probe measured."""
    levels, stop = runner.levels, runner.stop
    stopped: Optional[str] = None
    cap: Optional[float] = None
    if plan.sweep and plan.mode == "rate":
        # the capacity first (everything at once), then fractions of it
        probe = await runner.level(math.inf, plan.seed, probe=True)
        cap = sweep.capacity(probe)
        runner.progress(f"capacity: {cap:.3g} req/s while the server was full")
        loads = sweep.rate_loads(cap)
    else:
        loads = _loads(plan)
    for load in loads:
        if stop.is_set() or _faulted(levels):
            break
        await runner.level(load, plan.seed + len(levels))
        if plan.sweep and plan.mode == "concurrency":
            stopped = sweep.should_stop(levels, plan.slo)
            if stopped:
                runner.progress(f"sweep {stopped}")
                break
    if plan.sweep and stopped != "interrupted":
        integer = plan.mode == "concurrency"
        step = 1.0 if integer else sweep.RATE_STEP * (cap or 0.0)
        while not stop.is_set() and not _faulted(levels):
            nxt = sweep.bisect_next(levels, plan.slo, step, integer)
            if nxt is None:
                break
            await runner.level(nxt, plan.seed + len(levels), bisect=True)
    return stopped, cap


def merged(parts: list[Level], slo: Optional[Slo]) -> Level:
    """The runs of one level (``--repeat``) as one: every request kept with its run's number, each figure
    the median over the runs, with its interval across them."""
    if len(parts) == 1:
        return parts[0]
    for k, p in enumerate(parts):
        for r in p.requests:
            r.repeat = k
    reqs = [r for p in parts for r in p.requests]
    ci, cov = metrics.spread(reqs, slo)
    clients = [p.client for p in parts if p.client is not None]
    return Level(mode=parts[0].mode, load=parts[0].load, requests=reqs, summary=metrics.summarize(reqs, slo),
                 server=[x for p in parts for x in p.server],
                 client=max(clients, key=lambda c: c.loop_lag_p99_ms) if clients else None,
                 interrupted=any(p.interrupted for p in parts), stopped=next((p.stopped for p in parts if p.stopped), ""),
                 repeats=len(parts), ci=ci, ci_coverage=cov)


def _faulted(levels: list[Level]) -> bool:
    """The last level ended for a fault of the client: the levels after it would not be comparable."""
    return bool(levels and levels[-1].stopped)


def _procs(plan: Plan, mode: Mode, load_: float) -> int:
    if plan.client_procs is not None:
        return plan.client_procs
    return auto_procs(mode, load_, _usable_cpus())


def _loads(plan: Plan) -> list[float]:
    if not plan.sweep:
        return plan.loads
    out, c = [], 1
    while c <= plan.sweep_max:
        out.append(float(c))
        c *= 2
    return out


def _line(lv: Level) -> str:
    s = lv.summary
    ttft = f"TTFT p50 {s.ttft.median:.0f} ms" if s.ttft else "no TTFT"
    itl = f"ITL p50 {s.itl.median:.1f} ms" if s.itl else "no ITL"
    fail = f", {s.failed} failed" if s.failed else ""
    return f"  {s.completed} done{fail} · {s.output_throughput:.0f} tok/s · {ttft} · {itl}"


def _record(runner: _Levels, shown: str, wl: Workload, ident: dict[str, Any], stopped: Optional[str],
            cap: Optional[float] = None) -> LoadTest:
    """The load test's record: the levels the runner ran, with what was noted on the way."""
    plan, target, levels, notes, interrupted = runner.plan, runner.target, runner.levels, runner.notes, runner.stop.is_set()
    if interrupted:
        notes.append("interrupted: the last level is partial and its unanswered requests are marked 'interrupted'")
    for i, lv in enumerate(levels):
        if lv.stopped:
            sent = sum(not r.warmup for r in lv.requests)
            notes.append(f"level {i + 1} did not finish: {lv.stopped}; {sent} measured requests were sent, "
                         "the unanswered ones are marked 'interrupted'")
    spec = dict(wl.spec, ignore_eos=target.ignore_eos, burstiness=plan.burstiness,
                event_loop=type(asyncio.get_running_loop()).__module__.split(".")[0],
                max_concurrency=plan.max_concurrency, timeout_s=plan.timeout_s,
                **({"repeat": plan.repeat} if plan.repeat > 1 else {}),
                **({"ramp_s": plan.ramp_s} if plan.ramp_s > 0 else {}))
    sw = sweep.summary(levels, plan.slo, stopped, cap) if plan.sweep or len(levels) > 1 else {}
    return LoadTest(url=shown, api=plan.api, model=target.model, workload=spec, levels=levels, slo=plan.slo,
                    server=ident, sweep=sw, notes=notes, interrupted=interrupted)


def open_files(needed: int) -> None:
    """Each stream holds a socket: raise this process's soft open-file limit toward its hard limit (no
    privilege needed) and refuse a load that cannot fit under it."""
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, max(needed, soft))
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise UsageError(f"{needed - 64} concurrent streams need about {needed} open files; this process may open "
                         f"{soft}", hint="raise the limit (ulimit -n) or lower the concurrency")


def run(plan: Plan, wl: Workload, progress: Callable[[str], None]) -> LoadTest:
    """Run the plan on a fresh event loop; SIGINT ends it early with a partial record."""
    most = plan.sweep_max if plan.sweep and plan.mode == "concurrency" else max(
        [x for x in plan.loads if x != math.inf] + [plan.max_concurrency or 0, 1])
    open_files(int(most if plan.mode == "concurrency" else (plan.max_concurrency or 1024)) + 64)

    async def main() -> LoadTest:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signals here: Ctrl-C then ends the process the usual way
        try:
            return await _run(plan, wl, progress, stop)
        finally:
            try:
                loop.remove_signal_handler(signal.SIGINT)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    loop = event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        for t in asyncio.all_tasks(loop):
            t.cancel()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _usable_cpus() -> int:
    """CPUs this process may run on (taskset and cgroup cpusets count, unlike os.cpu_count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
