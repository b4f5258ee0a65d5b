"""Configuration drift: settings that differ between nodes that should be identical.

Within one SKU, each configuration key's most common value is the fleet's baseline and every other
value is drift on the nodes that hold it. One odd node among 63 is one row ("driver.version: node-17
has 550.54.15; 63 nodes have 580.159.04"), never 63. A key with no majority (half the nodes on each of
two drivers, say) is reported as split, with no side called wrong.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from perfstack.compare.facts import category
from perfstack.records.fleet import Drift, DriftGroup
from perfstack.fleet.summary import NodeSummary

ABSENT = "(not collected)"


def _value(canon: str | None) -> Any:
    return ABSENT if canon is None else json.loads(canon)


def drift(nodes: list[NodeSummary], sku: str) -> tuple[list[Drift], int]:
    """(drifted keys, number of keys skipped as per-node identities) over the ``ok`` nodes of one SKU.

    A key on which every node has its own value (a boot disk's UUID in the kernel command line, say)
    identifies nodes rather than configuring them; with three nodes or more it is counted, not reported.
    A key collected on some nodes only is drift too: the others say "(not collected)".
    """
    keys: set[str] = set()
    for n in nodes:
        keys.update(n.config)
    out: list[Drift] = []
    unique = 0
    for key in sorted(keys):
        groups: dict[str | None, list[str]] = defaultdict(list)
        for n in nodes:
            groups[n.config.get(key)].append(n.name)
        if len(groups) < 2:
            continue
        if len(nodes) >= 3 and all(len(v) == 1 for v in groups.values()):
            unique += 1
            continue
        ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0] or ""))
        (top, top_nodes) = ordered[0]
        split = 2 * len(top_nodes) <= len(nodes)
        rest = ordered if split else ordered[1:]
        out.append(Drift(key=key, category=category(key), sku=sku,
                         baseline=None if split else _value(top), baseline_count=0 if split else len(top_nodes),
                         odd=[DriftGroup(_value(v), sorted(ns)) for v, ns in rest], split=split))
    # smallest odd groups first: a key on which one node differs is the clearest signal
    out.sort(key=lambda d: (d.split, len(d.odd_nodes), d.category, d.key))
    return out, unique
