"""One node reduced to what the fleet analysis compares: its configuration, findings and figures.

A bench Run keeps every raw sample (1-2 MB of JSON per node); a thousand of them do not fit in the
memory of the machine analysing them. ``summarize`` keeps, per Run, the configuration leaves that
drift can concern, the findings, and per figure its median and its own noise, then the Run can be
dropped. The analysis is a pure function of these summaries, so it is one of the Runs too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from perfstack.compare.diff import higher_is_better, per_sample_values
from perfstack.compare.facts import is_volatile, leaves
from perfstack.fleet.stats import relative_noise
from perfstack.model import Run

# Configuration a fleet's nodes of one SKU should share; a difference is drift. Flattened fact keys.
DRIFT_KEYS = [re.compile(p) for p in (
    r"^driver\.",
    r"^python\.(version|torch|torch_cuda|nccl|cudnn|arch_list|matmul_allow_tf32|cudnn_allow_tf32|"
    r"float32_matmul_precision|allocator_backend)$",
    r"^system\.(kernel_release|os_release)",
    r"^kernel\.(?!modules)",
    r"^network\.(rmem_max|wmem_max|tcp_\w+|ip_local_port_range)$",
    r"^env\.(NCCL_|TORCH_|PYTORCH_|CUDA_(?!VISIBLE)|CUBLAS|CUDNN|OMP_|LD_PRELOAD|MALLOC_|NVIDIA_TF32|UCX_|FI_)",
    r"^nccl\.",
    r"^gpu\.count$",
    r"^gpu\.list\[[^]]+\]\.(name|power_limit_w|power_default_w|app_clock_mhz|app_clock_default_mhz|"
    r"sm_clock_max_mhz|persistence_mode|ecc_current|ecc_pending|ecc_aggregate_\w+|remapped_\w+|remap_\w+|"
    r"retired_\w+|pcie_gen|pcie_width|pcie_gen_max|pcie_width_max|sysfs_pcie_\w+|mig_current|"
    r"compute_mode|nvlink_active|fabric_state|fabric_status)$",
    r"^cpu\.(model|logical_count|smt|scaling_driver|governors)$",
    r"^limits\.(memlock|nofile)$",
    r"^container\.shm_size_bytes$",
    r"^cgroup\.(memory_limit_bytes|cpu_quota_cpus)$",
)]


def is_drift_key(key: str) -> bool:
    return not is_volatile(key) and any(p.search(key) for p in DRIFT_KEYS)


@dataclass
class Figure:
    """One benchmark figure of one node (or one GPU of it), without its samples."""

    value: float
    unit: str
    noise: float  # relative robust standard deviation of its own samples (0: unknown)
    n: int
    method_version: int = 1

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(self.unit)


@dataclass
class FindingRef:
    id: str
    subject: str
    severity: str
    layer: str
    title: str
    evidence: str


@dataclass
class NodeSummary:
    """What the analysis knows about one node. ``status`` is "ok", or "failed" with ``reason``."""

    name: str
    status: Literal["ok", "failed"] = "ok"
    reason: str = ""
    source: str = ""  # the Run file, bundle or Ray node it came from
    machine: str = ""  # the machine fleet found it on (meta.fleet.machine): several Ray nodes may share one
    tool_version: str = ""
    command: str = ""
    sku: str = ""
    gpus: str = ""  # gpu.summary, for people
    config: dict[str, str] = field(default_factory=dict)  # drift key -> value as canonical JSON
    findings: list[FindingRef] = field(default_factory=list)
    figures: dict[tuple[str, str], Figure] = field(default_factory=dict)  # (figure name, "gpu0" or "")
    checked: frozenset[str] = frozenset()  # checks that ran to a verdict (passed or found)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def failed(name: str, reason: str, source: str = "") -> NodeSummary:
    return NodeSummary(name=name, status="failed", reason=reason, source=source)


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str, separators=(",", ":"))


def sku_of(run: Run) -> str:
    """The GPU model the node's figures are comparable within ("NVIDIA H100 80GB HBM3"), or "no GPU"."""
    gpus = run.facts.value("gpu.list")
    names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict) and g.get("name")}) if \
        isinstance(gpus, list) else []
    if not names:
        return "no GPU"
    return " + ".join(names)


def _machine(run: Run) -> str:
    fleet = run.meta.fleet
    return (fleet.machine if fleet else None) or ""


def _figure_subject(run: Run) -> str:
    """The GPU a per-GPU bench Run measured, from the fleet's own meta ("gpu0"), else the node."""
    fleet = run.meta.fleet
    return f"gpu{fleet.gpu}" if fleet and fleet.gpu is not None else ""


def figures_of(run: Run) -> dict[tuple[str, str], Figure]:
    """The headline figures (sweep points excluded: the curves' best points are figures already)."""
    subject = _figure_subject(run)
    out: dict[tuple[str, str], Figure] = {}
    for m in run.measurements:
        if m.status != "ok" or m.value is None or m.params.get("sweep"):
            continue
        values = per_sample_values(m)
        out[(m.name, subject)] = Figure(value=float(m.value), unit=m.unit, noise=relative_noise(values),
                                        n=len(values), method_version=m.method_version)
    return out


def summarize(run: Run, name: str, source: str = "") -> NodeSummary:
    config = {k: _canon(v) for k, v in leaves(run.facts).items() if is_drift_key(k)}
    findings = [FindingRef(f.id, f.subject, f.severity.value, f.layer, f.title, f.evidence)
                for f in run.findings if f.recoverable_ms is None]
    return NodeSummary(name=name, source=source, machine=_machine(run),
                       tool_version=run.meta.tool_version or "", command=run.meta.command or "",
                       sku=sku_of(run), gpus=str(run.facts.value("gpu.summary") or ""), config=config, findings=findings,
                       figures=figures_of(run),
                       checked=frozenset(c.id for c in run.checks if c.status in ("passed", "found")))


def merge(a: NodeSummary, b: NodeSummary) -> NodeSummary:
    """Two Runs of one node (its doctor Run and per-GPU bench Runs): one summary. A failure wins, as it
    says the node is not fully known; configuration and findings are the union."""
    if not a.ok or not b.ok:
        bad = a if not a.ok else b
        return bad
    config = {**b.config, **a.config}
    seen = {(f.id, f.subject) for f in a.findings}
    findings = a.findings + [f for f in b.findings if (f.id, f.subject) not in seen]
    return NodeSummary(name=a.name, source=a.source if a.source == b.source else f"{a.source}; {b.source}",
                       machine=a.machine or b.machine, tool_version=a.tool_version or b.tool_version,
                       command="+".join(sorted(set(a.command.split("+")) | set(b.command.split("+")))),
                       sku=a.sku if a.sku != "no GPU" else b.sku, gpus=a.gpus or b.gpus, config=config,
                       findings=findings, figures={**a.figures, **b.figures}, checked=a.checked | b.checked)
