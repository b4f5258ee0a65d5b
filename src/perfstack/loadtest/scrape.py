"""What the server says about itself while under load: its Prometheus endpoint, sampled.

Only the gauges that explain latency are kept — requests running and waiting, KV-cache use and
preemptions — under the names vLLM, SGLang and TGI export. Label sets (several engines or models) are
summed, except the cache share, which is averaged. A server without the endpoint is fine: the findings
then rest on latencies alone and say so.
"""

from __future__ import annotations

import asyncio
import time
from typing import Optional

import aiohttp

from perfstack.records.loadtest import ServerSample

MAX_BYTES = 4 << 20  # a metrics page beyond this is not one we can use

# sample name -> field; the first name a server exports wins
NAMES = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
}


def parse(text: str, t_s: float) -> Optional[ServerSample]:
    """One sample from a Prometheus text page, or None when it holds none of the known gauges."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, list[float]] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                values.setdefault(s.name, []).append(float(s.value))
    except (ValueError, TypeError, IndexError, KeyError):
        return None  # not a Prometheus page, or a damaged one: no evidence rather than wrong evidence
    out = ServerSample(t_s=t_s)
    found = False
    for field, names in NAMES.items():
        for name in names:
            vs = [v for v in values.get(name, ()) if v == v]
            if vs:
                setattr(out, field, sum(vs) / len(vs) if field == "kv_usage" else sum(vs))
                found = True
                break
    return out if found else None


async def fetch(session: aiohttp.ClientSession, url: str, t_level: float) -> Optional[ServerSample]:
    try:
        # identity: the session does not inflate (load.new_session), and a Prometheus page gzips when asked
        async with session.get(url, headers={"Accept-Encoding": "identity"}, timeout=aiohttp.ClientTimeout(total=5)) as resp:
            if resp.status != 200:
                return None
            raw = await resp.content.read(MAX_BYTES + 1)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return None
    if len(raw) > MAX_BYTES:
        return None
    return parse(raw.decode("utf-8", "replace"), time.perf_counter() - t_level)


async def sample_until(session: aiohttp.ClientSession, url: str, t_level: float, stop: asyncio.Event,
                       out: list[ServerSample], every_s: float = 1.0) -> None:
    """Scrape every ``every_s`` seconds until ``stop`` is set."""
    while not stop.is_set():
        s = await fetch(session, url, t_level)
        if s is not None:
            out.append(s)
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except asyncio.TimeoutError:
            pass
