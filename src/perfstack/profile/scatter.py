"""A tensor read one slice at a time in a loop (``x[:, t]`` in a recurrent decoder's time loop): each slice's
backward scatters the slice's gradient into a zeroed tensor of the whole source's size and adds that to the
gradient so far, so a loop over N slices fills and adds N full-size tensors per step, where taking the slices
apart once (``x.unbind(1)``, whose backward stacks the N gradients once) writes the source's size once.

Where it shows in a trace. Each slice's backward is an autograd node, ``autograd::engine::evaluate_function:
SelectBackward0`` (``x[:, t]``) or ``SliceBackward0`` (``x[:, t:t + 1]``), on the autograd engine's thread;
under it the engine launches a fill of the zeroed gradient (``aten::fill_``/``zero_``), the copy of the slice's
gradient into it, and, for every slice after the first, the ``aten::add_`` that accumulates it into the
source's gradient (the engine's input buffer for the next node). Every kernel launched under such a node is
counted, and a source is one shape of those fills: it counts where its tensors are sliced at least ``MIN_NODES``
times each per step on average (a loop over one tensor, not the two halves of a rotary embedding's input in
every layer).

The fix's cost: one stack of the gradients, writing the source's bytes once and reading as many, at
``waste.HBM_PRACTICAL`` of the HBM peak per source per step; every counted kernel goes, with its launch.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from perfstack.profile import classify
from perfstack.profile.recompute import NODE, autograd_nodes
from perfstack.profile.waste import MIN_KERNEL_US, Waste, hbm_gbps
from perfstack.records.profile import SlicedBackward

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis
    from perfstack.specs.table import GpuSpec

NODES = (f"{NODE}: SelectBackward0", f"{NODE}: SliceBackward0")
FILLS = ("aten::fill_", "aten::zero_", "aten::zeros", "aten::new_zeros")
ADDS = ("aten::add_", "aten::add")
MIN_NODES = 8  # slices of one source per step: fewer is indexing, not a loop over the source


def detect(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """The slice-by-slice backward of a trace: evidence, and its kernels replaced by one stack per source."""
    names = A.op_names()
    if not any(n in names for n in NODES):
        return None
    ops, att, gpu = A.trace.ops, A.att, A.gpu
    node = autograd_nodes(A)
    is_slice = {o for o in range(len(ops)) if node[o] == o and ops[o].name in NODES}
    if not is_slice:
        return None
    kernels: dict[int, list[int]] = defaultdict(list)  # slice node -> its kernels in steps
    source: dict[int, tuple[tuple[int, ...], int]] = {}  # slice node -> (its fill's shape, its element size)
    adds: dict[int, tuple[int, ...]] = {}  # slice node -> the shape of the add it accumulates with
    for i in range(len(gpu)):
        o = att.op[i]
        if o < 0 or att.step[i] < 0 or node[o] not in is_slice:
            continue
        r = node[o]
        kernels[r].append(i)
        op = ops[o]
        shape = classify.dims(op.dims[0]) if op.dims else None
        if shape and op.name in FILLS and r not in source:
            source[r] = (shape, classify.itemsize(classify.op_dtype(op.types)))
        elif shape and op.name in ADDS:
            adds[r] = shape
    # per (step, source shape): its slice nodes, and how many of them add into a gradient already there
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = defaultdict(list)
    for r, idx in kernels.items():
        if r in source:
            groups[(att.step[idx[0]], source[r][0])].append(r)
    # Tensors of one shape each sliced a few times (a rotary embedding's two halves, in every layer) group
    # together too; each source's first slice starts its gradient and every later one adds to it, so the
    # group holds (nodes - adds) sources, each sliced nodes / sources times on average
    loops = {(st, shape): rs for (st, shape), rs in groups.items()
             if len(rs) >= MIN_NODES * max(1, len(rs) - sum(adds.get(r) == shape for r in rs))}
    if not loops:
        return None
    bw = hbm_gbps(spec)  # GB/s = bytes per ns; without it (no spec) the waste is named, not replayed
    waste = Waste("sliced-backward")
    n = max(1, len(A.windows))
    t = filled = fixed = 0.0
    count = 0
    nodes: dict[tuple[int, ...], int] = defaultdict(int)
    size: dict[tuple[int, ...], int] = {}
    for (_, shape), rs in loops.items():
        size[shape] = classify.numel(shape) * source[rs[0]][1]
        nodes[shape] += len(rs)
        filled += size[shape] * len(rs)
        mine = [i for r in rs for i in kernels[r]]
        t += sum(gpu[i].dur for i in mine)
        count += len(mine)
        if bw:
            # one stack of the slices' gradients: the source's size written once and read once
            stack_us = max(MIN_KERNEL_US, 2 * size[shape] / bw / 1e3)
            first = min(mine, key=lambda i: gpu[i].ts)
            for i in mine:
                waste.new_dur[i] = 0.0
                waste.merged.add(i)
            waste.new_dur[first] = stack_us
            waste.merged.discard(first)
            fixed += stack_us
    top = max(nodes, key=lambda k: nodes[k])
    waste.evidence = SlicedBackward(nodes_per_step=round(sum(nodes.values()) / n, 1),
                                    kernels_per_step=round(count / n, 1), time_ms=round(t / n / 1e3, 4),
                                    source_shape="×".join(map(str, top)), source_bytes=size[top],
                                    filled_bytes_per_step=round(filled / n), fixed_ms=round(fixed / n / 1e3, 4),
                                    hbm_gbps=round(bw or 0.0, 1))
    return waste
