"""Doctor findings that some nodes of a SKU have and others do not.

A finding every node shares is the fleet's configuration (fix it once, everywhere). A finding only
some nodes have is a node problem: a GPU fallen off the bus, a link trained low, a setting someone
changed by hand. These are what ``uneven`` returns, fewest nodes first.
"""

from __future__ import annotations

from collections import defaultdict

from perfstack.records.fleet import SharedFinding, UnevenFinding
from perfstack.fleet.summary import FindingRef, NodeSummary
from perfstack.model import Severity


def _worst(refs: list[FindingRef]) -> str:
    return max((r.severity for r in refs), key=lambda s: Severity(s).rank)


def findings(nodes: list[NodeSummary], sku: str) -> tuple[list[UnevenFinding], list[SharedFinding]]:
    """(findings on some nodes only, findings on every node) over the ``ok`` nodes of one SKU. A node
    counts as lacking a finding only where its Run ran that check to a verdict: a bench Run that ran
    four checks does not lack the doctor's ninety."""
    by_id: dict[str, dict[str, list[FindingRef]]] = defaultdict(lambda: defaultdict(list))
    for n in nodes:
        for f in n.findings:
            by_id[f.id][n.name].append(f)
    uneven: list[UnevenFinding] = []
    shared: list[SharedFinding] = []
    for fid, per_node in by_id.items():
        refs = [r for rs in per_node.values() for r in rs]
        first = refs[0]
        of = sum(1 for n in nodes if n.name in per_node or fid in n.checked)
        if len(per_node) == of:
            shared.append(SharedFinding(id=fid, severity=_worst(refs), title=first.title, sku=sku, nodes=of))
            continue
        uneven.append(UnevenFinding(
            id=fid, severity=_worst(refs), layer=first.layer, title=first.title, sku=sku,
            nodes=sorted(per_node), of=of,
            subjects={n: sorted(r.subject for r in rs if r.subject) for n, rs in sorted(per_node.items())},
            evidence={n: rs[0].evidence for n, rs in sorted(per_node.items())}))
    uneven.sort(key=lambda u: (-Severity(u.severity).rank, len(u.nodes), u.id))
    shared.sort(key=lambda s: (-Severity(s.severity).rank, s.id))
    return uneven, shared
