"""Drive one load level: a closed loop (fixed concurrency) or an open loop (arrivals at a rate).

Open-loop arrivals are gamma-distributed gaps with shape = burstiness (1: Poisson; below 1: burstier),
mean 1/rate, from a fixed seed — the model vLLM's benchmark uses, so the same flags mean the same load.
While the level runs, the client measures itself (CPU share of its one event loop and how late a 10 ms
timer fires): a saturated client adds its own latency to every figure, and the Run must say so.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Iterator, Optional

import aiohttp

from perfstack.loadtest import client, embed, metrics, scrape, workload
from perfstack.loadtest.client import Target
from perfstack.records.loadtest import ClientLoad, Level, Request, ServerSample, Slo
from perfstack.loadtest.vocabulary import Mode


@dataclass(frozen=True)
class LevelSpec:
    """The load of one level: what is sent, how many, and when. Where it goes is the Target; the clock and
    the stop event are the caller's."""

    mode: Mode
    load: float  # streams (concurrency), requests/s (rate; inf: all at once), or the trace's replay speed
    n: int  # measured requests
    warmup: int  # requests sent before them, left out of every figure
    seed: int = 0  # of the open loop's arrivals
    burstiness: float = 1.0  # the gamma shape of the open loop's gaps (1: Poisson; below 1: burstier)
    max_concurrency: Optional[int] = None  # an open loop's cap on requests in flight
    ramp_s: float = 0.0  # the rate climbs from 0 (open loop), or the streams start one after another (closed)
    at_s: Optional[tuple[float, ...]] = None  # the send times outright (a replayed trace)

    @property
    def total(self) -> int:
        return self.warmup + self.n


def event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (the loadtest extra brings it on Linux and macOS): it reads a streamed
    chunk in less CPU than the standard loop, which keeps the client's own delay out of the ITL at
    thousands of streams. PERFSTACK_EVENT_LOOP=asyncio forces the standard loop."""
    if os.environ.get("PERFSTACK_EVENT_LOOP", "").lower() != "asyncio":
        try:
            import uvloop
            return uvloop.new_event_loop()
        except ImportError:
            pass
    return asyncio.new_event_loop()


def new_session() -> aiohttp.ClientSession:
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False)
    # no automatic decompression: requests ask for identity, and a compressed answer they did not ask for is
    # refused (client.py) rather than inflated without bound inside the event loop
    return aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None, connect=30),
                                 auto_decompress=False)


def arrivals(rate: float, n: int, burstiness: float, seed: int, ramp_s: float = 0.0) -> list[float]:
    """Send times (s) of ``n`` requests at ``rate`` per second; all at 0 when rate is infinite. With
    ``ramp_s`` the rate climbs linearly from 0 to ``rate`` over the first ``ramp_s`` seconds: the gaps are
    drawn at the full rate and the clock is bent, time t where the ramped rate's integral reaches the
    straight one's (rate t^2 / 2 ramp_s, then rate (t - ramp_s / 2))."""
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, theta)
    if ramp_s > 0:
        out = [math.sqrt(2 * ramp_s * u) if u < ramp_s / 2 else u + ramp_s / 2 for u in out]
    return out


def _cpu_wait_s() -> float:
    """Seconds this process's threads have spent runnable but waiting for a CPU (Linux; 0 elsewhere)."""
    try:
        total = 0
        for t in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{t}/schedstat") as f:
                total += int(f.read().split()[1])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass
class _Monitor:
    lags: list[float] = field(default_factory=list)
    cpu0: float = field(default_factory=time.process_time)
    wall0: float = field(default_factory=time.perf_counter)
    wait0: float = field(default_factory=_cpu_wait_s)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            self.lags.append((time.perf_counter() - t - 0.01) * 1e3)

    def result(self, chunks: int) -> ClientLoad:
        wall = max(time.perf_counter() - self.wall0, 1e-9)
        cpu = time.process_time() - self.cpu0
        lags = sorted(self.lags) or [0.0]
        return ClientLoad(cpu_fraction=cpu / wall, loop_lag_p99_ms=metrics.percentile(lags, 99),
                          loop_lag_max_ms=lags[-1], cpu_us_per_chunk=cpu * 1e6 / max(chunks, 1),
                          cpu_wait_fraction=max(0.0, _cpu_wait_s() - self.wait0) / wall)


async def _open_loop(one: Callable[[int, workload.Prompt], Awaitable[None]], ready: Iterator[workload.Prompt],
                     at_s: Iterable[float], t_level: float, stop: asyncio.Event,
                     max_concurrency: Optional[int]) -> None:
    """Rate mode: request i sent at t_level + its arrival time, whether or not earlier ones finished (at
    most ``max_concurrency`` in flight when set); waits for all, and cancels what is left on the way out."""
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    tasks: list[asyncio.Future[None]] = []
    try:
        for i, at in enumerate(at_s):
            delay = t_level + at - time.perf_counter()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
            if stop.is_set():
                break
            p = next(ready)
            if sem is not None:
                await sem.acquire()
            task = asyncio.ensure_future(one(i, p))
            if sem is not None:
                task.add_done_callback(lambda _t: sem.release())
            tasks.append(task)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _until_done_or_stopped(main: asyncio.Future[Any], stop: asyncio.Event) -> bool:
    """Wait for ``main``; when ``stop`` is set first, cancel it. True when it was cut short."""
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait((main, stopper), return_when=asyncio.FIRST_COMPLETED)
    interrupted = not main.done()
    if interrupted:
        main.cancel()
        await asyncio.gather(main, return_exceptions=True)
    stopper.cancel()
    return interrupted


async def run_level(session: aiohttp.ClientSession, target: Target, prompts: Iterator[workload.Prompt],
                    spec: LevelSpec, stop: asyncio.Event, slo: Optional[Slo] = None,
                    t_level: Optional[float] = None) -> Level:
    """Send the level's warm-up and measured requests; ``stop`` ends the level early (Ctrl-C).
    ``t_level`` is the level's start on the monotonic clock when several processes share one level."""
    warmup, total, ramp_s = spec.warmup, spec.total, spec.ramp_s
    # prompts are made before the clock starts: making one in the loop would delay every stream meanwhile
    ready = iter([next(prompts) for _ in range(total)])
    records: list[Request] = []
    t_level = time.perf_counter() if t_level is None else t_level
    done = asyncio.Event()
    mon = _Monitor()
    server: list[ServerSample] = []
    side = [asyncio.ensure_future(mon.run(done))]
    if target.metrics_url:
        side.append(asyncio.ensure_future(scrape.sample_until(session, target.metrics_url, t_level, done, server)))
    counter = itertools.count()

    async def one(i: int, p: workload.Prompt) -> None:
        if target.api == "embeddings":
            await client.send(session, target, embed.body(target.model, p.text), t_level, records,
                              warmup=i < warmup, reader=embed.read)
            return
        await client.send(session, target, workload.body(target.api, target.model, p, target.ignore_eos, target.usage),
                          t_level, records, warmup=i < warmup)

    async def worker(k: int) -> None:
        if ramp_s > 0 and k:
            try:
                await asyncio.wait_for(stop.wait(), ramp_s * k / int(spec.load))
            except asyncio.TimeoutError:
                pass
        while not stop.is_set():
            i = next(counter)
            if i >= total:
                return
            await one(i, next(ready))

    # The cyclic garbage collector stops the loop for tens of ms once thousands of records exist; during a
    # level that pause would land in someone's ITL, so it waits for the level's end.
    gc_on = gc.isenabled()
    gc.disable()
    try:
        main: asyncio.Future[Any]  # the workers' gather, or the open-loop dispatcher
        workers: list[asyncio.Future[Any]] = []
        if spec.mode == "concurrency":
            workers = [asyncio.ensure_future(worker(k)) for k in range(int(spec.load))]
            main = asyncio.ensure_future(asyncio.gather(*workers))
        else:
            sends = spec.at_s[:total] if spec.at_s is not None else arrivals(spec.load, total, spec.burstiness,
                                                                              spec.seed, ramp_s)
            main = asyncio.ensure_future(_open_loop(one, ready, sends, t_level, stop, spec.max_concurrency))
        interrupted = await _until_done_or_stopped(main, stop)
        stopped = _fault(main, workers)
    finally:
        if gc_on:
            gc.enable()
    done.set()
    await asyncio.gather(*side, *workers, return_exceptions=True)
    chunks = sum(len(r.itl_ms) + (r.ttft_ms is not None) for r in records)
    return Level(mode=spec.mode, load=spec.load, requests=records, summary=metrics.summarize(records, slo),
                 server=server, client=mon.result(chunks), interrupted=interrupted or bool(stopped), stopped=stopped)


def _fault(main: asyncio.Future[Any], workers: list[asyncio.Future[Any]]) -> str:
    """Why the level's requests stopped being sent, when something failed that client.send does not record as
    a request's error (a fault of the client): the other workers are stopped, so that the level ends and says
    so, rather than going on at a lower concurrency or ending silently short."""
    if not main.done() or main.cancelled():
        return ""
    e = main.exception()  # a cancelled gather ends with CancelledError as its exception
    if e is None or isinstance(e, asyncio.CancelledError):
        return ""
    for w in workers:
        w.cancel()
    return client.excerpt(f"{type(e).__name__}: {e}")
