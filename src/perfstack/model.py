"""The Run record and the pieces it is made of.

Every command produces a Run; reports and diffs are functions of Runs. A Run saves to JSON
and loads back losslessly. Bump SCHEMA_VERSION whenever the shape of the JSON changes.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Literal, Mapping

from perfstack.errors import InputError
from perfstack.records.base import Record, convert, hints_of, show
from perfstack.records.meta import RunMeta
from perfstack.severity import Severity as Severity  # re-exported: the code names it from model

if TYPE_CHECKING:  # each section's records are imported when a Run holds one
    from perfstack.records.estimates import Estimates
    from perfstack.records.fleet import FleetAnalysis
    from perfstack.records.loadtest import LoadTest
    from perfstack.records.profile import Section
    from perfstack.records.trial import Trial

# 2: profile findings carry a confidence (Finding.confidence) and their what-ifs a fast-CPU figure
SCHEMA_VERSION = 2


# Stack layers, bottom-up: the order the doctor reports in and the order a user should fix in.
LAYERS: dict[str, str] = {
    "kernel": "Kernel / OS",
    "driver": "Driver & GPU health",
    "pcie-topology": "PCIe / topology / NUMA",
    "compiler-runtime": "Compiler / runtime",
    "mathlib-nccl": "Math libraries & NCCL",
    "allocator": "Allocator",
    "framework": "Framework",
    "container-orch": "Containers / cgroups",
    "storage": "Storage",
    "network": "Network",
}


def layer_rank(layer: str) -> int:
    return list(LAYERS).index(layer)


@dataclass(frozen=True)
class Fact:
    """One thing read from the machine, or the reason it could not be read.

    ``value`` is JSON-able. When ``available`` is False the value is None and ``reason``
    says why (file absent, permission denied, command timed out, ...).
    """

    key: str
    value: Any
    source: str = ""
    available: bool = True
    reason: str = ""

    @classmethod
    def missing(cls, key: str, reason: str, source: str = "") -> "Fact":
        return cls(key, None, source, False, reason)


class NotChecked(Exception):
    """Raised inside a rule when a fact it needs is unavailable."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotApplicable(Exception):
    """Raised inside a rule when the check does not apply to this machine (no GPU, one node)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _fact(key: str, d: Any) -> Fact:
    """A fact of a loaded Run, checked against ``Fact``'s annotations by the records' own checks. Strict: a key
    that is no field of a fact is refused (a fact is one reading, not an open record)."""
    where = f"facts.{key}"
    if not isinstance(d, dict):
        raise InputError(f"{where} must be a JSON object, not {show(d)}")
    known = {f.name: f for f in fields(Fact)}
    unknown = [k for k in d if k not in known]
    if unknown:
        raise InputError(f"{where}.{unknown[0]} is not a field of a fact")
    d = {**d, "key": key}
    for name, f in known.items():
        if name not in d and f.default is MISSING:
            raise InputError(f"{where}.{name} is missing")
    hints = hints_of(Fact)
    return Fact(**{name: convert(hints[name], v, f"{where}.{name}") for name, v in d.items()})


class Facts(Mapping[str, Fact]):
    """The facts of one machine, keyed by dotted name.

    Rules read facts through ``need`` (raises NotChecked when unavailable) or ``get``; every key
    looked up is remembered in ``used`` so a finding can cite where its evidence came from.
    """

    def __init__(self, facts: Mapping[str, Fact] | None = None) -> None:
        self._facts: dict[str, Fact] = dict(facts or {})
        self.used: set[str] = set()

    def __getitem__(self, key: str) -> Fact:
        return self._facts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._facts)

    def __len__(self) -> int:
        return len(self._facts)

    def add(self, fact: Fact) -> None:
        self._facts[fact.key] = fact

    def view(self) -> "Facts":
        """A view over the same facts with its own record of what was used."""
        v = Facts()
        v._facts = self._facts
        return v

    def need(self, key: str) -> Any:
        self.used.add(key)
        fact = self._facts.get(key)
        if fact is None:
            raise NotChecked(f"{key} was not collected")
        if not fact.available:
            raise NotChecked(f"{key}: {fact.reason}" if fact.reason else f"{key} not available")
        return fact.value

    def value(self, key: str, default: Any = None) -> Any:
        """The value when available, else ``default``; never raises."""
        self.used.add(key)
        fact = self._facts.get(key)
        return fact.value if fact is not None and fact.available else default

    def sources(self) -> list[str]:
        return sorted({self._facts[k].source for k in self.used if k in self._facts and self._facts[k].source})


def _not_negative(d: Any, where: str, *names: str) -> None:
    for k in names:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            raise InputError(f"{where}.{k} must not be negative")


def _finding_check(d: Any, where: str) -> None:
    """Beyond a finding's annotations: what it recovers is not negative, its confidence one of CONFIDENCE."""
    _not_negative(d, where, "recoverable_ms", "recoverable_pct")
    c = d.get("confidence")
    if c is not None and c not in CONFIDENCE:
        raise InputError(f"{where}.confidence must be one of {', '.join(CONFIDENCE)}, not {show(c)}")


def _measurement_check(d: Any, where: str) -> None:
    _not_negative(d, where, "peak", "fraction", "expected_fraction")


@dataclass
class Finding(Record):
    id: str
    layer: str
    severity: Severity
    title: str
    evidence: str  # what was observed, with the values
    fix: str  # the exact action
    why: str = ""  # why it matters, with the impact figure where the sources give one
    sources: list[str] = field(default_factory=list)  # where the evidence was read
    fix_commands: list[str] = field(default_factory=list)  # shell lines for --fix-script
    subject: str = ""  # "gpu0", "eth0", ... when the check is per-device
    host_action: bool = False  # must be done on the host, not inside this container
    recoverable_ms: float | None = None  # profile findings: time per step a fix would recover
    recoverable_pct: float | None = None
    # profile findings: how far the recoverable figure can be trusted (CONFIDENCE), None elsewhere
    confidence: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    WHEN_SET = frozenset({"confidence"})  # a doctor's finding has none: its JSON is as before
    CHECK = _finding_check


# How far a profile finding's recoverable time can be trusted, most trusted first (docs/profile.md,
# "Confidence"): high: every input measured and the model validated on its kind of workload; medium: the
# inputs measured but the fixed kernels' speed or the profiler's overhead estimated; low: the verdict rests
# on what the trace cannot show (the figure is then the cautious end and the evidence says so).
CONFIDENCE = ("high", "medium", "low")


# Closed vocabularies of the Run, as Literals: their JSON is the string itself, and a Run is checked
# against them when it is loaded (from_dict).
MeasurementStatus = Literal["ok", "skipped", "error"]
# How a figure compares with its reference (bench/verdict.py); "" before it is judged, and a figure
# with no value carries its status.
Verdict = Literal["", "good", "below expected", "low", "no reference", "ok", "skipped", "error"]
CheckStatus = Literal["passed", "found", "not-checked", "not-applicable"]


@dataclass
class Measurement(Record):
    """One benchmark figure with the raw samples behind it and how it compares with the SKU's peak.

    ``samples`` are the raw timings in seconds (one per timed repetition); ``value`` is derived
    from their median, in ``unit``. ``status`` is "ok", "skipped" or "error" (with ``reason``).
    """

    bench: str  # "gemm", "hbm", "h2d", ...
    name: str  # stable id of this figure: "gemm.bf16.best", "h2d.pinned.256MiB"
    value: float | None
    unit: str  # "TFLOP/s", "GB/s", "us"
    params: dict[str, Any] = field(default_factory=dict)  # shape, dtype, bytes, device ...
    samples: list[float] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)  # median, p10, p90, cv, n (seconds)
    peak: float | None = None  # theoretical peak in ``unit`` for this SKU
    peak_source: str = ""
    fraction: float | None = None  # value / peak
    expected_fraction: float | None = None  # the known practical ceiling, as a fraction of peak
    verdict: Verdict = ""
    notes: list[str] = field(default_factory=list)  # wide spread, throttled, GPU busy with others
    telemetry: dict[str, Any] = field(default_factory=dict)  # clocks/temp/power/throttle before & after
    method_version: int = 1
    status: MeasurementStatus = "ok"
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    CHECK = _measurement_check


@dataclass
class CheckResult(Record):
    """What happened to one check: passed, found, not-checked or not-applicable."""

    id: str
    status: CheckStatus
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Run:
    meta: RunMeta = field(default_factory=RunMeta)
    facts: Facts = field(default_factory=Facts)
    findings: list[Finding] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    profile: Section | None = None  # perfstack profile's summary of a trace
    estimates: Estimates | None = None  # perfstack estimate's sheet, or a hand-made tree of quantities
    loadtest: LoadTest | None = None  # perfstack loadtest's requests, levels and sweep
    fleet: FleetAnalysis | None = None  # perfstack fleet's analysis of many nodes
    trial: Trial | None = None  # perfstack try's arms, measured without the profiler (JSON key "try")
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "meta": self.meta.to_dict(),
            "facts": {k: _fact_dict(f) for k, f in sorted(self.facts.items())},
            "findings": [f.to_dict() for f in self.findings],
            "checks": [c.to_dict() for c in self.checks],
            "measurements": [m.to_dict() for m in self.measurements],
            "profile": self.profile.to_dict() if self.profile is not None else None,
            "estimates": self.estimates.to_dict() if self.estimates is not None else None,
            **({"loadtest": self.loadtest.to_dict()} if self.loadtest is not None else {}),
            **({"fleet": self.fleet.to_dict()} if self.fleet is not None else {}),
            **({"try": self.trial.to_dict()} if self.trial is not None else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str)

    def save(self, path: str | Path) -> None:
        """Write the Run as JSON, replacing ``path`` in one step (a failed write keeps the old file)."""
        from perfstack import outfile
        outfile.write(path, self.to_json() + "\n")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Run":
        version = d.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InputError("not a perfstack Run: it has no schema_version" if version is None else
                             f"not a perfstack Run: schema_version must be a positive integer, not {version!r}")
        if version > SCHEMA_VERSION:
            raise InputError(
                f"this Run has schema_version {version}; this perfstack reads up to {SCHEMA_VERSION}",
                hint="upgrade perfstack: pip install -U perfstack",
            )
        # Every section is checked here, once, against the annotations of the records that hold it
        # (records.base), so that renderers can trust a loaded Run; a wrong type names its field.
        sec = {k: d.get(k) for k in ("meta", "facts", "findings", "checks", "measurements", "profile", "estimates")}
        for k, want in (("meta", dict), ("facts", dict), ("findings", list), ("checks", list),
                        ("measurements", list), ("profile", dict), ("estimates", dict)):
            if sec[k] is not None and not isinstance(sec[k], want):
                raise InputError(f"{k} must be a JSON {'object' if want is dict else 'list'}")
        facts = Facts({k: _fact(k, fd) for k, fd in (sec["facts"] or {}).items()})
        return cls(
            meta=RunMeta.from_dict(sec["meta"] or {}, "meta"),
            facts=facts,
            findings=[Finding.from_dict(f, f"findings[{i}]") for i, f in enumerate(sec["findings"] or [])],
            checks=[CheckResult.from_dict(c, f"checks[{i}]") for i, c in enumerate(sec["checks"] or [])],
            measurements=[Measurement.from_dict(m, f"measurements[{i}]") for i, m in enumerate(sec["measurements"] or [])],
            profile=_profile(sec["profile"]),
            estimates=_estimates(sec["estimates"]),
            loadtest=_loadtest(d.get("loadtest")),
            fleet=_fleet(d.get("fleet")),
            trial=_trial(d.get("try")),
            schema_version=version,
        )

    @classmethod
    def load(cls, path: str | Path) -> "Run":
        from perfstack.jsonload import read
        # bounded: depth, digits, NaN (exit 2 naming the field)
        return cls.from_document(read(path, "Run file"), path)

    @classmethod
    def from_document(cls, data: Any, path: str | Path) -> "Run":
        """The Run in a parsed JSON document read from ``path`` (named in errors)."""
        p = Path(path)
        if not isinstance(data, dict):
            raise InputError(f"{p} is not a perfstack Run (expected a JSON object)")
        try:
            return cls.from_dict(data)
        except MemoryError:
            from perfstack.jsonload import too_big
            raise too_big(f"Run file {p}") from None
        except InputError as e:
            raise InputError(f"{p}: {e.message}", e.hint) from None
        except (TypeError, KeyError, ValueError, AttributeError) as e:
            raise InputError(f"{p} is not a valid perfstack Run ({type(e).__name__}: {e})") from None


def _estimates(data: Any) -> Estimates | None:
    if data is None:
        return None
    from perfstack.records.estimates import from_dict
    return from_dict(data)


def _profile(data: Any) -> Section | None:
    """The profile section, typed once here against its records' annotations (exit 2 naming the field); it
    writes back the JSON it was read from."""
    from perfstack.records.profile import load
    return load(data)


def _loadtest(data: Any) -> LoadTest | None:
    if data is None:
        return None
    from perfstack.records.loadtest import LoadTest
    return LoadTest.from_dict(data, "loadtest")


def _fleet(data: Any) -> FleetAnalysis | None:
    if data is None:
        return None
    from perfstack.records.fleet import FleetAnalysis
    return FleetAnalysis.from_dict(data)


def _trial(data: Any) -> Trial | None:
    from perfstack.records.trial import load
    return load(data)


def _fact_dict(f: Fact) -> dict[str, Any]:
    d = {"value": f.value, "source": f.source}
    if not f.available:
        d.update(available=False, reason=f.reason)
    return d
