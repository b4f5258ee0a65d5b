"""Device-to-device copies that a step makes again and again: a tensor grown every iteration (a KV
cache extended with ``torch.cat`` per generated token, a list of activations concatenated each step,
a buffer cloned or gathered as it grows) copies everything it already holds on every call.

What is a copy. A GPU event on the analysed device whose launching operator, or an ancestor of it,
is a copy operator (``aten::cat``/``stack``, ``index``/``index_select``/``gather``, ``clone``,
``contiguous``, ``copy_``), or a device-to-device memcpy; the outermost such operator names it.
Casts (``aten::to``/``_to_copy``/``type_as``, a ``copy_`` between dtypes), the optimizer's copies
and compiled code are left out: those are the fusion finding's.

Bytes. Read + written, from the operator's ``Input Dims`` (``record_shapes=True``): a cat writes the
sum of its inputs after reading them; a gather or index_select writes its output (the index's size);
a clone, contiguous or copy_ reads and writes its tensor. The element size comes from the input
type, or for a cat (a TensorList has none) from the kernel's ``OpaqueType<N>``; a memcpy's from its
``bytes`` argument.

What grows. Calls of one concatenating operator (cat, stack) writing tensors of one dtype and rank
that agree in every dimension but the one concatenated along are a series. Read in time order (calls of
the same length collapsed: every layer's cache grows by the same token), a call *feeds* the next when
the next concatenates onto it: its largest input is exactly as long as the first one's output (a
tensor fed back, as a KV cache is: cat([cache, new]) → cache), or its inputs are the first one's with
more appended (a list grown and concatenated again). A series with at least ``MIN_LINKS`` such links,
(counting each call a collapsed run holds: the caches of 24 layers grown by one token are 24 links),
and no more falls (a new sequence starting) than links, grows, whether the profiled steps are tokens
or whole generations. Each of its calls re-copies what the tensor already held (its largest input, or
all but the median rise); preallocated and written in place, only the new part would be written.
(Other copy operators whose tensors grow are not claimed: in a decode loop without a KV cache every
activation grows, and preallocation is not the fix there.)

What rolls. A cat one of whose inputs is a slice of a tensor of the output's own shape (its ``Input
Strides`` are that shape's, its length along the concatenated dimension shorter): a window moved forward,
``cat([window[:, k:], new], dim=1)``, which copies the whole window to add k entries. Seen by a series of
at least ``MIN_LINKS`` such calls; a ring buffer written in place at ``step % M`` writes only the new
part. Along the first dimension a slice has the strides of a tensor of its own size, so a window rolled
along dimension 0 is not seen. Assumed: what reads the window does not need it in order (attention, a
sum, a max; or it indexes with an offset); one that needs the order back would gather it again.

The fixed copy of a call writes ``growth / length`` of its bytes at ``waste.HBM_PRACTICAL`` of the
HBM peak (the spec table; else the fastest large copy of this trace), at least ``MIN_KERNEL_US``;
the difference from the measured copy time is replayed through the step model. Assumed: the cache
is read through a view of its filled length (a hand-written static cache); one that attends over
its whole preallocated length (HF's static cache with a mask) reads more in attention, which is not
counted. Copies of tensors that do not grow (a fixed-size gather, a ``contiguous`` before a
``view``) are measured and named once they reach ``REPORT_SHARE`` of the GPU time, but no time is
claimed for them: whether a view can replace them depends on the code.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfstack.profile import classify
from perfstack.profile.attribute import CASTING, COMPILED, COPYING
from perfstack.profile.classify import CAT_OPS, STACK_OPS
from perfstack.records.profile import CopyBound, CopyOp
from perfstack.profile.waste import MIN_KERNEL_US, Waste, hbm_gbps

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis
    from perfstack.profile.trace import CpuEvent
    from perfstack.specs.table import GpuSpec

MIN_LINKS = 2  # calls that concatenate onto the previous one's output, for a series to be growing
REPORT_SHARE = 0.25  # copies of tensors that do not grow are reported from this share of the GPU time
_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")
_DTYPE_IN_NAME = (("BFloat16", 2), ("Half", 2), ("float", 4), ("double", 8), ("long", 8), ("int", 4))


@dataclass
class _Call:
    """One call of a copy operator: its events on the device, time, bytes and series keys."""
    op: int
    name: str
    events: list[int] = field(default_factory=list)
    time: float = 0.0
    nbytes: float = 0.0
    itemsize: int = 0
    shape: tuple[int, ...] | None = None  # the tensor it writes
    grow_dim: int | None = None  # for a cat: the dimension it concatenates along
    inputs: list[tuple[int, ...]] = field(default_factory=list)  # for a cat: its inputs' shapes
    fraction: float = 1.0  # of its bytes a preallocated tensor would still write
    growth: str = ""
    rolled: int = 0  # for a cat: the length of its input sliced from a tensor of the output's shape (0: none)


def detect(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """The copy-bound waste of a trace: evidence for every copy, new durations for growing ones."""
    calls = _calls(A)
    if not calls:
        return None
    gpu = A.gpu
    n = max(1, len(A.windows))
    total = sum(g.dur for i, g in enumerate(gpu) if A.att.step[i] >= 0)
    copy_us = sum(c.time for c in calls)
    growing = _growth(calls)
    if not total or (copy_us < REPORT_SHARE * total and not growing):
        return None
    bw = hbm_gbps(spec) or _fastest(calls, A)  # GB/s = bytes per ns
    w = Waste("copy-bound")
    grow_us = fixed_us = avoid = 0.0
    for c in growing:
        grow_us += c.time
        avoid += c.nbytes * (1 - c.fraction)
        if not bw:
            continue
        after = max(c.nbytes * c.fraction / (bw * 1e3), MIN_KERNEL_US)
        if after >= c.time:
            continue
        fixed_us += after
        for i in c.events:
            w.new_dur[i] = gpu[i].dur * after / c.time
    nbytes = sum(c.nbytes for c in calls)
    w.evidence = CopyBound(copy_ms=round(copy_us / n / 1e3, 4), pct_of_busy=round(100 * copy_us / total, 1),
                           bytes_per_step=round(nbytes / n),
                           gbps=round(nbytes / copy_us / 1e3, 1) if copy_us else 0.0, hbm_gbps=round(bw or 0.0, 1),
                           growing_ms=round(grow_us / n / 1e3, 4), avoidable_bytes_per_step=round(avoid / n),
                           fixed_ms=round(fixed_us / n / 1e3, 4),
                           ops=_ops(calls, A, n))
    return w


def _calls(A: Analysis) -> list[_Call]:
    """Every call of a copy operator that launched device-to-device copies in the steps, in time order;
    device-to-device memcpys no copy operator launched are one call each."""
    gpu, att, ops = A.gpu, A.att, A.trace.ops
    flags = att.ops.flags
    by_root: dict[int, _Call] = {}
    loose: list[_Call] = []
    dtod: dict[str, bool] = {}  # per memcpy name: device to device
    described: dict[tuple[Any, ...], _Call] = {}  # per copy operator's name and arguments: see _describe
    # (an event's category is its kind for a memcpy or a memset: the event itself, spread over memory with the
    # rest of the trace, is read only where it may be a copy)
    for i, (s, ph, cat, o) in enumerate(zip(att.step, att.phase, att.category, att.op)):
        if s < 0 or ph == "optimizer" or cat == "memset":
            continue
        memcpy = cat == "memcpy"
        if memcpy:
            name = gpu[i].name
            d = dtod.get(name)
            if d is None:
                d = dtod[name] = classify.memcpy_kind(name)[0] == "DtoD"
            if not d:
                continue
        # the flags say at once whether a copy operator encloses the op, and no cast or compiled code does
        fl = flags[o] if o >= 0 else 0
        r = _root(A, o) if fl & COPYING and not fl & (CASTING | COMPILED) else -1
        if r < 0:
            if memcpy:
                g = gpu[i]
                if g.bytes:
                    loose.append(_Call(-1, "Memcpy DtoD", [i], g.dur, 2.0 * g.bytes))
            continue
        g = gpu[i]
        c = by_root.get(r)
        if c is None:
            c = by_root[r] = _describe(A, r, described)
        c.events.append(i)
        c.time += g.dur
        if memcpy and g.bytes and not c.shape:
            c.nbytes += 2.0 * g.bytes
    for c in by_root.values():
        if not c.itemsize and c.shape:
            c.itemsize = _itemsize_from_kernels(A, c.events)
            c.nbytes = 2.0 * classify.numel(c.shape) * c.itemsize
    out = [c for c in by_root.values() if c.events] + loose
    out.sort(key=lambda c: ops[c.op].ts if c.op >= 0 else gpu[c.events[0]].ts)
    return out


def _root(A: Analysis, o: int) -> int:
    """The outermost copy operator among ``o`` and its ancestors, where one is (``o``'s flags have COPYING)
    and no cast or compiled code encloses ``o``; -1 when it is a ``copy_`` between dtypes (a cast)."""
    ops, parent, flags = A.trace.ops, A.att.ops.parent, A.att.ops.flags
    x = o
    # up while the parent is itself at or below a copy operator: the outermost one's parent is not
    while parent[x] >= 0 and flags[parent[x]] & COPYING:
        x = parent[x]
    if ops[x].name == "aten::copy_" and _cast(ops[x].types):
        return -1
    return x


def _cast(types: list[Any] | None) -> bool:
    ts = [t for t in (types or [])[:2] if isinstance(t, str) and t]
    return len(ts) == 2 and ts[0] != ts[1]


def _describe(A: Analysis, r: int, described: dict[tuple[Any, ...], _Call]) -> _Call:
    """A copy operator's call: the tensor it writes (from its Input Dims), bytes moved, element size. Calls
    with the same name and arguments share the trace's lists of them, and so their description: it is made
    once (``described``) and each call gets a copy."""
    op = A.trace.ops[r]
    key = (op.name, id(op.dims), id(op.types), id(op.concrete), id(op.strides))  # they live as the trace does
    c = described.get(key)
    if c is None:
        c = described[key] = _description(op)
    return _Call(r, c.name, [], c.time, c.nbytes, c.itemsize, c.shape, c.grow_dim, c.inputs, c.fraction, c.growth,
                 c.rolled)  # (dataclasses.replace, field by field: many times slower)


def _description(op: CpuEvent) -> _Call:
    """What ``_describe`` says of a call of ``op``'s name and arguments (its op and events left to fill)."""
    c = _Call(-1, op.name)
    dims, types = op.dims or [], op.types or []
    dtype = classify.op_dtype(types)
    c.itemsize = classify.ITEMSIZE.get(dtype or "", 0)
    if op.name in CAT_OPS:
        listed = [classify.dims(d) for d in (dims[0] if dims and isinstance(dims[0], list) else [])]
        shapes = [s for s in listed if s and classify.numel(s)]
        if not shapes:
            return c
        nd = len(shapes[0])
        stack = op.name in STACK_OPS
        d = _dim(op.concrete, 1, nd + (1 if stack else 0))
        out: tuple[int, ...]
        if stack or any(len(s) != nd for s in shapes) or d is None or d >= nd:
            out = (sum(classify.numel(s) for s in shapes),)
            d = 0
        else:
            out = tuple(sum(s[d] for s in shapes) if k == d else shapes[0][k] for k in range(nd))
            c.rolled = _rolled(listed, op.strides, out, d)
        c.shape, c.grow_dim, c.inputs = out, d, shapes
    elif op.name == "aten::index_select":
        src, idx = (classify.dims(dims[0]) if dims else None), (classify.dims(dims[2]) if len(dims) > 2 else None)
        d = _dim(op.concrete, 1, len(src) if src else 0)
        if src and idx is not None and d is not None and d < len(src):
            c.shape = tuple(classify.numel(idx) if k == d else v for k, v in enumerate(src))
    elif op.name in ("aten::gather", "aten::take_along_dim"):
        c.shape = classify.dims(dims[2]) if len(dims) > 2 else None
    elif op.name == "aten::index":
        base = classify.dims(dims[0]) if dims else None
        given = [classify.dims(x) for x in dims[1]] if len(dims) > 1 and isinstance(dims[1], list) else []
        index = [x for x in given if x]
        if base and index and len(index) <= len(base):
            c.shape = (classify.numel(index[0]), *base[len(index):])
    elif op.name == "aten::copy_":
        c.shape = classify.dims(dims[1]) if len(dims) > 1 else None
    else:
        c.shape = classify.dims(dims[0]) if dims else None
    if c.shape is not None and c.itemsize:
        c.nbytes = 2.0 * classify.numel(c.shape) * c.itemsize
    return c


def _dim(concrete: list[Any] | None, pos: int, nd: int) -> int | None:
    """The integer argument at ``pos`` (Concrete Inputs, as a string) as a dimension of a rank-``nd``
    tensor; 0 when the trace does not record it (cat's default)."""
    v = concrete[pos] if concrete and len(concrete) > pos else ""
    if v in ("", None):
        return 0
    try:
        d = int(v)
    except (TypeError, ValueError):
        return None
    return d + nd if d < 0 else d


def _rolled(listed: list[tuple[int, ...] | None], strides: list[Any] | None, out: tuple[int, ...], d: int) -> int:
    """The length along ``d`` of the input that is a slice of a tensor shaped as ``out`` (its strides are
    ``out``'s contiguous strides, its length shorter), or 0: the window a ``cat([w[:, k:], new])`` rolls."""
    given = strides[0] if strides and isinstance(strides[0], list) else []
    want = _contiguous(out)
    for shape, st in zip(listed, given):
        if not shape or len(shape) != len(out) or not 0 < shape[d] < out[d] or not isinstance(st, list) \
                or len(st) != len(out):
            continue
        seen = [k for k in range(len(out)) if shape[k] > 1]  # a dimension of one has any stride
        own = _contiguous(shape)
        if [st[k] for k in seen] == [want[k] for k in seen] != [own[k] for k in seen]:
            return shape[d]
    return 0


def _contiguous(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return out[::-1]


def _itemsize_from_kernels(A: Analysis, events: list[int]) -> int:
    """Element size from a copy kernel's template arguments (CatArrayBatchedCopy<OpaqueType<2u>...>);
    2 (16-bit) when no kernel says."""
    for i in events:
        name = A.gpu[i].name
        m = _OPAQUE.search(name)
        if m:
            return int(m.group(1))
        for word, size in _DTYPE_IN_NAME:
            if f"<{word}" in name or f"c10::{word}" in name:
                return size
    return classify.itemsize(None)


def _growth(calls: list[_Call]) -> list[_Call]:
    """The calls of growing series, each with ``fraction`` (of its bytes a preallocated tensor would still
    write) and ``growth`` set."""
    series: dict[tuple[Any, ...], list[_Call]] = defaultdict(list)
    for c in calls:
        if not c.shape or c.op < 0 or c.grow_dim is None:
            continue
        d = c.grow_dim
        series[(c.name, c.itemsize, len(c.shape), d, c.shape[:d] + c.shape[d + 1:])].append(c)
    out: list[_Call] = []
    for (_, _, _, d, _), members in series.items():
        rolled = [c for c in members if c.rolled]
        if len(rolled) >= MIN_LINKS:
            for c in rolled:
                n = _len(c)
                c.fraction = 1 - c.rolled / n
                c.growth = (f"a window of {n} along dim {d} rolled forward by {n - c.rolled} per call (a slice of "
                            f"a tensor of its own shape concatenated with the new part)")
                out.append(c)
            members = [c for c in members if not c.rolled]
        if not members:
            continue
        starts = [k for k in range(len(members)) if k == 0 or _len(members[k]) != _len(members[k - 1])]
        runs = [members[k] for k in starts]
        width = [b - a for a, b in zip(starts, starts[1:] + [len(members)])]  # calls collapsed into each run
        feeding = [i for i, (a, b) in enumerate(zip(runs, runs[1:])) if _feeds(a, b)]
        links = len(feeding)
        # each of the calls a run collapses (one per layer's cache) is fed back: two profiled tokens of a
        # 24-layer decoder are 48 links, not one
        fed = sum(min(width[i], width[i + 1]) for i in feeding)
        falls = sum(1 for a, b in zip(runs, runs[1:]) if _len(b) < _len(a))
        if fed < MIN_LINKS or links < falls:
            continue
        rises = [_len(b) - _len(a) for a, b in zip(runs, runs[1:]) if _len(b) > _len(a)]
        step = statistics.median(rises) if rises else 1
        lengths = [_len(c) for c in members]
        for c in members:
            n = _len(c)
            # a cat of one tensor onto another re-copies the larger; a list's cat, all but the newest pieces
            big = 0 if c.name in STACK_OPS or len(c.inputs) < 2 else max((x[d] for x in c.inputs if len(x) > d),
                                                                          default=0)
            c.fraction = min(1.0, 1 - big / n if big >= 0.5 * n else step / n) if n else 1.0
            c.growth = f"dim {d} grows by {step:g} per call ({min(lengths)}→{max(lengths)} in the profiled steps)"
            out.append(c)
    return out


def _len(c: _Call) -> int:
    return c.shape[c.grow_dim or 0] if c.shape else 0


def _feeds(a: _Call, b: _Call) -> bool:
    """Whether call ``b`` concatenates onto what call ``a`` wrote: its largest input is as long as ``a``'s
    output (a tensor fed back, as a KV cache is), or its inputs are ``a``'s with more appended (a list
    grown and concatenated again)."""
    if _len(b) <= _len(a):
        return False
    if b.name in STACK_OPS:
        return len(b.inputs) > len(a.inputs) and b.inputs[:len(a.inputs)] == a.inputs
    d = b.grow_dim or 0
    big = max((x[d] for x in b.inputs if len(x) > d), default=0)
    return big == _len(a) or (len(b.inputs) > len(a.inputs) and b.inputs[:len(a.inputs)] == a.inputs)


def _fastest(calls: list[_Call], A: Analysis) -> float | None:
    """Without the spec table: the fastest copy of at least 1 MiB in the trace (GB/s)."""
    rates = [c.nbytes / c.time / 1e3 for c in calls if c.nbytes >= 2**20 and c.time > 0]
    return max(rates) if rates else None


def _ops(calls: list[_Call], A: Analysis, n: int) -> list[CopyOp]:
    """The copy operators by time per step (the five largest), with their kernels."""
    by: dict[tuple[str, bool], list[_Call]] = defaultdict(list)
    for c in calls:
        by[(c.name, c.fraction < 1.0)].append(c)
    rows = []
    for (name, grows), cs in by.items():
        kern: dict[str, float] = defaultdict(float)
        for c in cs:
            for i in c.events:
                kern[classify.short_name(A.gpu[i].name, 60)] += A.gpu[i].dur
        growth = max((c.growth for c in cs if c.growth), key=len, default="")
        rows.append(CopyOp(op=name, kernels=[k for k, _ in sorted(kern.items(), key=lambda kv: -kv[1])[:3]],
                           calls_per_step=round(len(cs) / n, 1), time_ms=round(sum(c.time for c in cs) / n / 1e3, 4),
                           bytes_per_step=round(sum(c.nbytes for c in cs) / n), growing=grows, growth=growth))
    rows.sort(key=lambda r: -r.time_ms)
    return rows[:5]
