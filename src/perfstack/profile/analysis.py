"""The working state of one trace's analysis (``Analysis``): the analysed device and its events, the
step windows, which step and operator each GPU event belongs to, the CPU spans, and the notes these
choices call for. ``analyze`` builds one per trace and its passes (``efficiency``, ``waste``, ``comm``)
read it; it lives apart from them so that each pass can name it without importing the others."""

from __future__ import annotations

from array import array
from collections import defaultdict
from operator import attrgetter
from typing import Any

from perfstack.profile import classify, cpu, flops
from perfstack.profile.attribute import attribute
from perfstack.profile.trace import GpuEvent, Trace


class Analysis:
    """The working state of one trace's analysis, shared read-only by the passes: the analysed
    device's events, the step windows, the attribution of each event, the CPU spans, and the notes
    these choices call for. Per-op costs and GPU times are computed on first use and cached."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.device, self.other_devices, self.gpu, device_notes = _device(trace)
        self.windows, window_notes = _windows(trace)
        self.att = attribute(trace, self.gpu, self.windows)
        no_gpu = [] if self.gpu else ["no GPU kernels, copies or memsets in the trace: a CPU-only run (or CUDA "
                                      "activity was not recorded: add ProfilerActivity.CUDA)"]
        self.notes: list[str] = [*device_notes, *window_notes, *no_gpu, *_attribution_notes(self)]
        self.cs = cpu.spans(trace)
        self.costs: dict[int, flops.Cost] = {}
        # operators with the same name and arguments share the trace's lists of them, and so their cost:
        # a large trace has millions of calls and a few hundred distinct ones
        self._cost_of: dict[tuple[Any, ...], flops.Cost] = {}
        self._op_time: dict[int, float] | None = None
        self._op_names: frozenset[str] | None = None
        self._event_costs: list[flops.Cost | None] | None = None
        self._in_steps: dict[str, array[int]] | None = None

    def op_names(self) -> frozenset[str]:
        """The distinct names of the trace's operators: a pass that looks for a name asks here first, and
        skips the millions of operators of a large trace when none has it."""
        if self._op_names is None:
            self._op_names = frozenset([o.name for o in self.trace.ops])
        return self._op_names

    def cost(self, o: int) -> flops.Cost | None:
        if o < 0:
            return None
        c = self.costs.get(o)
        if c is None:
            op = self.trace.ops[o]
            concrete = getattr(op, "concrete", None)
            key = (op.name, id(op.dims), id(op.types), id(concrete))  # the lists live as long as the trace
            c = self._cost_of.get(key)
            if c is None:
                c = self._cost_of[key] = flops.cost(op.name, op.dims, op.types, concrete)
            self.costs[o] = c
        return c

    def event_costs(self) -> list[flops.Cost | None]:
        """Per GPU event (indexed like ``gpu``), the cost of the op that launched it (None: no op, or no
        cost): the passes read it for hundreds of thousands of events each, once computed."""
        if self._event_costs is None:
            ops, cost_of = self.trace.ops, self._cost_of
            out: list[flops.Cost | None] = []
            for o in self.att.op:  # (cost() by hand: the ops' calls are many, their names and arguments few)
                if o < 0:
                    out.append(None)
                    continue
                op = ops[o]
                c = cost_of.get((op.name, id(op.dims), id(op.types), id(getattr(op, "concrete", None))))
                out.append(c if c is not None else self.cost(o))
            self._event_costs = out
        return self._event_costs

    def in_steps(self, category: str) -> array[int]:
        """The GPU events of one category launched inside the steps, in order: a pass that looks at GEMMs
        only, or copies only, reads these rather than every event of the trace. Arrays (3 MB for the 340k events
        of a 1 GB trace, where lists of ints took 15), held for the passes after."""
        if self._in_steps is None:
            by_cat: dict[str, array[int]] = {}
            for i, (s, c) in enumerate(zip(self.att.step, self.att.category)):
                if s >= 0:
                    events = by_cat.get(c)
                    if events is None:
                        events = by_cat[c] = array("q")
                    events.append(i)
            self._in_steps = by_cat
        return self._in_steps.get(category, array("q"))

    def known_cost(self, o: int) -> flops.Cost:
        """The cost of op ``o``, where the caller has already seen that there is one."""
        c = self.cost(o)
        if c is None:
            raise ValueError(f"op {o} has no cost")
        return c

    def op_time(self, o: int) -> float:
        """GPU time (µs) of op ``o``'s compute kernels: FLOPs belong to them, not to the op's helpers."""
        if self._op_time is None:
            times: dict[int, float] = defaultdict(float)
            self._op_time = times
            compute = classify.COMPUTE
            for g, op, c in zip(self.gpu, self.att.op, self.att.category):
                if op >= 0 and c in compute:
                    times[op] += g.dur
        return self._op_time.get(o, 0.0)


Window = tuple[int, float, float]  # (step number, CPU start, CPU end) in µs


def _device(trace: Trace) -> tuple[int | None, list[int], list[GpuEvent], list[str]]:
    """The device with the most GPU time (the one analysed), the others, its events, and a note when
    the trace has several."""
    devices = set(map(attrgetter("device"), trace.gpu))
    if len(devices) == 1:  # (most traces: no time to add up, and every event is the device's)
        return devices.pop(), [], list(trace.gpu), []
    totals: dict[int, float] = defaultdict(float)
    for g in trace.gpu:
        totals[g.device] += g.dur
    device = max(totals, key=lambda d: totals[d]) if totals else None
    others = sorted(d for d in totals if d != device)
    notes = []
    if others:
        n_other = sum(1 for g in trace.gpu if g.device != device)
        notes.append(f"the trace has GPU events on devices {[device, *others]}: device "
                     f"{device} (the most GPU time) is analysed; {n_other} events on the others are not")
    return device, others, [g for g in trace.gpu if g.device == device], notes


def _windows(trace: Trace) -> tuple[list[Window], list[str]]:
    """The ProfilerStep windows, or the whole trace as one step (with a note) where it has none."""
    windows = [(s.number, s.ts, s.ts + s.dur) for s in trace.steps if s.dur > 0]
    if windows:
        return windows, []
    spans = [(e.ts, e.ts + e.dur) for e in trace.gpu] + [(e.ts, e.ts + e.dur) for e in (*trace.runtime, *trace.ops)]
    if spans:
        windows = [(0, min(a for a, _ in spans), max(b for _, b in spans))]
    return windows, ["no ProfilerStep# windows: the whole trace is analysed as one step "
                     "(call prof.step() once per iteration for per-step figures)"]


def _attribution_notes(A: Analysis) -> list[str]:
    notes = list(A.att.notes)
    if A.att.unattributed and A.gpu:
        notes.append(f"{A.att.unattributed} GPU events were launched outside the profiled steps (before the first or "
                     "after the last); they are not counted in any step but occupy the GPU timeline")
    return notes
