"""Why the server misses its SLO: pure functions of a load test to findings, with evidence and the fix.

Each rule reads the request records (and the server's own gauges when it exported them) of the level
where the question is sharpest: the first level that misses the SLO, else the heaviest level. What a
rule cannot see it does not guess: without a light level there is no unqueued TTFT to compare with,
without /metrics no cause for a plateau beyond the latencies themselves.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import Callable, Optional

from perfstack.checks import FAMILIES, SERVING, register
from perfstack.loadtest import metrics, sweep
from perfstack.records.loadtest import Level, LoadTest, Request
from perfstack.model import Finding, Severity

LAYER = SERVING
QUEUE_SHARE = 0.5  # queueing is the story when it is most of TTFT
SATURATED = 0.6  # a stream gets under this share of its lone token rate: requests wait for each other
SPIKE = 3.0  # an ITL gap this many times the median is a spike
PREFILL_LINK = 0.2  # spikes overlap other requests' prefills this much more often than ordinary gaps
BOUND_LOW = 0.5  # decode slower than twice what an engine-grade decode of the model takes (estimate infer)
CLIENT_CPU = 0.85
CLIENT_LAG_MS = 5.0
CLIENT_WAIT = 0.05  # share of the level a client process spent runnable but without a CPU
ERROR_SHARE = 0.01
# where the checks' knowledge comes from (perfstack explain serve-...)
METRICS_REFS = ("vLLM's serving benchmark (benchmark_serving: TTFT, TPOT, ITL, goodput), whose definitions the load "
                "test follows")
TUNING_REFS = "vLLM docs, Optimization and Tuning (chunked prefill, preemption, --max-num-seqs, --max-num-batched-tokens)"


@dataclass(frozen=True)
class Bound:
    """The decode step's lower bound for the served model on its GPU (``estimate infer``)."""

    itl_ms: Callable[[int, int, int], float]  # (batch, prompt tokens, generated tokens) -> ms
    what: str  # "Llama-3.2-1B bf16 on H100 SXM (3.35 TB/s)"


def _label(lv: Level) -> str:
    if lv.mode == "concurrency":
        return f"{lv.load:g} concurrent streams"
    if lv.mode == "trace":
        return f"the trace at {lv.load:g}× its speed"
    return "all requests at once" if lv.load == float("inf") else f"{lv.load:g} requests/s"


def judged(lt: LoadTest) -> Optional[Level]:
    """The level a single-verdict rule looks at."""
    levels = [lv for lv in sorted(lt.levels, key=lambda lv: lv.load) if lv.summary.completed and not lv.probe]
    if not levels:
        return None
    if lt.slo is not None:
        for lv in levels:
            if not metrics.meets(lv.summary, lt.slo):
                return lv
    return max(levels, key=lambda lv: (lv.load, lv.summary.output_throughput))


def lightest(lt: LoadTest) -> Optional[Level]:
    levels = [lv for lv in lt.levels if lv.summary.ttft is not None and not lv.probe]
    return min(levels, key=lambda lv: lv.load) if levels else None


def _mean(vals: list[Optional[float]]) -> Optional[float]:
    v = [x for x in vals if x is not None]
    return sum(v) / len(v) if v else None


def _why(id: str) -> str:
    """The registered why of the check ``id``: written once, where ``perfstack explain`` reads it too."""
    return " ".join(FAMILIES["loadtest"][id].why.split())


def _fix(id: str) -> str:
    """The registered general fix of the check ``id``, on one line (a finding with a fix of its own names it)."""
    return " ".join(FAMILIES["loadtest"][id].fix.split())


@register("loadtest", "serve-slo-missed", LAYER, "SLO missed", severity="warning",
          doc="""Reads the first level of the sweep whose requests, taken together, miss the SLO given with --slo
          (TTFT, TPOT and E2E at p90, and the share of requests that must meet them); fires when one does, naming
          each figure over its target and the highest load tried that meets it.""",
          why="""A request that misses its latency objective is a user who waited too long; goodput counts only the
          ones that did not.""",
          fix="""see the other serve-* findings for the cause; meanwhile keep the load at or below the highest level
          that meets the SLO""",
          refs=METRICS_REFS)
def slo_missed(lt: LoadTest) -> Optional[Finding]:
    if lt.slo is None:
        return None
    lv = judged(lt)
    if lv is None or metrics.meets(lv.summary, lt.slo):
        return None
    s, slo = lv.summary, lt.slo
    parts = []
    checks = (("TTFT", slo.ttft_ms, s.ttft), ("TPOT", slo.itl_ms, s.tpot), ("E2E", slo.e2e_ms, s.e2e))
    for name, target, d in checks:
        if target is not None and d is not None:
            parts.append(f"{name} p90 {d.p90:,.0f} ms vs {target:,.0f} ms" + (" ✗" if d.p90 > target else ""))
    best = lt.sweep.get("max_load_meeting_slo")
    where = f"; the highest load tried that meets it: {best:g}" if isinstance(best, (int, float)) else ""
    return Finding(
        id="serve-slo-missed", layer=LAYER, severity=Severity.WARNING, subject=_label(lv),
        title=f"SLO missed at {_label(lv)}",
        evidence=f"{(s.slo_attainment or 0):.0%} of requests met the SLO (target {slo.attainment:.0%}); "
                 + "; ".join(parts) + where,
        fix="see the findings below for the cause; meanwhile keep the load at or below the highest level that "
            "meets the SLO",
        why=_why("serve-slo-missed"))


def _per_stream(lv: Level) -> float:
    """Output tokens per second per request in flight: falls once streams wait for each other."""
    conc = lv.summary.concurrency_mean or (lv.load if lv.mode == "concurrency" else 0.0)
    return lv.summary.output_throughput / conc if conc else 0.0


def _host_busy(lv: Level) -> bool:
    c = lv.client
    return c is not None and (c.cpu_wait_fraction > CLIENT_WAIT or c.loop_lag_p99_ms > CLIENT_LAG_MS)


@register("loadtest", "serve-queueing", LAYER, "Time to first token is mostly queueing", severity="warning",
          doc="""Compares the median TTFT of the judged level (the first that misses the SLO, else the heaviest) with
          the lightest level's, or with the fastest at that level; fires when at least half of it is waiting, and
          the waiting is shown by the server's own count of waiting requests or by a TTFT that grew from a lighter
          level on a client host that was not itself busy. It says the server is saturated only where each
          stream's token rate fell well under what it got alone (or the server counted waiting requests), never
          below a knee the sweep did not reach. Warning when the TTFT misses its SLO or waiting is over 80% of it,
          else info.""",
          why="""Past saturation a request's first token waits for a free batch slot, so latency grows with the
          queue while throughput stays flat; below the knee, a first token that waits longer as load grows is
          latency bought for throughput.""",
          fix="""saturated: more replicas (or GPUs), or let each replica batch more (vLLM --max-num-seqs and
          --max-num-batched-tokens, SGLang --max-running-requests) where KV-cache room allows; not yet saturated:
          chunked prefill or a larger per-step token budget shortens the wait""",
          refs=TUNING_REFS)
def queueing(lt: LoadTest) -> Optional[Finding]:
    """TTFT mostly spent waiting. Waiting needs evidence of a queue: the server's own count of waiting
    requests, or a TTFT that grew from a lighter level. One level alone, without the server's count, shows
    no queue (a slow host, or a server whose TTFT varies, spreads TTFT as much), and a client that waited
    for its own CPU cannot tell growth from its own lateness, so then only the server's count stands. The
    finding says "saturated" only where throughput was seen to flatten, never below a knee the sweep did
    not reach."""
    lv, base = judged(lt), lightest(lt)
    if lv is None or lv.summary.ttft is None:
        return None
    t = lv.summary.ttft.median
    waiting = _mean([x.waiting for x in lv.server])
    server_queue = (waiting or 0) >= 1
    if base is not None and base is not lv and base.summary.ttft is not None:
        floor, floor_what = base.summary.ttft.median, f"{base.summary.ttft.median:,.0f} ms at {_label(base)}"
        # saturated: each stream now gets well under what it got alone (or the server says requests wait)
        b = _per_stream(base)
        efficiency = _per_stream(lv) / b if b else 1.0
        saturated = efficiency < SATURATED or server_queue
        sat_ev = f"; each stream got {efficiency:.0%} of the token rate it got at {_label(base)}"
        grew = not (_host_busy(lv) or _host_busy(base))
    else:
        floor, floor_what = lv.summary.ttft.min, f"{lv.summary.ttft.min:,.0f} ms, the fastest at this load"
        saturated, sat_ev, grew = server_queue, "", False
    share = (t - floor) / t if t > 0 else 0.0
    if not (server_queue or grew) or share < QUEUE_SHARE or t - floor < 20:
        return None
    if "knee_not_reached" in lt.sweep:
        saturated = False  # throughput still grew at the heaviest load tried
    elif not saturated:
        return None  # waiting that grew, without a sign the server is full nor a sweep to say it is not
    ev = (f"median TTFT {t:,.0f} ms at {_label(lv)} vs {floor_what}: {share:.0%} of the time to first token is "
          "spent waiting, not computing" + sat_ev)
    if waiting is not None:
        ev += f"; the server reported {waiting:.1f} requests waiting on average"
    if not saturated and "knee_not_reached" in lt.sweep:
        ev += f"; throughput still grew up to the heaviest load tried (knee not reached: {lt.sweep['knee_not_reached']})"
    knee = lt.sweep.get("knee")
    missed = lt.slo is not None and lt.slo.ttft_ms is not None and t > lt.slo.ttft_ms
    if saturated:
        title = "Time to first token is mostly queueing: the server is saturated at this load"
        fix = ("serve this load on more replicas (or GPUs), or let each replica batch more (vLLM --max-num-seqs and "
               "--max-num-batched-tokens, SGLang --max-running-requests) where KV-cache room allows"
               + (f"; one replica saturates near {knee:g}" if isinstance(knee, (int, float)) else ""))
        why = ("Past saturation a request's first token waits for a free batch slot; latency then grows with the "
               "queue while throughput stays flat.")
    else:
        title = "Time to first token is mostly waiting at this load, though throughput still grows"
        fix = ("the server is not saturated yet: each request's first token waits for the others' work (prefills "
               "sharing a step, a scheduler that admits late); chunked prefill or a larger per-step token budget "
               "(vLLM --max-num-batched-tokens) shortens it; more replicas only if the latency matters more than "
               "the throughput still to gain")
        why = ("A first token that waits longer as load grows is latency bought for throughput; below the knee "
               "that trade still pays.")
    return Finding(
        id="serve-queueing", layer=LAYER, severity=Severity.WARNING if missed or share > 0.8 else Severity.INFO,
        subject=_label(lv), title=title, evidence=ev, fix=fix, why=why)


def _prefills(reqs: list[Request]) -> tuple[list[float], list[float]]:
    """Prefill intervals (send -> first token, s) sorted by start, with the running maximum of their ends."""
    iv = sorted((r.start_s, r.start_s + (r.ttft_ms or 0) / 1e3) for r in reqs if r.ok)
    starts, ends, m = [], [], float("-inf")
    for a, b in iv:
        m = max(m, b)
        starts.append(a)
        ends.append(m)
    return starts, ends


def _overlaps(starts: list[float], ends: list[float], a: float, b: float) -> bool:
    i = bisect.bisect_left(starts, b) - 1
    return i >= 0 and ends[i] > a


@register("loadtest", "serve-prefill-stalls", LAYER, "Token streams stall while other requests are prefilled",
          severity="warning",
          doc=f"""Reads the inter-token gaps of the judged level (at least 50); where the ITL p99 is over {SPIKE:g}x
          the median, counts how many of the gaps over {SPIKE:g}x the median overlap another request's prefill
          (its send to its first token), against windows of the same lengths placed at random over the level
          (seeded, so a Run gives one verdict); fires when spikes overlap prefills {PREFILL_LINK * 100:.0f} percentage
          points more often than chance.""",
          why="""A prefill of a long prompt occupies the GPU for a whole batch step; every running stream waits for
          it, which shows as inter-token spikes and a long ITL tail.""",
          fix="""split long prefills so decodes keep running between their chunks: vLLM --enable-chunked-prefill with
          --max-num-batched-tokens 2048-8192, SGLang --chunked-prefill-size, TGI --max-batch-prefill-tokens; at
          scale, separate prefill and decode workers""",
          refs=TUNING_REFS)
def prefill_stalls(lt: LoadTest) -> Optional[Finding]:
    lv = judged(lt)
    if lv is None or lv.summary.itl is None or lv.summary.itl.n < 50:
        return None
    med, p99 = lv.summary.itl.median, lv.summary.itl.p99
    if med <= 0 or p99 < SPIKE * med:
        return None
    # one run's timeline: the runs of a repeated level each count time from their own start
    reqs = [r for r in metrics.runs(lv.requests)[0] if r.ok and not r.warmup]
    starts, ends = _prefills(reqs)
    spikes: list[tuple[float, float]] = []
    for r in reqs:
        t = r.start_s + (r.ttft_ms or 0) / 1e3
        for g in r.itl_ms:
            if g >= SPIKE * med:
                spikes.append((t, g / 1e3))
            t += g / 1e3
    if len(spikes) < 5:
        return None
    # A long gap overlaps some prefill more often by its length alone; so each spike is compared with
    # the same-length windows placed at random over the level (seeded: the same Run, the same verdict).
    rng = random.Random(len(spikes))
    lo = min(r.start_s for r in reqs)
    hi = max(r.start_s + (r.e2e_ms or 0) / 1e3 for r in reqs)
    sample = spikes if len(spikes) <= 2000 else rng.sample(spikes, 2000)
    hits = sum(_overlaps(starts, ends, a, a + g) for a, g in sample)
    chance = sum(_overlaps(starts, ends, x, x + g) for _, g in sample
                 for x in (rng.uniform(lo, max(lo, hi - g)) for _ in range(20))) / (20 * len(sample))
    spike_share = hits / len(sample)
    if spike_share < chance + PREFILL_LINK:
        return None
    return Finding(
        id="serve-prefill-stalls", layer=LAYER, severity=Severity.WARNING, subject=_label(lv),
        title="Token streams stall while other requests are prefilled",
        evidence=f"ITL p99 {p99:,.1f} ms is {p99 / med:.1f}× the median {med:,.1f} ms at {_label(lv)}; "
                 f"{spike_share:.0%} of the {len(spikes):,} gaps over {SPIKE:g}× the median overlap another request's "
                 f"prefill, against {chance:.0%} for windows of the same length placed at random",
        fix=_fix("serve-prefill-stalls"),
        why=_why("serve-prefill-stalls"))


def _median_e2e(lv: Level) -> Optional[float]:
    return lv.summary.e2e.median if lv.summary.e2e else None


def _plateau_cause(levels: list[Level], after: list[Level]) -> tuple[str, str, str]:
    """Why the batch stopped growing, from the server's gauges: (cause, evidence to add, fix)."""
    running = [x.running for lv in levels for x in lv.server if x.running is not None]
    kv = [x.kv_usage for lv in after for x in lv.server if x.kv_usage is not None]
    pre = [x.preemptions for lv in levels for x in lv.server if x.preemptions is not None]
    cause, ev = "the batch stops growing", ""
    fix = ("raise the server's batch limit (vLLM --max-num-seqs, SGLang --max-running-requests) if KV-cache room "
           "allows; otherwise more GPUs or replicas")
    if kv and max(kv) >= 0.9:
        cause = "the KV cache is full"
        ev += f"; KV-cache use peaked at {max(kv):.0%}"
        fix = ("give the KV cache more room: a higher --gpu-memory-utilization, an FP8 KV cache (--kv-cache-dtype "
               "fp8), a shorter --max-model-len, or tensor parallelism over more GPUs")
    elif running:
        cap = max(running)
        ev += f"; at most {cap:.0f} requests ran at once"
        cause = f"the batch is capped at about {cap:.0f} sequences"
    if pre and max(pre) - min(pre) > 0:
        ev += f"; {max(pre) - min(pre):.0f} preemptions (requests evicted and recomputed)"
    return cause, ev, fix


@register("loadtest", "serve-throughput-plateau", LAYER, "Throughput flat past the knee while latency grows",
          severity="info",
          doc="""Reads a concurrency sweep of three levels or more: past its knee, fires when output throughput gained
          15% or less while the median E2E latency grew 1.5x or more. With the server's /metrics it names the
          cause: a full KV cache (use at 90% or more), or the most requests that ran at once, and counts
          preemptions.""",
          why="""Past the knee, extra load only lengthens the queue; the batch the GPU runs each step no longer grows,
          so the per-step cost is not spread over more tokens.""",
          fix="""raise the server's batch limit (vLLM --max-num-seqs, SGLang --max-running-requests) if KV-cache
          room allows; with a full KV cache give it more room (a higher --gpu-memory-utilization, an FP8 KV cache,
          a shorter --max-model-len, tensor parallelism); otherwise more GPUs or replicas""",
          refs=TUNING_REFS)
def plateau(lt: LoadTest) -> Optional[Finding]:
    levels = sweep.candidates([lv for lv in lt.levels if lv.mode == "concurrency"])
    k = sweep.knee(levels) if len(levels) >= 3 else None
    if k is None:
        return None
    after = [lv for lv in levels if lv.load > k.load]
    if not after:
        return None
    last = after[-1]
    gain = last.summary.output_throughput / max(k.summary.output_throughput, 1e-9) - 1
    lat_k, lat_last = _median_e2e(k), _median_e2e(last)
    if lat_k is None or lat_last is None or gain > 0.15 or lat_last < 1.5 * lat_k:
        return None
    ev = (f"output throughput {k.summary.output_throughput:,.0f} tok/s at {_label(k)} and "
          f"{last.summary.output_throughput:,.0f} at {_label(last)} ({gain:+.0%}) while median E2E latency went "
          f"from {lat_k:,.0f} to {lat_last:,.0f} ms")
    cause, more, fix = _plateau_cause(levels, after)
    return Finding(
        id="serve-throughput-plateau", layer=LAYER, severity=Severity.INFO, subject=_label(last),
        title=f"Throughput flat past {_label(k)} while latency grows: {cause}",
        evidence=ev + more, fix=fix,
        why=_why("serve-throughput-plateau"))


@register("loadtest", "serve-decode-below-bound", LAYER, "Decode runs below an engine-grade decode's speed",
          severity="warning",
          doc="""Given the served model and GPU (--model-config and --gpu), compares the median time per output
          token of the lightest level with what an engine-grade decode of that batch takes (perfstack estimate
          infer: weights and KV cache read at 90% of the memory bandwidth, plus each kernel's fixed cost); fires
          under half that speed, warning under a quarter.""",
          why="""A decode step must read the weights and the KV cache once, and each of its kernels has a fixed cost
          of a few microseconds; an engine that replays the step as a CUDA graph pays little else.""",
          fix="""serve with an engine that captures decode in CUDA graphs and fuses attention (vLLM, SGLang,
          TensorRT-LLM), check the server is not running eager Python per token, and profile one decode step
          (perfstack profile)""",
          refs="perfstack estimate infer (the decode bound and its working); NVIDIA CUDA Programming Guide, CUDA Graphs")
def decode_bound(lt: LoadTest, bound: Optional[Bound]) -> Optional[Finding]:
    if bound is None:
        return None
    lv = lightest(lt)
    if lv is None or lv.summary.tpot is None or not lv.summary.mean_output_tokens:
        return None
    batch = max(1, round(lv.summary.concurrency_mean or lv.load))
    prompt = round(lv.summary.mean_input_tokens or lt.workload.get("input_len") or 128)
    gen = max(2, round(lv.summary.mean_output_tokens))
    try:
        b = bound.itl_ms(batch, prompt, gen)
    except Exception as e:  # noqa: BLE001 — the estimate's own input checks; no bound is no finding
        lt.notes.append(f"decode bound not computed: {e}")
        return None
    got = lv.summary.tpot.median
    frac = b / got if got > 0 else 0.0
    if frac >= BOUND_LOW:
        return None
    return Finding(
        id="serve-decode-below-bound", layer=LAYER,
        severity=Severity.WARNING if frac < 0.25 else Severity.INFO, subject=_label(lv),
        title=f"Decode runs at {frac:.0%} of an engine-grade decode's speed",
        evidence=f"median time per output token {got:,.2f} ms at {_label(lv)} (batch ≈{batch}, {prompt} prompt + "
                 f"{gen} generated tokens) vs {b:,.2f} ms expected of an engine-grade decode (CUDA graphs, "
                 f"static cache; weights and KV at 90% of the bandwidth plus each kernel's fixed cost) for "
                 f"{bound.what}",
        fix="the per-token time is spent outside the GPU's memory traffic: serve with an engine that captures "
            "decode in CUDA graphs and fuses attention (vLLM, SGLang, TensorRT-LLM), check the server is not "
            "running eager Python per token, and profile one decode step (perfstack profile)",
        why="A decode step must read the weights and the KV cache once, and each of its kernels has a fixed cost "
            "of a few microseconds; an engine that replays the step as a CUDA graph pays little else "
            "(perfstack estimate infer shows the working).")


@register("loadtest", "serve-errors", LAYER, "Requests failed", severity="critical",
          doc="""Counts the failed requests of every level by kind (HTTP status, timeout, stall, disconnect; an
          interrupted run's unfinished requests are not failures); fires when at least 1% failed, critical over
          10%, and quotes one failure of the worst level.""",
          why="""A failed request is a user without an answer, and it leaves every latency figure looking better than
          the service was.""",
          fix="""by kind: HTTP 429, raise the server's queue/batch limits or add replicas; timeouts and stalls, the
          server is past saturation or hung; 5xx and disconnects, read its log for out-of-memory errors and
          crashes and lower the load""",
          refs=METRICS_REFS)
def errors(lt: LoadTest) -> Optional[Finding]:
    tot: dict[str, int] = {}
    n = 0
    worst: Optional[Level] = None
    for lv in lt.levels:
        s = lv.summary
        n += s.completed + s.failed
        for k, v in s.errors.items():
            if k != "interrupted":
                tot[k] = tot.get(k, 0) + v
        if s.failed and (worst is None or s.failed > worst.summary.failed):
            worst = lv
    failed = sum(tot.values())
    if not failed or failed / max(n, 1) < ERROR_SHARE or worst is None:
        return None
    kinds = ", ".join(f"{v} {k}" for k, v in sorted(tot.items(), key=lambda kv: -kv[1]))
    sample = next((r.detail for r in worst.requests if r.error and r.error != "interrupted" and r.detail), "")
    fix = "read the server's log around the failures"
    if "http-429" in tot:
        fix = "the server refuses work it cannot queue: raise its queue/batch limits or add replicas"
    elif {"timeout", "stall"} & tot.keys():
        fix = "requests outlive the timeout at this load: the server is past saturation (see queueing) or hung"
    elif "http-5xx" in tot or "disconnect" in tot:
        fix = "the server fails under load: check its log for out-of-memory errors and crashes; lower the load"
    return Finding(
        id="serve-errors", layer=LAYER, severity=Severity.CRITICAL if failed / n > 0.1 else Severity.WARNING,
        subject=_label(worst),
        title=f"{failed} of {n} requests failed",
        evidence=f"{kinds}; most at {_label(worst)}" + (f"; e.g. {sample}" if sample else ""),
        fix=fix,
        why=_why("serve-errors"))


@register("loadtest", "serve-client-host-busy", LAYER, "The client's host was busy", severity="info",
          doc=f"""Reads the same gauges as serve-client-saturated; fires when the client's timers fired over
          {CLIENT_LAG_MS:g} ms late (p99) or its processes waited for a CPU over {CLIENT_WAIT:.0%} of the level
          while the client itself was mostly idle: other processes held the host's cores.""",
          why="TTFT and ITL are timed when the client's event loop gets to read the stream.",
          fix="run the load client on a host (or cores, with taskset) that the server does not use",
          refs=METRICS_REFS)
@register("loadtest", "serve-client-saturated", LAYER, "The load client was saturated", severity="warning",
          doc=f"""Reads the client's own gauges at each level: its CPU use, how late its event loop's timers fired, and
          how long its processes waited for a CPU; fires when the client used over {CLIENT_CPU:.0%} of its core,
          naming the client CPU spent per streamed chunk.""",
          why="TTFT and ITL are timed when the client reads the stream; a client that is busy reads late.",
          fix="""run the load from a host with a free core per client process, split the load over several client
          processes, or lower the concurrency""",
          refs=METRICS_REFS)
def client_saturated(lt: LoadTest) -> Optional[Finding]:
    hot = [lv for lv in lt.levels if lv.client and (lv.client.cpu_fraction > CLIENT_CPU
                                                    or lv.client.loop_lag_p99_ms > CLIENT_LAG_MS
                                                    or lv.client.cpu_wait_fraction > CLIENT_WAIT)]
    if not hot:
        return None
    lv = max(hot, key=lambda x: x.client.loop_lag_p99_ms if x.client else 0)
    c = lv.client
    assert c is not None
    ev = (f"at {_label(lv)} the client used {c.cpu_fraction:.0%} of its one core and its timers fired up to "
          f"{c.loop_lag_p99_ms:.1f} ms late (p99; max {c.loop_lag_max_ms:.1f} ms)")
    if c.cpu_wait_fraction > 0.005:
        ev += f"; a client process was ready to run but waiting for a CPU {c.cpu_wait_fraction:.1%} of the time"
    if c.cpu_fraction > CLIENT_CPU:
        return Finding(
            id="serve-client-saturated", layer=LAYER, severity=Severity.WARNING, subject=_label(lv),
            title="The load client was saturated: its own delays are in the figures",
            evidence=ev + f"; {c.cpu_us_per_chunk:.0f} µs of client CPU per streamed chunk",
            fix=_fix("serve-client-saturated"),
            why=_why("serve-client-saturated"))
    # late timers with an idle client: something else holds the host's cores
    return Finding(
        id="serve-client-host-busy", layer=LAYER, severity=Severity.INFO, subject=_label(lv),
        title="The client's host was busy: latencies may read late by up to its timer delay",
        evidence=ev + ", while the client itself was mostly idle: other processes (the server itself, if it runs "
                      "on this host) held the CPUs",
        fix=_fix("serve-client-host-busy"),
        why=_why("serve-client-host-busy"))


def findings(lt: LoadTest, bound: Optional[Bound] = None) -> list[Finding]:
    out = [f for f in (errors(lt), client_saturated(lt), slo_missed(lt), queueing(lt), prefill_stalls(lt),
                       plateau(lt), decode_bound(lt, bound)) if f is not None]
    return sorted(out, key=lambda f: -f.severity.rank)
