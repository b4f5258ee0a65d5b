"""Inter-node all-reduce: the fleet's bus bandwidth, of node pairs, and the bisection to a slow node.

Pure functions and records only; the Ray plumbing that measures a group of machines is in
``allreduce_ray``. One rank per machine: the figure is the network between machines, not NVLink or
PCIe inside one. A group's figure is the best bus bandwidth of its sweep (nccl-tests' busbw, factor
2(n-1)/n, which makes groups of different sizes comparable on a ring).

``localize(machines, measure)`` measures the whole fleet, then, with few machines, every pair; with
more, a bisection: split the group in halves, measure both, go into the slower half while it is
clearly slower (below ``SLOW_RATIO`` of the other), so one slow machine is found in O(log n) rounds.
A pair it ends on is told apart by pairing each of its two with a machine of a fast half. Each
machine's figure is the best of the groups it was measured in (a machine with one good group has
a good network path; a slow machine is slow in every group it is in), and a machine whose figure is
below ``SLOW_RATIO`` of the fleet's median, and again when paired once more with the fastest
machine (``_confirm``: one all-reduce can be slowed by other traffic), is named. With all pairs, a pair slow while both its
machines are fast elsewhere is a slow link.
"""

from __future__ import annotations

import statistics
from itertools import combinations
from typing import TYPE_CHECKING, Callable

from perfstack.bench.collectives import busbw_gbps
from perfstack.records.fleet import Comms, CommsMethod, Group, GroupWhy, Point, Suspect

if TYPE_CHECKING:
    from perfstack.records.fleet import FleetAnalysis

SLOW_RATIO = 0.8  # a group or machine below this share of the reference is slow (the fleet's 20% rule)
FAST_QUANTILE = 0.1  # of a size's samples (``fast_time``)
ALL_PAIRS_UP_TO = 4  # machines; all pairs of 4 is 6 rounds, a bisection of 4 would be 2-4
OP = "all_reduce"


def fast_time(samples_s: list[float]) -> float:
    """The time at FAST_QUANTILE of the samples: other traffic and other processes on the CPUs only
    ever add time to a call, while a slow node or link slows every call, so the fast end of the
    samples says what the path can do and is far steadier than the median from one all-reduce to the
    next (on a loaded 2-core test box, pairs' medians spread ±35%)."""
    xs = sorted(samples_s)
    return xs[min(len(xs) - 1, int(FAST_QUANTILE * len(xs)))]


def point(nbytes: int, n: int, samples_s: list[float]) -> Point:
    """A size's figures from the per-call times (the slowest rank's, per sample): the median's time and
    busbw, as ``perfstack bench`` reports them, and the busbw at the fast quantile, which the
    localization compares."""
    med, fast = statistics.median(samples_s), fast_time(samples_s)
    return Point(bytes=nbytes, time_us=round(med * 1e6, 2), busbw_gbps=round(busbw_gbps(OP, n, nbytes, med), 4),
                 samples=len(samples_s), fast_busbw_gbps=round(busbw_gbps(OP, n, nbytes, fast), 4))


def halves(group: list[str]) -> tuple[list[str], list[str]]:
    """The first and second half, in the given order (the larger half first when odd)."""
    k = (len(group) + 1) // 2
    return group[:k], group[k:]


def slower(a: Group, b: Group) -> Group | None:
    """The clearly slower of two measured groups (below SLOW_RATIO of the other), or None when they
    are alike, one failed, or one has no figure (a single machine: no traffic)."""
    x, y = a.busbw, b.busbw
    if x is None or y is None:
        return None
    if x < SLOW_RATIO * y:
        return a
    if y < SLOW_RATIO * x:
        return b
    return None


Measure = Callable[[list[str], GroupWhy], Group]


def _pairs(machines: list[str], measure: Measure) -> list[Group]:
    return [measure([a, b], "pair") for a, b in combinations(machines, 2)]


def _bisect(machines: list[str], measure: Measure) -> list[Group]:
    """Halves into the clearly slower half down to three machines (their three pairs) or two (each
    paired with a machine of a fast half); alike halves end it (a low fleet figure is then between
    them, a shared link, or nowhere)."""
    done: list[Group] = []
    group, healthy = machines, ""
    while len(group) > 3:
        a, b = halves(group)
        ga, gb = measure(a, "half"), measure(b, "half")
        done += [ga, gb]
        slow = slower(ga, gb)
        if slow is None:
            return done
        healthy = (gb if slow is ga else ga).machines[0]
        group = slow.machines
    if len(group) == 3:
        done += _pairs(group, measure)
    elif len(group) == 2 and healthy:
        done += [measure([m, healthy], "probe") for m in group]
    return done


def per_machine(groups: list[Group]) -> dict[str, float]:
    out: dict[str, float] = {}
    for g in groups:
        bw = g.busbw
        if bw is None or len(g.machines) < 2:
            continue
        for m in g.machines:
            out[m] = max(out.get(m, 0.0), bw)
    return out


def suspects(groups: list[Group], names: dict[str, str]) -> tuple[list[Suspect], float | None]:
    """Machines below SLOW_RATIO of the machines' median, and (from pairs) slow links between two
    machines that are fast elsewhere."""
    best = per_machine(groups)
    if len(best) < 3:  # a median of two cannot say which one is odd
        return [], statistics.median(best.values()) if best else None
    med = statistics.median(best.values())
    out = [Suspect(kind="node", machines=[m], busbw_gbps=bw, median_gbps=med,
                   text=f"node {names.get(m, m)}: all-reduce busbw {bw:.2f} GB/s vs fleet median "
                        f"{med:.2f} GB/s ({(bw / med - 1) * 100:+.0f}%)")
           for m, bw in sorted(best.items(), key=lambda kv: kv[1]) if bw < SLOW_RATIO * med]
    slow_nodes = {m for s in out for m in s.machines}
    pair_bw = [g.busbw for g in groups if g.why == "pair" and g.busbw is not None]
    pair_med = statistics.median(pair_bw) if pair_bw else None
    for g in groups:
        bw = g.busbw
        if g.why != "pair" or bw is None or pair_med is None or slow_nodes & set(g.machines):
            continue
        if bw < SLOW_RATIO * pair_med:
            a, b = (names.get(m, m) for m in g.machines)
            out.append(Suspect(kind="link", machines=list(g.machines), busbw_gbps=bw, median_gbps=pair_med,
                               text=f"link {a} - {b}: all-reduce busbw {bw:.2f} GB/s vs pair median {pair_med:.2f} "
                                    "GB/s; both nodes are fast with others"))
    return out, med


def localize(machines: list[str], measure: Measure, names: dict[str, str] | None = None,
             backend: str = "") -> Comms:
    """The whole fleet, then pairs or the bisection, over ``measure(machines, why) -> Group``.
    Machines that never joined a rendezvous are set aside (named in ``failed``) and the fleet is
    measured again without them, once."""
    names = names or {m: m for m in machines}
    method: CommsMethod = "pairs" if len(machines) <= ALL_PAIRS_UP_TO else "bisection"
    out = Comms(backend=backend, method=method, names=names)
    live = list(machines)
    whole = measure(live, "fleet")
    out.groups.append(whole)
    if whole.error and whole.missing and len(set(live) - set(whole.missing)) >= 2:
        for m in whole.missing:
            out.failed[m] = f"did not join the all-reduce: {whole.error}"
        live = [m for m in live if m not in whole.missing]
        whole = measure(live, "fleet")
        out.groups.append(whole)
    if whole.error:
        for m in whole.missing or live:
            out.failed.setdefault(m, f"all-reduce of the fleet failed: {whole.error}")
        out.notes.append("the all-reduce over the fleet failed; no pairs or bisection were measured")
        return out
    method = "pairs" if len(live) <= ALL_PAIRS_UP_TO else "bisection"
    out.method = method
    if len(live) >= 3:
        out.groups += _pairs(live, measure) if method == "pairs" else _bisect(live, measure)
    else:
        out.notes.append("two machines: the fleet is one pair; which of the two is slow cannot be told")
    for g in out.groups:
        if g.error and g.why != "fleet":
            out.notes.append(f"{g.why} {', '.join(names.get(m, m) for m in g.machines)} failed: {g.error}")
    out.groups += _confirm(out.groups, measure, names)
    out.per_machine = {m: round(v, 4) for m, v in per_machine(out.groups).items()}
    out.suspects, out.median_gbps = suspects(out.groups, names)
    return out


def _confirm(groups: list[Group], measure: Measure, names: dict[str, str]) -> list[Group]:
    """Each machine about to be named, measured once more with the fastest machine: a slow node is
    slow every time, while one all-reduce can be slowed by other traffic on the network (or, on a
    test box, by other processes on its CPUs); a fast answer clears it (its figure is its best)."""
    found, _ = suspects(groups, names)
    best = per_machine(groups)
    nodes = [s.machines[0] for s in found if s.kind == "node"]
    fastest = max((m for m in best if m not in nodes), key=lambda m: best[m], default=None)
    return [measure([m, fastest], "confirm") for m in nodes] if fastest else []


def attach(analysis: FleetAnalysis, comms: Comms) -> FleetAnalysis:
    """The all-reduce into the fleet analysis: its record (``fleet.comms``), and its slow nodes, slow
    links and machines that did not join in the ranked list (a slow node critical, as a figure 20%
    below the median is; a link a warning on both its ends)."""
    from perfstack.fleet.rank import WEIGHT
    from perfstack.records.fleet import NodeRank
    from perfstack.model import Severity
    analysis.comms = comms
    hits: list[tuple[str, str, str]] = []  # (node, severity, reason)
    for s in comms.suspects:
        sev = "critical" if s.kind == "node" else "warning"
        hits += [(comms.names.get(m, m), sev, s.text) for m in s.machines]
    hits += [(comms.names.get(m, m), "critical", why) for m, why in comms.failed.items()]
    by_node = {r.node: r for r in analysis.ranking}
    for node, sev, reason in hits:
        r = by_node.setdefault(node, NodeRank(node, sev, 0))
        if r not in analysis.ranking:
            analysis.ranking.append(r)
        r.reasons.append(reason)
        r.score += WEIGHT[sev]
        r.severity = max(r.severity, sev, key=lambda x: Severity(x).rank)
    analysis.ranking.sort(key=lambda r: (-Severity(r.severity).rank, -r.score, r.node))
    return analysis
