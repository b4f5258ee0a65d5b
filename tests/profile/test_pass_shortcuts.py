"""The busy-GPU passes are written for large traces (a chain's verdict worked out once per chain of the same
operators' calls, a fix's scenario shared by the what-ifs that replay it): each must give what the plain
statement gives, to the last bit, on real traces."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from perfstack.profile import classify, waste
from perfstack.profile.analysis import Analysis
from perfstack.profile.attribute import COMPILED
from perfstack.profile.trace import load
from perfstack.records.profile import UnfusedElementwise
from perfstack.specs import lookup

T = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
TRACES = ["validation/h100/gpt2-slow.pt.trace.json.gz", "validation/h100/resnet50-slow.pt.trace.json.gz",
          "validation/h100/llama-slow.pt.trace.json.gz", "validation/h100/decode-slow.pt.trace.json.gz",
          "validation/h200-holdout/rnn-decoder.pt.trace.json.gz"]


def fusion_plain(A: Analysis, bw: float) -> waste.Waste:
    """``waste.fusion`` stated plainly: each chain's members grouped, and each group's traffic found, one chain
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
    for run in waste._stream_runs(A, member):
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
            fused_g = min(eager_g, max(waste.passes(A, members, numel, training) * max(bigs[numel]) / (bw * 1e3),
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
    fast, plain = waste.fusion(analysis, spec), fusion_plain(analysis, bw)
    assert fast is not None
    assert [(i, d.hex()) for i, d in fast.new_dur.items()] == [(i, d.hex()) for i, d in plain.new_dur.items()]
    assert list(fast.merged) == list(plain.merged)
    assert fast.evidence == plain.evidence


def test_compile_graphs_takes_the_fusion_fix_scenario_already_made():
    from dataclasses import replace

    from perfstack.profile import cpu, summary
    from perfstack.profile.analyze import analyze
    from perfstack.records.profile import Launch
    analysed = analyze(load(T / "validation/h100/gpt2-slow.pt.trace.json.gz"))
    p, A, spec = analysed.section, analysed.analysis, lookup("h100-sxm")
    tl = cpu.timeline(A.trace, A.att, A.windows, A.cs)
    assert tl is not None
    found = waste.detect(A, spec) + summary._patterns(A, spec)
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
