"""The typed records of a load test, from one request to a whole sweep.

A Run holds a ``LoadTest`` (``Run.loadtest``) and saves it as plain JSON (``to_builtins``); loading the
Run turns that back into these types with ``from_builtins``, which rejects a hostile or damaged file
with the path of the wrong field, so readers (report, diff, rules) never re-validate a dict.

Times are in milliseconds, offsets from the level's start in seconds. Annotations use ``Optional``
rather than ``X | None`` because msgspec evaluates them at run time on every supported Python.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Literal, Optional

import msgspec

from perfstack.errors import InputError
from perfstack.loadtest.vocabulary import Api, Mode


class Request(msgspec.Struct, omit_defaults=True):
    """One request as the client saw it."""

    start_s: float  # when it was sent, seconds after the level began
    ttft_ms: Optional[float] = None  # send -> first chunk with generated text
    e2e_ms: Optional[float] = None  # send -> end of the stream
    itl_ms: List[float] = []  # gaps between successive chunks with text, after the first
    output_tokens: int = 0
    input_tokens: Optional[int] = None  # as the server counted them (usage), else our own count
    tokens_from: Literal["usage", "chunks"] = "usage"  # the server's count, or one per chunk (approximate)
    error: str = ""  # kind: http-429, http-5xx, timeout, stall, disconnect, bad-stream, refused, interrupted
    detail: str = ""  # one line about the error, from the server or the transport
    warmup: bool = False  # excluded from every figure
    repeat: int = 0  # which run of its level (--repeat): offsets are from that run's start

    @property
    def ok(self) -> bool:
        return not self.error and self.ttft_ms is not None

    @property
    def tpot_ms(self) -> Optional[float]:
        """Time per output token after the first, vLLM's definition: (e2e - ttft) / (tokens - 1)."""
        if not self.ok or self.e2e_ms is None or self.output_tokens < 2:
            return None
        return (self.e2e_ms - (self.ttft_ms or 0.0)) / (self.output_tokens - 1)


class Dist(msgspec.Struct):
    """A latency distribution (ms)."""

    n: int
    mean: float
    median: float
    p90: float
    p99: float
    max: float
    min: float


class ServerSample(msgspec.Struct, omit_defaults=True):
    """One scrape of the server's Prometheus endpoint."""

    t_s: float
    running: Optional[float] = None
    waiting: Optional[float] = None
    kv_usage: Optional[float] = None  # fraction 0..1 of the KV cache in use
    preemptions: Optional[float] = None  # counter since the server started


class ClientLoad(msgspec.Struct):
    """How hard the client itself worked: a saturated client adds its own latency."""

    cpu_fraction: float  # process CPU seconds / wall seconds (one event loop: 1.0 is saturated)
    loop_lag_p99_ms: float  # how late a 10 ms timer fired, 99th percentile
    loop_lag_max_ms: float
    cpu_us_per_chunk: float  # client CPU per streamed chunk received
    processes: int = 1  # client processes that shared the level (figures above: the busiest one)
    cpu_wait_fraction: float = 0.0  # time spent ready to run but waiting for a CPU / wall (Linux schedstat; 0: unknown)


class Summary(msgspec.Struct, omit_defaults=True):
    """The figures of one load level, over the measured (non-warm-up) requests."""

    duration_s: float
    completed: int
    failed: int
    errors: Dict[str, int] = {}
    request_throughput: float = 0.0  # completed requests / s
    output_throughput: float = 0.0  # output tokens / s
    total_throughput: float = 0.0  # (input + output) tokens / s
    goodput: Optional[float] = None  # requests / s meeting every SLO
    slo_attainment: Optional[float] = None  # share of measured requests meeting every SLO
    ttft: Optional[Dist] = None
    tpot: Optional[Dist] = None
    itl: Optional[Dist] = None
    e2e: Optional[Dist] = None
    mean_input_tokens: Optional[float] = None
    mean_output_tokens: Optional[float] = None
    concurrency_mean: Optional[float] = None  # requests in flight, time-averaged


class Level(msgspec.Struct, omit_defaults=True):
    """One load level: its requests, their summary, and what the server said meanwhile."""

    mode: Mode  # closed loop, open loop (requests/s) or a replayed trace
    load: float  # the concurrency, or the rate (inf: all at once)
    requests: List[Request]
    summary: Summary
    server: List[ServerSample] = []
    client: Optional[ClientLoad] = None
    interrupted: bool = False
    probe: bool = False  # a rate sweep's capacity probe (everything at once): outside the knee and the SLO search
    bisect: bool = False  # added by the sweep's search for the SLO's boundary
    stopped: str = ""  # why the level ended before all its requests were answered, other than Ctrl-C (a fault)
    repeats: int = 1  # runs of this level (--repeat): the summary's figures are their medians
    ci: Dict[str, List[float]] = {}  # per figure ("output_throughput", "ttft.median"...): [low, high] across runs
    ci_coverage: Optional[float] = None  # how often such an interval holds the true median (order statistics)


class Slo(msgspec.Struct, omit_defaults=True):
    """Latency objectives a request must meet to count as good (ms); unset ones are not judged."""

    ttft_ms: Optional[float] = None
    itl_ms: Optional[float] = None  # judged on the request's mean inter-token time (TPOT)
    e2e_ms: Optional[float] = None
    attainment: float = 0.9  # a level meets the SLO when this share of its requests are good


class LoadTest(msgspec.Struct, omit_defaults=True):
    """What ``Run.loadtest`` holds."""

    url: str  # without credentials
    api: Api
    model: str
    workload: Dict[str, Any]
    levels: List[Level]
    slo: Optional[Slo] = None
    server: Dict[str, Any] = {}  # identity: models listed, version headers, metrics endpoint
    sweep: Dict[str, Any] = {}  # knee and highest load meeting the SLO, when levels were swept
    notes: List[str] = []
    interrupted: bool = False


INF = "inf"  # an infinite load (everything at once) as JSON writes it: JSON has no infinity, and Runs refuse one


def _loads_out(v: Any) -> Any:
    if isinstance(v, float) and math.isinf(v) and v > 0:
        return INF
    return [_loads_out(x) for x in v] if isinstance(v, list) else v


def _loads_in(v: Any) -> Any:
    if v == INF:
        return math.inf
    return [_loads_in(x) for x in v] if isinstance(v, list) else v


def to_builtins(lt: LoadTest) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(lt)
    for lv in out.get("levels", []):
        lv["load"] = _loads_out(lv["load"])
    out["sweep"] = {k: _loads_out(v) for k, v in out.get("sweep", {}).items()}
    return out


def from_builtins(data: Any, where: str = "Run") -> LoadTest:
    """The typed load test of a Run's ``loadtest`` section, or an InputError naming the bad field."""
    if isinstance(data, dict):
        data = dict(data)
        if isinstance(data.get("levels"), list):
            data["levels"] = [dict(lv, load=_loads_in(lv.get("load"))) if isinstance(lv, dict) and "load" in lv else lv
                              for lv in data["levels"]]
        if isinstance(data.get("sweep"), dict):
            data["sweep"] = {k: _loads_in(v) for k, v in data["sweep"].items()}
    try:
        return msgspec.convert(data, LoadTest)
    except msgspec.ValidationError as e:
        # msgspec quotes the offending value whole: a hostile Run's megabyte string is cut, the field kept
        why = str(e)
        why = why if len(why) <= 300 else why[:200] + " … " + why[-90:]
        raise InputError(f"{where}: the load test section is not valid ({why})") from None
