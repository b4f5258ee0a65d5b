"""The busy-GPU passes are written for large traces (a chain's verdict worked out once per chain of the same
operators' calls, what a kernel adds to worked out once per kind of event, a fix's scenario shared by the
what-ifs that replay it): each must give what the plain statement gives, to the last bit, on real traces."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfstack.profile import busy, classify, copies, efficiency, fusion, precision, recompute, waste
from perfstack.profile.analysis import Analysis
from perfstack.profile.attribute import ATTN_MATH, CASTING, COMPILED, COPYING
from perfstack.profile.trace import load
from perfstack.records.profile import GemmMisaligned, MisalignedGroup, UnfusedElementwise
from perfstack.specs import lookup
from perfstack.specs.table import GpuSpec

T = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
TRACES = ["validation/h100/gpt2-slow.pt.trace.json.gz", "validation/h100/resnet50-slow.pt.trace.json.gz",
          "validation/h100/llama-slow.pt.trace.json.gz", "validation/h100/decode-slow.pt.trace.json.gz",
          "validation/h200-holdout/rnn-decoder.pt.trace.json.gz", "validation/h100/attention-slow.pt.trace.json.gz",
          "validation/h200-holdout/hf-grad-ckpt.pt.trace.json.gz", "h100/gemm-misaligned.pt.trace.json.gz"]


def fusion_plain(A: Analysis, bw: float) -> waste.Waste:
    """``fusion.fusion`` stated plainly: each chain's members grouped, and each group's traffic found, one chain
    at a time."""
    gpu, att, flags, costs = A.gpu, A.att, A.att.ops.flags, A.event_costs()
    member = [c in ("elementwise", "copy") and g.kind == "kernel" and not g.name.startswith("triton_")
              and (o < 0 or not flags[o] & COMPILED) and ph != "optimizer"
              for c, g, o, ph in zip(att.category, gpu, att.op, att.phase)]
    w = waste.Waste("unfused-elementwise")
    training = "backward" in att.phase
    chains = eager = fused_total = 0.0
    ops: dict[str, float] = defaultdict(float)
    n_kernels = 0
    for run in fusion._stream_runs(A, member):
        if len(run) < 2:
            continue
        groups: dict[int, list[int]] = defaultdict(list)
        bigs: dict[int, list[float]] = defaultdict(list)
        unknown = 0.0
        for i in run:
            c = costs[i]
            if c is None or not c.big or not c.big_numel:
                unknown += gpu[i].dur
            else:
                groups[c.big_numel].append(i)
                bigs[c.big_numel].append(c.big)
        t = sum(gpu[i].dur for i in run)
        fused = unknown
        scale: dict[int, float] = {}
        for numel, members in groups.items():
            eager_g = sum(gpu[i].dur for i in members)
            fused_g = min(eager_g, max(fusion.passes(A, members, numel, training) * max(bigs[numel]) / (bw * 1e3),
                                       waste.MIN_KERNEL_US))
            fused += fused_g
            for i in members:
                scale[i] = fused_g / eager_g if eager_g else 1.0
        if fused >= t * 0.98:
            continue
        chains += 1
        n_kernels += len(run)
        eager += t
        fused_total += fused
        for members in groups.values():
            w.merged.update(members[1:])
        for i in run:
            w.new_dur[i] = gpu[i].dur * scale.get(i, 1.0)
            o = att.op[i]
            ops[A.trace.ops[o].name if o >= 0 else classify.short_name(gpu[i].name, 40)] += gpu[i].dur
    n = max(1, len(A.windows))
    w.evidence = UnfusedElementwise(chains_per_step=round(chains / n, 1), kernels_per_step=round(n_kernels / n, 1),
                                    eager_ms=round(eager / n / 1e3, 3), fused_ms=round(fused_total / n / 1e3, 3),
                                    top_ops=[k for k, _ in sorted(ops.items(), key=lambda kv: -kv[1])[:5]])
    return w


@pytest.fixture(scope="module", params=TRACES)
def analysis(request: pytest.FixtureRequest) -> Analysis:
    return Analysis(load(T / request.param))


def test_fusion_worked_out_once_per_chain_of_the_same_calls_gives_the_plain_verdict(analysis: Analysis):
    spec = lookup("h100-sxm")
    bw = waste.hbm_gbps(spec)
    assert bw
    fast, plain = fusion.fusion(analysis, spec), fusion_plain(analysis, bw)
    assert fast is not None
    if not plain.new_dur:
        return
    assert [(i, d.hex()) for i, d in fast.new_dur.items()] == [(i, d.hex()) for i, d in plain.new_dur.items()]
    assert list(fast.merged) == list(plain.merged)
    assert fast.evidence == plain.evidence


def test_compile_graphs_takes_the_fusion_fix_scenario_already_made():
    from dataclasses import replace

    from perfstack.profile import actions, summary
    from perfstack.profile.analyze import analyze
    from perfstack.records.profile import Launch
    analysed = analyze(load(T / "validation/h100/gpt2-slow.pt.trace.json.gz"))
    p, A, spec = analysed.section, analysed.analysis, lookup("h100-sxm")
    tl = actions.timeline(A.trace, A.att, A.windows, A.cs)
    assert tl is not None
    found = summary.find_waste(A, spec)
    fused = next(w for w in found if w.id == "unfused-elementwise")
    launch = p.launch or Launch()
    graph = launch.kernels_per_step >= 50 and not launch.graph_launches_per_step
    want = replace(summary._fix_scenario(fused, A, tl, True), name=summary.COMPILE_GRAPHS, graph=graph)
    assert want.no_dispatch  # fused launches go: the part made apart where the fixes' own are not cpu-free
    for cpu_free in (False, True):
        scenarios = {w.id: summary._fix_scenario(w, A, tl, cpu_free) for w in found if w.new_dur}
        for made in (scenarios, {}):
            got = summary._compile_graphs(p, A, tl, found, made, cpu_free)
            assert got is not None
            assert (got.name, got.graph, got.no_dispatch) == (want.name, want.graph, want.no_dispatch)
            assert list(got.g_dur or ()) == list(want.g_dur or ())
            assert list(got.g_bubble or ()) == list(want.g_bubble or ())


def attention_region_plain(A: Analysis) -> tuple[list[int], float, bool, bool]:
    """``busy._attention_region`` stated plainly: every event of the steps looked at."""
    att, flags = A.att, A.att.ops.flags
    region, gemm_flops = [], 0.0
    math_path = masked = False
    for i, (s, o, g, cat, ph, c) in enumerate(zip(att.step, att.op, A.gpu, att.category, att.phase, A.event_costs())):
        if s < 0 or o < 0 or g.kind != "kernel" or ph == "optimizer":
            continue
        if cat == "attention" and not flags[o] & ATTN_MATH:
            continue
        hit = bool(flags[o] & ATTN_MATH)
        math_path = math_path or hit
        if c and c.gemm:
            if busy._scores_gemm(c.gemm):
                hit = True
                gemm_flops += (c.flops or 0) * (g.dur / max(1e-9, A.op_time(o)))
        elif not hit and (op := A.trace.ops[o]).dims:
            hit = any(busy._scores_like(classify.dims(d)) for d in op.dims or ())
            masked = masked or (hit and op.name in busy.MASKS)
        if hit:
            region.append(i)
    return region, gemm_flops, math_path, masked


def test_attention_region_looked_for_once_per_cost_gives_the_plain_region(analysis: Analysis):
    region, flops, math_path, masked = busy._attention_region(analysis)
    want = attention_region_plain(analysis)
    assert (region, flops.hex(), math_path, masked) == (want[0], want[1].hex(), want[2], want[3])


def misaligned_plain(A: Analysis, spec: GpuSpec) -> waste.Waste | None:
    """``precision.gemm_misaligned`` stated plainly: each kernel's shape classified on its own, its FLOPs found
    again for the new duration."""
    gpu, att, costs = A.gpu, A.att, A.event_costs()
    bad: dict[str, list[int]] = defaultdict(list)
    good_rate: dict[str, float] = {}
    for i in A.in_steps("gemm"):
        g, c = gpu[i], costs[i]
        if not c or not c.gemm or not c.flops:
            continue
        share = c.flops * g.dur / max(1e-9, A.op_time(att.op[i]))
        if classify.misaligned(c.gemm, c.dtype):
            bad[c.dtype or "?"].append(i)
        elif share >= 1e9 and not classify.is_gemv(c.gemm):
            good_rate[c.dtype or "?"] = max(good_rate.get(c.dtype or "?", 0.0), share / g.dur)
    if not bad:
        return None
    w = waste.Waste("gemm-misaligned")
    parts = []
    for dt, idx in bad.items():
        rate = good_rate.get(dt)
        src = "aligned GEMMs in this trace"
        if not rate:
            d = {"fp32": "tf32"}.get(dt, dt)
            peak = spec.peak_tflops(d) if d in ("bf16", "fp16", "fp8", "int8", "tf32") else None
            frac = waste.TF32_PRACTICAL if d == "tf32" else waste.BF16_PRACTICAL
            if not peak:
                continue
            rate, src = peak * frac * 1e6, f"{frac:.0%} of the {d} peak"
        t = fl = 0.0
        shapes: dict[str, int] = defaultdict(int)
        for i in idx:
            c = A.known_cost(att.op[i])
            f = (c.flops or 0.0) * gpu[i].dur / max(1e-9, A.op_time(att.op[i]))
            w.new_dur[i] = min(gpu[i].dur, f / rate)
            t += gpu[i].dur
            fl += f
            shapes[c.shape] += 1
        parts.append(MisalignedGroup(dtype=dt, time_ms=round(t / max(1, len(A.windows)) / 1e3, 3),
                                     tflops=round(fl / (t * 1e-6) / 1e12, 1), expect_tflops=round(rate / 1e6, 1),
                                     source=src, shapes=[s for s, _ in sorted(shapes.items(), key=lambda kv: -kv[1])[:3]]))
    w.evidence = GemmMisaligned(parts)
    return w


def test_misaligned_gemms_classified_once_per_cost_give_the_plain_finding(analysis: Analysis):
    spec = lookup("h100-sxm")
    assert spec is not None
    fast, plain = precision.gemm_misaligned(analysis, spec), misaligned_plain(analysis, spec)
    assert (fast is None) == (plain is None)
    if fast is not None and plain is not None:
        assert [(i, d.hex()) for i, d in fast.new_dur.items()] == [(i, d.hex()) for i, d in plain.new_dur.items()]
        assert fast.evidence == plain.evidence


def test_a_copy_call_described_once_per_name_and_arguments_is_the_description_replaced(analysis: Analysis):
    memo: dict = {}
    roots = sorted({c.op for c in copies._calls(analysis) if c.op >= 0})
    for r in roots:
        assert copies._describe(analysis, r, memo) == replace(copies._description(analysis.trace.ops[r]), op=r,
                                                               events=[])


def test_forward_operators_of_the_backward_pass_are_the_plain_ones(analysis: Analysis):
    ops, phase = analysis.trace.ops, analysis.att.ops.phase
    want = [o for o in range(len(ops)) if phase[o] == "backward" and ops[o].name in recompute.FORWARD_OPS]
    assert recompute.forward_in_backward(analysis) == want


def rows_plain(A: Analysis) -> dict[str, Any]:
    """The kernel pass's accumulators stated plainly: every event's rows looked up and its shares found, one
    event at a time."""
    att, ops, costs = A.att, A.trace.ops, A.event_costs()
    op_time: dict[int, float] = defaultdict(float)
    op_compute: dict[int, float] = defaultdict(float)
    for s, o, c, g in zip(att.step, att.op, att.category, A.gpu):
        if s >= 0 and o >= 0:
            op_time[o] += g.dur
            if c in classify.COMPUTE:
                op_compute[o] += g.dur
    names: dict[str, dict[str, Any]] = {}
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    gemms: dict[tuple[Any, ...], dict[str, Any]] = {}
    memcpy: dict[tuple[Any, ...], dict[str, Any]] = {}
    phases: dict[str, float] = defaultdict(float)
    busy_us = triton_us = 0.0
    precision = A.trace.meta.get("float32_matmul_precision")
    for s, g, c, ph, o, cost in zip(att.step, A.gpu, att.category, att.phase, att.op, costs):
        if s < 0:
            continue
        busy_us += g.dur
        k = names.setdefault(g.name, {"name": classify.short_name(g.name), "category": c, "count": 0,
                                      "time_us": 0.0})
        k["count"] += 1
        k["time_us"] += g.dur
        phases[ph or "unknown"] += g.dur
        if g.name.startswith("triton_"):
            triton_us += g.dur
        if g.kind == "memcpy":
            key = classify.memcpy_kind(g.name)
            m = memcpy.setdefault(key, {"direction": key[0], "memory": key[1], "count": 0, "bytes": 0,
                                        "time_us": 0.0})
            m["count"] += 1
            m["bytes"] += g.bytes or 0
            m["time_us"] += g.dur
            continue
        share = (g.dur / op_time[o] if op_time[o] else 0.0) if o >= 0 else 0.0
        opname = ops[o].name if o >= 0 else "(no operator)"
        fshare = g.dur / op_compute[o] if c in classify.COMPUTE and op_compute.get(o) else 0.0
        f = cost.flops * fshare if cost and cost.flops and fshare else None
        b = cost.bytes * share if cost and cost.bytes else None
        dtype = cost.dtype if cost else None
        row = rows.setdefault((opname, c, dtype), {
            "op": opname, "category": c, "dtype": dtype, "kernels": 0, "time_us": 0.0, "flops": 0.0, "bytes": 0.0,
            "counted_us": 0.0, "bytes_us": 0.0, "calls": set()})
        row["kernels"] += 1
        row["time_us"] += g.dur
        row["calls"].add(o)
        if f:
            row["flops"] += f
            row["counted_us"] += g.dur
        if b:
            row["bytes"] += b
            row["bytes_us"] += g.dur
        if cost and cost.gemm and c in ("gemm", "attention"):
            tc = classify.tensor_cores(g.name, cost.dtype, precision)
            key = (cost.dtype or "?", tc, bool(classify.misaligned(cost.gemm, cost.dtype)),
                   classify.is_gemv(cost.gemm), c)
            gr = gemms.setdefault(key, {"dtype": cost.dtype, "tensor_cores": tc, "misaligned": key[2], "gemv": key[3],
                                        "category": c, "count": 0, "time_us": 0.0, "flops": 0.0, "bytes": 0.0,
                                        "flops_time_us": 0.0, "shapes": {}})
            gr["count"] += 1
            gr["time_us"] += g.dur
            if f:
                gr["flops"] += f
                gr["bytes"] += b or 0.0
                gr["flops_time_us"] += g.dur
            gr["shapes"][cost.shape] = gr["shapes"].get(cost.shape, 0) + 1
    return {"names": names, "ops": rows, "gemms": gemms, "memcpy": memcpy, "phases": dict(phases),
            "triton_us": triton_us, "busy_us": busy_us}


def test_kernel_rows_worked_out_once_per_kind_of_event_are_the_plain_rows(analysis: Analysis):
    fast = efficiency._Rows(analysis)
    for field, want in rows_plain(analysis).items():
        got = getattr(fast, field)
        got = dict(got) if isinstance(got, dict) else got
        assert repr(got) == repr(want), field  # (repr: the floats to the last digit, the keys in their order)


def calls_plain(A: Analysis) -> list[copies._Call]:
    """``copies._calls`` stated plainly: every event of the steps read, its kind from the event itself."""
    gpu, att, flags = A.gpu, A.att, A.att.ops.flags
    by_root: dict[int, copies._Call] = {}
    loose: list[copies._Call] = []
    for i, (s, ph, g, o) in enumerate(zip(att.step, att.phase, gpu, att.op)):
        if s < 0 or ph == "optimizer" or g.kind == "memset":
            continue
        if g.kind == "memcpy" and classify.memcpy_kind(g.name)[0] != "DtoD":
            continue
        fl = flags[o] if o >= 0 else 0
        r = copies._root(A, o) if fl & COPYING and not fl & (CASTING | COMPILED) else -1
        if r < 0:
            if g.kind == "memcpy" and g.bytes:
                loose.append(copies._Call(-1, "Memcpy DtoD", [i], g.dur, 2.0 * g.bytes))
            continue
        c = by_root.get(r)
        if c is None:
            c = by_root[r] = replace(copies._description(A.trace.ops[r]), op=r, events=[])
        c.events.append(i)
        c.time += g.dur
        if g.kind == "memcpy" and g.bytes and not c.shape:
            c.nbytes += 2.0 * g.bytes
    for c in by_root.values():
        if not c.itemsize and c.shape:
            c.itemsize = copies._itemsize_from_kernels(A, c.events)
            c.nbytes = 2.0 * classify.numel(c.shape) * c.itemsize
    out = [c for c in by_root.values() if c.events] + loose
    out.sort(key=lambda c: A.trace.ops[c.op].ts if c.op >= 0 else gpu[c.events[0]].ts)
    return out


def test_copy_calls_read_from_the_categories_are_the_plain_calls(analysis: Analysis):
    assert repr(copies._calls(analysis)) == repr(calls_plain(analysis))  # (repr: floats to the last digit)
