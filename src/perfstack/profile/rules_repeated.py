"""Profile rules of work the step repeats: copies of tensors it grows, forward passes it recomputes in the
backward. Registered with ``@profile_check`` like every profile rule (``rules.py`` runs them in its ``ORDER``).
"""

from __future__ import annotations

from perfstack.records.profile import Section
from perfstack.profile.recovery import fmt, recovered, step_ms
from perfstack.profile.registry import Context, PHit, profile_check


@profile_check("copy-bound", "framework", "Device-to-device copies of tensors the step grows or rolls",
               doc="""Finds the device-to-device copies launched by copy operators (cat, stack, index, index_select,
               gather, clone, contiguous, copy_; casts excluded) and the bytes they move (``profile/copies.py``).
               A cat that writes a tensor growing from call to call along the dimension it concatenates (a KV cache
               extended every token) re-copies what the tensor already holds, and so does a cat that rolls a window
               forward (one input a slice of a tensor of the output's shape, by its Input Strides: cat([w[:, 1:],
               new], dim=1)): preallocated or kept as a ring buffer and written in place, each call writes only the
               new part, at 90% of the HBM peak (at least 2.5 µs a copy); the copies' new
               durations are replayed through the step model, and it fires at ≥ 2% of the step. Copies of tensors
               that do not grow are named once they take ≥ 25% of the GPU time (info: no time claimed, since
               whether a view can replace them depends on the code). Not counted: attention over a preallocated
               cache's full length (HF's static cache reads its whole length under a mask).""",
               why="Concatenating onto a tensor copies everything it already holds: a KV cache grown by torch.cat "
                   "reads and writes the whole cache of every layer for every token, so the copies grow with the "
                   "context and soon outweigh the attention that reads the cache once.",
               fix="Preallocate and write in place: a static KV cache (model.generate(..., "
                   "cache_implementation='static') for Hugging Face models; by hand, allocate the cache at its "
                   "maximum length once and write each token into it, cache[:, :, pos] = k, then attend over "
                   "cache[:, :, :pos + 1]); collect pieces in a list and concatenate once, or write them into a "
                   "preallocated buffer; use views (slicing, view, narrow, expand) instead of clone/contiguous/"
                   "index_select where the data need not move; a window rolled forward with cat([w[:, 1:], new], "
                   "dim=1) becomes a ring buffer written in place at w[:, step % M] (where what reads it does not "
                   "need the order: attention, sums, max).",
               measure=("static-kv-cache",),
               assumptions="""Preallocated and written in place, a growing tensor's copies write only the new part
               at 90% of the HBM peak (at least 2.5 µs a copy), and so do a rolled window's, kept as a ring buffer
               (what reads the window is assumed not to need its order; one that does would gather it back, and
               the gain would be lost); copies of tensors that neither grow nor roll are not
               claimed (whether a view can replace them depends on the code: low confidence). Inputs: each copy's
               bytes from Input Dims and its time.""",
               confidence="medium")
def copy_bound(p: Section, ctx: Context) -> PHit | None:
    e = p.waste.copy_bound
    if e is None:
        return None
    ops = "; ".join(f"{o.op} ({', '.join(o.kernels[:2])}) {fmt(o.time_ms)} ms, {o.bytes_per_step / 1e9:.2f} GB, "
                    f"{o.calls_per_step:g} calls" + (f", growing: {o.growth}" if o.growing else "") for o in e.ops[:3])
    ev = (f"device-to-device copies take {fmt(e.copy_ms)} ms per step ({e.pct_of_busy:.0f}% of the GPU time), moving "
          f"{e.bytes_per_step / 1e9:.2f} GB per step (read + written) at {e.gbps:g} GB/s: {ops}")
    if e.growing_ms:
        ms, pct = recovered(p, "copy-bound")
        if pct < 2:
            return None
        return PHit(ev + f"; {fmt(e.growing_ms)} ms of them copy tensors that grow or roll, "
                         f"{e.avoidable_bytes_per_step / 1e9:.2f} GB per step of it data already in place; written in "
                         f"place, the new data takes ≈ {fmt(e.fixed_ms)} ms at {e.hbm_gbps:g} GB/s", ms)
    return PHit(ev + "; none of them grows from call to call, so perfstack cannot tell whether views or in-place "
                     "writes can replace them", 0.0, severity="info", confidence="low")


@profile_check("activation-recompute", "framework", "Activation checkpointing recomputes the forward in backward",
               doc="""Finds forward operators (linear, matmul, norms, attention, activations, embeddings,
               convolutions) run inside an autograd node of the backward pass: checkpointed regions recomputed
               (``profile/recompute.py``). Their GPU time is the recompute's. The memory a region would keep is the
               inputs its forward operators save for backward; the headroom is the device's memory less the
               allocator's peak in the trace's [memory] events (profile_memory=True), 1 GiB for the CUDA context
               and 10% of the device. Where the headroom holds N regions, their recompute is removed and the step
               replayed (fires at ≥ 2%): 'turn checkpointing off for N layers', with the memory it adds. Without
               memory events it cannot tell (info, no time claimed); where the memory does not allow it, silent.""",
               why="Checkpointing trades memory for a second forward pass: about a third more compute per step. "
                   "Where the GPU has memory to spare, that compute buys nothing.",
               fix="Turn activation checkpointing off where the memory allows: drop torch.utils.checkpoint on some "
                   "blocks (checkpoint every other block, or only the first ones), model.gradient_checkpointing_"
                   "disable() for Hugging Face models; check the peak with torch.cuda.max_memory_allocated().",
               measure=("no-checkpointing",),
               assumptions="""Turning checkpointing off for a region removes its recomputed forward and keeps the
               inputs its forward operators save; the headroom is the device's memory less the allocator's peak,
               1 GiB and 10%. Without [memory] events the headroom is unknown: no time claimed, low confidence.""",
               confidence="medium")
def activation_recompute(p: Section, ctx: Context) -> PHit | None:
    e = p.waste.activation_recompute
    step = step_ms(p)
    if e is None or not step:
        return None
    gib = 2.0**30
    ev = (f"the backward pass re-runs the forward of {e.regions_per_step:g} checkpointed regions per step "
          f"({e.kernels_per_step:g} kernels, {fmt(e.time_ms)} ms of GPU time; most in {', '.join(e.top_ops[:3])}); "
          f"each region's activations would take ≈ {e.region_bytes / gib:.2f} GiB")
    if e.layers_off:
        ms, pct = recovered(p, "activation-recompute")
        if pct < 2:
            return None
        return PHit(ev + f"; the device has {(e.total_memory or 0) / gib:.1f} GiB and the allocator's peak was "
                         f"{(e.peak_reserved or 0) / gib:.1f} GiB reserved: turn checkpointing off for "
                         f"{e.layers_off} of the {e.regions_per_step:g} layers, ≈ {e.added_bytes / gib:.1f} GiB more",
                    ms,
                    fix=f"Turn activation checkpointing off for {e.layers_off} of the {e.regions_per_step:g} "
                        f"checkpointed layers (≈ {e.added_bytes / gib:.1f} GiB more at the peak): call "
                        "torch.utils.checkpoint on the other layers only (Hugging Face: gradient_checkpointing_"
                        "disable() when it is all of them); check the peak with torch.cuda.max_memory_allocated().")
    if e.peak_reserved is not None or e.time_ms < 0.02 * step:
        return None  # the memory does not allow it, or too little to matter
    return PHit(ev + f" ({100 * e.time_ms / step:.0f}% of the step); perfstack cannot tell whether the memory allows "
                     f"keeping them: {e.memory_source}; record the trace with profile_memory=True, or measure it: "
                     "perfstack try --fix no-checkpointing", 0.0, severity="info", confidence="low")


@profile_check("sliced-backward", "framework", "A tensor sliced step by step: its backward fills and adds the whole "
               "tensor per slice",
               doc="""Finds a tensor read one slice at a time in a loop (x[:, t] in a time loop: at least 8 slices of
               one tensor per step), whose backward nodes (SelectBackward0, SliceBackward0) each fill a zeroed
               gradient of the whole tensor, copy the slice's gradient into it and add it to the total
               (``profile/scatter.py``). Taken apart once (x.unbind(dim)), the backward stacks the gradients once:
               the tensor's size written and read once at 90% of the HBM peak; every fill, copy and add goes with
               its launch. Replayed through the step model; fires at ≥ 2% of the step.""",
               why="Each x[:, t] in a loop of N steps makes its backward write a full-size zero tensor and add it "
                   "to the gradient so far: N full passes over a tensor N times the slice's size, traffic that grows "
                   "with the square of the sequence length.",
               fix="Take the slices apart once before the loop, along the dimension the loop indexes: xs = "
                   "x.unbind(1) for x[:, t] (x.unbind(0) for x[t]), then use xs[t] in the loop; its backward "
                   "stacks the slices' gradients once. Compiling the whole loop with torch.compile also removes it.",
               assumptions="""Taken apart once with unbind, the backward writes the tensor's size once (one stack)
               at 90% of the HBM peak, reading the slices' gradients once; every fill, copy and add under the slice
               nodes goes, with its launch. Inputs: the kernels under SelectBackward0/SliceBackward0 nodes in the
               profiled steps, and the zero fill's shape (the tensor sliced).""",
               confidence="medium")
def sliced_backward(p: Section, ctx: Context) -> PHit | None:
    e = p.waste.sliced_backward
    if e is None:
        return None
    ms, pct = recovered(p, "sliced-backward")
    if pct < 2:
        return None
    return PHit(f"{e.nodes_per_step:g} slices per step of a {e.source_shape} tensor ({e.source_bytes / 2**20:.0f} MiB) "
                f"run backward as {e.kernels_per_step:g} kernels taking {fmt(e.time_ms)} ms per step: each fills and "
                f"adds a gradient of the whole tensor ({e.filled_bytes_per_step / 1e9:.1f} GB of zeros per step); "
                f"taken apart once, one stack per step writes it in ≈ {fmt(e.fixed_ms)} ms", ms)
