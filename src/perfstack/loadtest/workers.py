"""One load level over several client processes, for loads one event loop cannot read on time.

A single loop reads every chunk of every stream one after another; when a server step emits a chunk for a
thousand streams at once, the last stream read is late by the whole burst. Split over processes, each
reads its share of the burst in parallel. Streams (closed loop) or the rate (open loop, Poisson only: the
sum of independent Poisson arrivals is Poisson at the summed rate, which is not true of burstier gamma
arrivals) are divided between processes; each gets its own slice of the prompts and sends on the same
monotonic clock, so the merged records read as one level. Only the first process scrapes the server.
Ctrl-C reaches the parent, which tells the processes through a shared event; each ends its part as a
single-process level would.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any, Iterator, Optional

import aiohttp
import msgspec

from perfstack.loadtest import client, load, metrics, workload
from perfstack.loadtest.client import Target
from perfstack.records.loadtest import ClientLoad, Level, Slo
from perfstack.loadtest.vocabulary import Mode

STREAMS_PER_PROCESS = 100  # a burst of this many chunks is stamped within ~1 ms by one loop (docs/loadtest.md)


def auto_procs(mode: Mode, load_: float, cpus: int) -> int:
    """Processes for a level: one per STREAMS_PER_PROCESS streams, at most one per CPU but one."""
    if mode != "concurrency" or math.isinf(load_):
        return 1
    return max(1, min(math.ceil(load_ / STREAMS_PER_PROCESS), cpus - 1))


def split(total: int, parts: int) -> list[int]:
    q, r = divmod(total, parts)
    return [q + (i < r) for i in range(parts)]


_STOP: Any = None  # in a worker process: the parent's stop event, handed over when the process starts
_START: Any = None  # and the barrier every process of the level reaches before it sends its first request
# Starting a process (spawn: a new interpreter importing aiohttp and perfstack) takes from a fraction of a
# second to several on a busy host; without a common start the first processes' requests would run at a
# fraction of the level's concurrency. A process that waits longer than this starts anyway.
START_TIMEOUT_S = 120.0


def _init(stop: Any, start: Any = None) -> None:
    global _STOP, _START
    _STOP, _START = stop, start
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and tells us through the event


def _child(args: tuple[Target, list[workload.Prompt], load.LevelSpec, float]) -> bytes:
    target, prompts, spec, t_level = args
    stop_flag = _STOP

    async def main() -> Level:
        stop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                if stop_flag.is_set():
                    stop.set()
                await asyncio.sleep(0.05)
        w = asyncio.ensure_future(watch())
        try:
            async with load.new_session() as session:
                start = t_level
                if _START is not None:
                    try:
                        await asyncio.get_running_loop().run_in_executor(None, _START.wait, START_TIMEOUT_S)
                    except threading.BrokenBarrierError:
                        pass  # another process did not come up in time: start, as a single process would
                    # The level starts when the barrier lets every process go (the same monotonic clock in all
                    # of them: the release reaches them within a fraction of a millisecond of each other).
                    start = time.perf_counter()
                return await load.run_level(session, target, iter(prompts), spec, stop, t_level=start)
        finally:
            stop.set()
            await asyncio.gather(w, return_exceptions=True)

    loop = load.event_loop()
    try:
        # msgspec packs and unpacks the records (dataclasses) in C: a level of 100,000 requests crosses in about
        # a second, several times faster than pickle or the records' own JSON form
        return msgspec.msgpack.encode(loop.run_until_complete(main()))
    finally:
        loop.close()


async def run_level(session: aiohttp.ClientSession, target: Target, prompts: Iterator[workload.Prompt],
                    spec: load.LevelSpec, stop: asyncio.Event, slo: Optional[Slo] = None, procs: int = 1) -> Level:
    # a ramp or a replayed trace is one timeline: one process keeps it
    if (procs <= 1 or spec.max_concurrency or (spec.mode == "rate" and spec.burstiness != 1.0) or spec.ramp_s > 0
            or spec.at_s is not None):
        return await load.run_level(session, target, prompts, spec, stop, slo=slo)
    procs, loads, warm, ns = _shares(spec.mode, spec.load, spec.n, spec.warmup, procs)
    flat = [next(prompts) for _ in range(spec.total)]
    ctx = multiprocessing.get_context("spawn")
    flag, start = ctx.Event(), ctx.Barrier(procs)
    t_level = time.perf_counter()
    jobs, at = [], 0
    for i in range(procs):
        take = ns[i] + warm[i]
        # each process its share of the level, its own slice of the prompts and its own arrivals' seed
        share = replace(spec, load=loads[i], n=ns[i], warmup=warm[i], seed=spec.seed * 1000 + i)
        jobs.append((replace(target, metrics_url=target.metrics_url if i == 0 else None), flat[at:at + take], share,
                     t_level))
        at += take
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(max_workers=procs, mp_context=ctx, initializer=_init, initargs=(flag, start)) as ex:
        futs = [loop.run_in_executor(ex, _child, j) for j in jobs]
        waiter = asyncio.ensure_future(stop.wait())
        gathered = asyncio.ensure_future(asyncio.gather(*futs, return_exceptions=True))
        await asyncio.wait((waiter, gathered), return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            flag.set()
        results = await gathered
        waiter.cancel()
    # a process that failed costs its share, not the level: the others' records are kept, and the level says so
    parts, faults = [], []
    for res in results:
        if isinstance(res, BaseException):
            faults.append(f"a client process failed: {type(res).__name__}: {res}")
        else:
            parts.append(msgspec.msgpack.decode(res, type=Level))
    faults += [p.stopped for p in parts if p.stopped]
    records = [r for p in parts for r in p.requests]
    stopped = client.excerpt("; ".join(faults)) if faults else ""
    return Level(mode=spec.mode, load=spec.load, requests=records, summary=metrics.summarize(records, slo),
                 server=parts[0].server if parts else [], client=_client_load(parts, procs),
                 interrupted=any(p.interrupted for p in parts) or bool(stopped), stopped=stopped)


def _shares(mode: Mode, load_: float, n: int, warmup: int, procs: int) -> tuple[int, list[float], list[int], list[int]]:
    """Each process's part of a level: (processes, load, warm-up requests, measured requests) — streams
    split as evenly as whole numbers allow (never more processes than streams), a rate split equally."""
    if mode == "concurrency":
        procs = min(procs, int(load_))
        loads = [float(x) for x in split(int(load_), procs)]
    else:
        loads = [load_ / procs] * procs
    # the level's warm-up as asked (one wave by default, split as the streams are): each process takes its
    # warm-up requests from its own slice of the prompts, so the shares must add up to what was made
    return procs, loads, split(warmup, procs), split(n, procs)


def _client_load(parts: list[Level], procs: int) -> ClientLoad | None:
    """The client processes' own load as one: the worst process's CPU, loop lag and CPU wait, and the CPU
    per chunk over all of them."""
    clients = [p.client for p in parts if p.client is not None]
    if not clients:
        return None

    def chunks(p: Level) -> int:
        return sum(len(r.itl_ms) + (r.ttft_ms is not None) for r in p.requests)
    cpu_us = sum(c.cpu_us_per_chunk * chunks(p) for p, c in zip(parts, clients))
    return ClientLoad(cpu_fraction=max(c.cpu_fraction for c in clients),
                      loop_lag_p99_ms=max(c.loop_lag_p99_ms for c in clients),
                      loop_lag_max_ms=max(c.loop_lag_max_ms for c in clients),
                      cpu_us_per_chunk=cpu_us / max(sum(map(chunks, parts)), 1), processes=procs,
                      cpu_wait_fraction=max(c.cpu_wait_fraction for c in clients))
