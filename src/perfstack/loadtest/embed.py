"""The embeddings endpoint: one unstreamed answer per request, timed whole.

An embedding has no tokens to stream: a request's latency is the time to its whole answer (recorded as
both its TTFT and its E2E, so that every latency figure and SLO reads the same), its output is no tokens,
and its work is the input tokens the server counted (``usage.prompt_tokens``). Throughput is requests
and input tokens per second. The answer is read bounded and checked: a list of vectors of numbers, one
per input, else the request fails as a bad answer.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import aiohttp
import msgspec

from perfstack.loadtest.client import Failed
from perfstack.records.loadtest import Request

PATH = "/v1/embeddings"
MAX_ANSWER = 64 << 20  # bytes: a 4096-wide float vector as JSON text is about 80 KiB


def body(model: str, text: str) -> dict[str, Any]:
    return {"model": model, "input": text, "encoding_format": "float"}


def _int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 40 else None


async def read(resp: aiohttp.ClientResponse, rec: Request, t0: float, stall_s: float, max_tokens: int) -> None:
    """Read one embeddings answer into ``rec`` (the reader ``client.send`` is given for this endpoint)."""
    enc = resp.headers.get("Content-Encoding", "identity").strip().lower()
    if enc not in ("", "identity"):
        raise Failed("bad-stream", f"a compressed answer ({enc}) though identity was asked for")
    raw = await resp.content.read(MAX_ANSWER + 1)
    now = time.perf_counter()
    if len(raw) > MAX_ANSWER:
        raise Failed("oversize", f"an answer over {MAX_ANSWER >> 20} MiB")
    try:
        data = msgspec.json.decode(raw)
    except (msgspec.DecodeError, ValueError):  # ValueError: invalid UTF-8
        raise Failed("bad-stream", "the answer is not JSON") from None
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items or not all(
            isinstance(x, dict) and isinstance(x.get("embedding"), (list, str)) and x["embedding"] for x in items):
        raise Failed("bad-stream", "the answer holds no embedding")
    rec.ttft_ms = rec.e2e_ms = (now - t0) * 1e3
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    rec.input_tokens = _int(usage.get("prompt_tokens"))
    rec.output_tokens, rec.tokens_from = 0, "usage"
