"""Forward operators re-run inside the backward pass: activation checkpointing (``torch.utils.checkpoint``,
reentrant or not; Hugging Face ``gradient_checkpointing_enable``) recomputes each checkpointed region's
forward when the backward pass first needs its activations.

Where it shows in a trace. The backward pass runs as autograd nodes, each an
``autograd::engine::evaluate_function: XBackward0`` range (on the autograd engine's thread). A node
computes gradients with backward operators (``aten::mm``, ``*_backward``); forward operators
(``FORWARD_OPS``: ``aten::linear``/``matmul``, norms, attention, activations, embeddings, convolutions)
appear under a node only when a forward is re-run there: in the node whose saved tensors are unpacked
first (non-reentrant checkpointing), or in ``CheckpointFunctionBackward`` (reentrant). Each such node
is one recomputed region (a layer, as checkpointing is usually applied); the recompute is everything
the node runs from its first forward operator's start to its last one's end (the norms' and
activations' element-wise pieces between them included), the backward operators after it excluded.

Memory. A region kept rather than recomputed holds its activations: the tensors its forward operators
save for backward, counted as the inputs of its innermost forward operators (a linear's input, a norm's
input, attention's q, k, v and output, an activation's input; weights and indices left out). The
headroom is the device's memory (``deviceProperties.totalGlobalMem``) less the peak the caching
allocator reserved in the profiled window (the ``[memory]`` events of ``profile_memory=True``), less
``CONTEXT_BYTES`` for the CUDA context and libraries and ``MARGIN`` of the device for fragmentation.
Checkpointing can be turned off for as many regions as the headroom holds; their recompute kernels are
removed and the step replayed (their CPU dispatch goes too). Without the memory events the headroom is
unknown, and the finding says it cannot tell.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from itertools import compress, count
from operator import attrgetter
from typing import TYPE_CHECKING

from perfstack.profile import classify
from perfstack.records.profile import ActivationRecompute
from perfstack.profile.waste import Waste

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis

NODE = "autograd::engine::evaluate_function"
FORWARD_OPS = {
    "aten::linear", "aten::matmul", "aten::einsum",
    "aten::layer_norm", "aten::native_layer_norm", "aten::rms_norm", "aten::_fused_rms_norm", "aten::group_norm",
    "aten::native_group_norm", "aten::batch_norm", "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm",
    "aten::native_batch_norm",
    "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward", "aten::_efficient_attention_forward",
    "aten::gelu", "aten::silu", "aten::relu", "aten::dropout", "aten::native_dropout", "aten::softmax",
    "aten::_softmax", "aten::embedding", "aten::conv1d", "aten::conv2d", "aten::conv3d",
}
ATTENTION = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
             "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
             "aten::_flash_attention_forward", "aten::_efficient_attention_forward"}
CONTEXT_BYTES = 2**30  # the CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers: outside the allocator
MARGIN = 0.10  # of the device's memory kept free for fragmentation and peaks between samples


def detect(A: Analysis) -> Waste | None:
    """The recompute of a trace: evidence, and (where the memory allows turning checkpointing off for
    some regions) the recompute kernels of those regions removed."""
    ops, att, gpu = A.trace.ops, A.att, A.gpu
    recomputed = forward_in_backward(A)
    if not recomputed:
        return None
    node = autograd_nodes(A)
    fwd: dict[int, list[int]] = defaultdict(list)  # region node -> its forward ops
    for o in recomputed:
        if node[o] >= 0:
            fwd[node[o]].append(o)
    if not fwd:
        return None
    window = {r: (min(ops[o].ts for o in os_), max(ops[o].ts + ops[o].dur for o in os_)) for r, os_ in fwd.items()}
    kernels: dict[int, list[int]] = defaultdict(list)  # region -> its recompute GPU events in steps
    by_op: dict[str, float] = defaultdict(float)
    for i, g in enumerate(gpu):
        o = att.op[i]
        if att.step[i] < 0 or o < 0:
            continue
        r = node[o]
        span = window.get(r)
        if span is None or not (span[0] <= ops[o].ts < span[1]):
            continue
        kernels[r].append(i)
        by_op[_top_forward(A, o, r)] += g.dur
    if not kernels:
        return None
    n = max(1, len(A.windows))
    t = sum(gpu[i].dur for idx in kernels.values() for i in idx)
    region_bytes = statistics.median(_saved_bytes(A, fwd[r]) for r in kernels)
    regions = len(kernels) / n
    total = A.trace.device_memory.get(A.device) if A.device is not None else None
    peak = A.trace.peak_reserved.get(A.device) if A.device is not None else None
    layers_off, source = 0, ""
    if total and peak is not None:
        headroom = total * (1 - MARGIN) - peak - CONTEXT_BYTES
        source = ("peak reserved from the trace's [memory] events, the device's memory from its properties, "
                  f"less {CONTEXT_BYTES / 2**30:g} GiB for the CUDA context and {MARGIN:.0%} of the device")
        if region_bytes > 0 and headroom > 0:
            layers_off = int(min(regions, headroom // region_bytes))
    elif total:
        source = "the trace has the device's memory but no [memory] events (profile_memory=True records them)"
    else:
        source = "the trace records no memory figures"
    waste = Waste("activation-recompute")
    if layers_off:
        _remove(A, waste, kernels, layers_off)
    waste.evidence = ActivationRecompute(regions_per_step=round(regions, 1),
                                         kernels_per_step=round(sum(len(k) for k in kernels.values()) / n, 1),
                                     time_ms=round(t / n / 1e3, 4), region_bytes=round(region_bytes),
                                     top_ops=[k for k, _ in sorted(by_op.items(), key=lambda kv: -kv[1])[:5]],
                                     total_memory=total, peak_reserved=peak, memory_source=source,
                                     layers_off=layers_off, added_bytes=round(layers_off * region_bytes))
    return waste


def forward_in_backward(A: Analysis) -> list[int]:
    """The forward operators (``FORWARD_OPS``) of the backward pass, in order."""
    ops, phase = A.trace.ops, A.att.ops.phase
    # found without a loop over every op where there are none
    names = FORWARD_OPS & A.op_names()
    # (the ops' names tested in C, not an op at a time in Python: a trace has millions; then the phases of those
    # named as forward operators, a few percent of them: comparing every op's phase took longer than the names)
    return [o for o in compress(count(), map(names.__contains__, map(attrgetter("name"), ops)))
            if phase[o] == "backward"] if names else []


def autograd_nodes(A: Analysis) -> list[int]:
    """Per op, its innermost enclosing autograd node (an evaluate_function range; -1: none)."""
    ops, parent = A.trace.ops, A.att.ops.parent
    node = [-2] * len(ops)
    named: dict[str, bool] = {}  # per name: an autograd node's range
    for o in range(len(ops)):
        if node[o] != -2:
            continue
        p = parent[o]
        if p < o:  # the parent (started first) is done: the usual case, one step
            name = ops[o].name
            is_node = named.get(name)
            if is_node is None:
                is_node = named[name] = name.startswith(NODE)
            node[o] = o if is_node else node[p] if p >= 0 else -1
            continue
        chain, x = [], o
        while x >= 0 and node[x] == -2:
            chain.append(x)
            x = parent[x]
        found = node[x] if x >= 0 else -1
        for y in reversed(chain):
            if ops[y].name.startswith(NODE):
                found = y
            node[y] = found
    return node


def _top_forward(A: Analysis, o: int, region: int) -> str:
    """The outermost forward operator enclosing op ``o`` below the region's node (else ``o``'s name)."""
    ops, parent = A.trace.ops, A.att.ops.parent
    best, x = ops[o].name, o
    while x >= 0 and x != region:
        if ops[x].name in FORWARD_OPS:
            best = ops[x].name
        x = parent[x]
    return best


def _saved_bytes(A: Analysis, fwd: list[int]) -> float:
    """The activations a region's forward operators save for backward: the inputs of its innermost
    forward operators (those with no forward operator under them)."""
    ops, parent = A.trace.ops, A.att.ops.parent
    inner = set(fwd)
    members = set(fwd)
    for o in fwd:
        x = parent[o]
        while x >= 0:
            if x in members:
                inner.discard(x)
            x = parent[x]
    total = 0.0
    for o in inner:
        op = ops[o]
        dims, size = op.dims or [], classify.itemsize(classify.op_dtype(op.types))
        shapes = [classify.dims(d) for d in dims]
        if op.name == "aten::embedding" or not shapes or not shapes[0]:
            continue
        if op.name in ATTENTION:
            saved = [s for s in shapes[:3] if s] + [shapes[0]]
        elif op.name in ("aten::matmul", "aten::einsum"):
            saved = [shapes[0]] + [s for s in shapes[1:2] if s and len(s) >= 3]  # a 2-D operand is a weight
        else:
            saved = [shapes[0]]
        total += sum(classify.numel(s) for s in saved) * size
    return total


def _remove(A: Analysis, w: Waste, kernels: dict[int, list[int]], layers_off: int) -> None:
    """The recompute kernels of ``layers_off`` regions per step removed (the step's first regions, in
    time order), and their launches with them."""
    per_step: dict[int, list[int]] = defaultdict(list)
    for r, idx in kernels.items():
        per_step[A.att.step[idx[0]]].append(r)
    for regions in per_step.values():
        regions.sort(key=lambda r: A.trace.ops[r].ts)
        for r in regions[:layers_off]:
            for i in kernels[r]:
                w.new_dur[i] = 0.0
                w.merged.add(i)
