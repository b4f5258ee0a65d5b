"""A Run's ``meta``: what wrote it, when and how, the same names for every command (``RunMeta``), with the
node label of a Run that perfstack fleet gathered (``FleetLabel``) and the fan-out of a fleet Run gathered
through Ray (``FanOut``, one ``TaskCost`` per task).

Tolerant records (``records.base.Record``): keys this perfstack does not know (a newer Run, a hand-edited one)
are kept and written back, and a loaded Run's meta saves back with its keys in the order it was read.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any, Iterable

from perfstack.records.base import Record, set_loaded


@dataclass
class FleetLabel(Record):
    """``meta.fleet`` of a node's Run that perfstack fleet gathered: the node and GPU it is the Run of, the
    Ray node and machine it ran on, the part of the job."""

    node: str | None = None
    gpu: int | None = None  # the GPU of a per-GPU Run; None for the node's
    ray_node_id: str | None = None
    machine: str | None = None  # several Ray nodes may share one
    part: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskCost(Record):
    """One task of a fleet Run's fan-out (``meta.fanout.per_task``): which node, GPU, part and machine it
    ran for, how long its job took and what the fan-out added (seconds)."""

    node: str | None = None
    gpu: int | None = None
    part: str | None = None
    machine: str | None = None
    job_s: float | None = None
    overhead_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class FanOut(Record):
    """``meta.fanout`` of a fleet Run gathered through Ray: how many tasks, how many failed, the overhead
    per task (median, max, in seconds) and each task."""

    tasks: int | None = None
    failed: int | None = None
    overhead_s_median: float | None = None
    overhead_s_max: float | None = None
    per_task: list[TaskCost] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunMeta(Record):
    """What wrote a Run, when and how: the Run's ``meta``, the same names for every command.

    The first five fields are every command's (``run_meta`` fills them); the rest belong to the commands
    that write them. None means the Run does not say, and such a field is not written."""

    tool: str | None = None  # "perfstack"
    tool_version: str | None = None
    command: str | None = None  # doctor, bench, profile, estimate, loadtest, fleet
    created: str | None = None  # UTC, to the second (ISO 8601)
    python: str | None = None
    subcommand: str | None = None  # estimate: infer or train; fleet: doctor, bench or report
    source: str | None = None  # what was read: the live machine, a bundle, a model config, a server URL, ...
    calibrated_from: str | None = None  # estimate --calibrate: the bench Run the hardware figures came from
    host_id: str | None = None  # doctor and bench, after redaction
    elapsed_s: float | None = None
    bundle: str | None = None  # doctor --bundle: how complete the bundle was
    fleet: FleetLabel | None = None  # a node's Run gathered by fleet: which node, GPU, machine
    fanout: FanOut | None = None  # a fleet Run gathered through Ray: tasks, failures, overhead per task
    traces: list[str] | None = None  # profile: the trace files read
    gpu: str | None = None  # profile: the device the trace names
    warnings: list[str] | None = None  # profile: what the trace reading had to guess or skip
    extra: dict[str, Any] = field(default_factory=dict)

    WHEN_SET = frozenset({"tool", "tool_version", "command", "created", "python", "subcommand", "source",
                          "calibrated_from", "host_id", "elapsed_s", "bundle", "fleet", "fanout", "traces", "gpu",
                          "warnings"})

    def shown(self, names: Iterable[str]) -> list[tuple[str, str]]:
        """(name, text) of the named fields that hold something, for a report's metadata table."""
        return [(k, str(v)) for k in names if (v := getattr(self, k)) not in (None, "")]


def run_meta(command: str, **fields: Any) -> RunMeta:
    """A Run's ``meta``, the same for every command: what wrote it (``tool``, ``tool_version``), which
    command, when (``created``, UTC to the second) and under which Python, then the command's own
    ``fields`` (``source``, ``elapsed_s``, ``traces`` ...), which must be RunMeta's, written in that order.
    Reports and diff read these names."""
    from datetime import datetime, timezone

    from perfstack import __version__
    d = {"tool": "perfstack", "tool_version": __version__, "command": command,
         "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
         "python": platform.python_version(), **fields}
    meta = RunMeta(**d)
    set_loaded(meta, tuple(d))
    return meta
