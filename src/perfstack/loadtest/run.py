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
from typing import Callable, Optional


from perfstack.errors import UsageError
from perfstack.loadtest import server, sweep
from perfstack.loadtest.load import Target, event_loop, new_session
from perfstack.loadtest.workers import auto_procs, run_level
from perfstack.loadtest.record import Level, LoadTest, Slo
from perfstack.loadtest.workload import Workload

MAX_STREAMS = 100_000  # connections the client keeps open at once (the OS's file limit binds first)


@dataclass
class Plan:
    url: str
    api: str = "chat"
    model: Optional[str] = None
    mode: str = "concurrency"  # or "rate"
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


def _warmup(plan: Plan, mode: str, load: float) -> int:
    if plan.warmup is not None:
        return plan.warmup
    if mode == "concurrency":
        return int(load)
    return max(1, min(50, round(plan.requests * 0.05)))


def _n(plan: Plan, mode: str, load: float) -> int:
    return max(plan.requests, 3 * int(load)) if mode == "concurrency" else plan.requests


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
        prompts = wl.cycle()
        levels: list[Level] = []
        stopped: Optional[str] = None
        cap: Optional[float] = None

        async def level(load: float, seed: int, **mark: bool) -> Level:
            mode = plan.mode
            label = f"{load:g} streams" if mode == "concurrency" else (
                "all at once" if math.isinf(load) else f"{load:g} req/s")
            what = " (capacity probe)" if mark.get("probe") else " (SLO search)" if mark.get("bisect") else ""
            progress(f"level {len(levels) + 1}: {label}{what}, {_n(plan, mode, load)} requests…")
            procs = _procs(plan, mode, load)
            _note_crowded_cpus(procs, notes)
            lv = await run_level(session, target, prompts, mode, load, _n(plan, mode, load),
                                 _warmup(plan, mode, load), stop, seed=seed, burstiness=plan.burstiness,
                                 max_concurrency=plan.max_concurrency, slo=plan.slo, procs=procs)
            for k, v in mark.items():
                setattr(lv, k, v)
            levels.append(lv)
            progress(_line(lv))
            return lv

        if plan.sweep and plan.mode == "rate":
            # the capacity first (everything at once), then fractions of it
            probe = await level(math.inf, plan.seed, probe=True)
            cap = sweep.capacity(probe)
            progress(f"capacity: {cap:.3g} req/s while the server was full")
            loads = sweep.rate_loads(cap)
        else:
            loads = _loads(plan)
        for load in loads:
            if stop.is_set() or _faulted(levels):
                break
            await level(load, plan.seed + len(levels))
            if plan.sweep and plan.mode == "concurrency":
                stopped = sweep.should_stop(levels, plan.slo)
                if stopped:
                    progress(f"sweep {stopped}")
                    break
        if plan.sweep and stopped != "interrupted":
            integer = plan.mode == "concurrency"
            step = 1.0 if integer else sweep.RATE_STEP * (cap or 0.0)
            while not stop.is_set() and not _faulted(levels):
                nxt = sweep.bisect_next(levels, plan.slo, step, integer)
                if nxt is None:
                    break
                await level(nxt, plan.seed + len(levels), bisect=True)
        return _record(plan, addr.shown, target, model, wl, levels, ident, notes, stop.is_set(), stopped, cap)


def _faulted(levels: list[Level]) -> bool:
    """The last level ended for a fault of the client: the levels after it would not be comparable."""
    return bool(levels and levels[-1].stopped)


def _procs(plan: Plan, mode: str, load_: float) -> int:
    if plan.client_procs is not None:
        return plan.client_procs
    return auto_procs(mode, load_, plan.burstiness, _usable_cpus())


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


def _record(plan: Plan, shown: str, target: Target, model: str, wl: Workload, levels: list[Level], ident: dict,
            notes: list[str], interrupted: bool, stopped: Optional[str], cap: Optional[float] = None) -> LoadTest:
    if interrupted:
        notes.append("interrupted: the last level is partial and its unanswered requests are marked 'interrupted'")
    for i, lv in enumerate(levels):
        if lv.stopped:
            sent = sum(not r.warmup for r in lv.requests)
            notes.append(f"level {i + 1} did not finish: {lv.stopped}; {sent} measured requests were sent, "
                         "the unanswered ones are marked 'interrupted'")
    spec = dict(wl.spec, ignore_eos=target.ignore_eos, burstiness=plan.burstiness,
                event_loop=type(asyncio.get_running_loop()).__module__.split(".")[0],
                max_concurrency=plan.max_concurrency, timeout_s=plan.timeout_s)
    sw = sweep.summary(levels, plan.slo, stopped, cap) if plan.sweep or len(levels) > 1 else {}
    return LoadTest(url=shown, api=plan.api, model=model, workload=spec, levels=levels, slo=plan.slo,
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
