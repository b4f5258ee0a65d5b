"""The records of a load test, from one request to a whole sweep (``Run.loadtest``).

Each is a ``records.base.Record``: a loaded Run's load test is checked against the annotations once (a wrong
type is refused naming the field: ``loadtest.levels[0].requests[3].ttft_ms must be a number or null``), keys
this perfstack does not know are kept and written back, and a record a producer built writes only the fields
that differ from their default (most of a request's are unset), as the load test's Runs always have. A load
of everything at once is infinite, written ``"inf"`` (JSON has no infinity).

Times are in milliseconds, offsets from the level's start in seconds. Annotations use ``Optional`` rather than
``X | None``: the client processes of a level send their records back through msgspec, which evaluates them at
run time on every supported Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Dict, List, Literal, Optional

from perfstack.loadtest.vocabulary import Api, Mode
from perfstack.records.base import INF, Record


@dataclass
class Request(Record):
    """One request as the client saw it."""

    start_s: float  # when it was sent, seconds after the level began
    ttft_ms: Optional[float] = None  # send -> first chunk with generated text
    e2e_ms: Optional[float] = None  # send -> end of the stream
    itl_ms: List[float] = field(default_factory=list)  # gaps between successive chunks with text, after the first
    output_tokens: int = 0
    input_tokens: Optional[int] = None  # as the server counted them (usage), else our own count
    tokens_from: Literal["usage", "chunks"] = "usage"  # the server's count, or one per chunk (approximate)
    error: str = ""  # kind: http-429, http-5xx, timeout, stall, disconnect, bad-stream, refused, interrupted
    detail: str = ""  # one line about the error, from the server or the transport
    warmup: bool = False  # excluded from every figure
    repeat: int = 0  # which run of its level (--repeat): offsets are from that run's start
    extra: Dict[str, Any] = field(default_factory=dict)

    OMIT_DEFAULTS = True

    @property
    def ok(self) -> bool:
        return not self.error and self.ttft_ms is not None

    @property
    def tpot_ms(self) -> Optional[float]:
        """Time per output token after the first, vLLM's definition: (e2e - ttft) / (tokens - 1)."""
        if not self.ok or self.e2e_ms is None or self.output_tokens < 2:
            return None
        return (self.e2e_ms - (self.ttft_ms or 0.0)) / (self.output_tokens - 1)


@dataclass
class Dist(Record):
    """A latency distribution (ms)."""

    n: int
    mean: float
    median: float
    p90: float
    p99: float
    max: float
    min: float
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ServerSample(Record):
    """One scrape of the server's Prometheus endpoint."""

    t_s: float
    running: Optional[float] = None
    waiting: Optional[float] = None
    kv_usage: Optional[float] = None  # fraction 0..1 of the KV cache in use
    preemptions: Optional[float] = None  # counter since the server started
    extra: Dict[str, Any] = field(default_factory=dict)

    OMIT_DEFAULTS = True


@dataclass
class ClientLoad(Record):
    """How hard the client itself worked: a saturated client adds its own latency."""

    cpu_fraction: float  # process CPU seconds / wall seconds (one event loop: 1.0 is saturated)
    loop_lag_p99_ms: float  # how late a 10 ms timer fired, 99th percentile
    loop_lag_max_ms: float
    cpu_us_per_chunk: float  # client CPU per streamed chunk received
    processes: int = 1  # client processes that shared the level (figures above: the busiest one)
    cpu_wait_fraction: float = 0.0  # time spent ready to run but waiting for a CPU / wall (Linux schedstat; 0: unknown)
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Summary(Record):
    """The figures of one load level, over the measured (non-warm-up) requests."""

    duration_s: float
    completed: int
    failed: int
    errors: Dict[str, int] = field(default_factory=dict)
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
    extra: Dict[str, Any] = field(default_factory=dict)

    OMIT_DEFAULTS = True


@dataclass
class Level(Record):
    """One load level: its requests, their summary, and what the server said meanwhile."""

    mode: Mode  # closed loop, open loop (requests/s) or a replayed trace
    load: Annotated[float, INF]  # the concurrency, or the rate (inf: all at once)
    requests: List[Request]
    summary: Summary
    server: List[ServerSample] = field(default_factory=list)
    client: Optional[ClientLoad] = None
    interrupted: bool = False
    probe: bool = False  # a rate sweep's capacity probe (everything at once): outside the knee and the SLO search
    bisect: bool = False  # added by the sweep's search for the SLO's boundary
    stopped: str = ""  # why the level ended before all its requests were answered, other than Ctrl-C (a fault)
    repeats: int = 1  # runs of this level (--repeat): the summary's figures are their medians
    ci: Dict[str, List[float]] = field(default_factory=dict)  # per figure ("ttft.median"...): [low, high] across runs
    ci_coverage: Optional[float] = None  # how often such an interval holds the true median (order statistics)
    extra: Dict[str, Any] = field(default_factory=dict)

    OMIT_DEFAULTS = True


@dataclass
class Slo(Record):
    """Latency objectives a request must meet to count as good (ms); unset ones are not judged."""

    ttft_ms: Optional[float] = None
    itl_ms: Optional[float] = None  # judged on the request's mean inter-token time (TPOT)
    e2e_ms: Optional[float] = None
    attainment: float = 0.9  # a level meets the SLO when this share of its requests are good
    extra: Dict[str, Any] = field(default_factory=dict)

    OMIT_DEFAULTS = True


@dataclass
class LoadTest(Record):
    """What ``Run.loadtest`` holds."""

    url: str  # without credentials
    api: Api
    model: str
    workload: Dict[str, Any]
    levels: List[Level]
    slo: Optional[Slo] = None
    server: Dict[str, Any] = field(default_factory=dict)  # identity: models listed, version headers, metrics endpoint
    # knee and highest load meeting the SLO, when levels were swept (a load may be "inf", in a list too)
    sweep: Dict[str, Annotated[Any, INF]] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    interrupted: bool = False
    extra: Dict[str, Any] = field(default_factory=dict)

    OMIT_DEFAULTS = True
