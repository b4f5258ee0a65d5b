"""Runs and bundles gathered by any scheduler (srun, a Kubernetes Job, scp): the fleet without Ray.

``gather(paths)`` reads every ``*.json`` Run and every bundle directory under the given paths and
reduces each to a ``NodeSummary`` as it goes, so a thousand bench Runs never sit in memory together.
Everything in the directory is hostile: a truncated file, a foreign JSON document or a bundle that
fails to audit becomes a node that "did not report" with the reason; only an unusable argument (a path
that does not exist, a directory with nothing in it) is an error.

A node is named by the ``fleet.node`` its Run carries (Runs written by ``perfstack fleet``), else by
the file's name up to its first dot (``runs/NODE.json``, ``runs/NODE.bench.json``), or the bundle's
directory name. Runs of one node (its doctor Run and its bench Runs) are merged.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Iterator

from perfstack import redact
from perfstack.errors import InputError, PerfstackError
from perfstack.fleet.summary import NodeSummary, failed, merge, summarize
from perfstack.jsonload import MAX_FILE_BYTES
from perfstack.model import Run

MAX_RUN_BYTES = MAX_FILE_BYTES  # what Run.load reads at most; checked here first, to name the node
BUNDLE_MARKERS = ("env.json", "proc", "cmd")
PARALLEL_FROM = 64  # entries; below this, starting worker processes costs more than it saves


def is_bundle(d: Path) -> bool:
    return d.is_dir() and sum((d / m).exists() for m in BUNDLE_MARKERS) >= 2


def _node_name(run: Run, fallback: str) -> str:
    node = run.meta.fleet.node if run.meta.fleet else None
    return node if node and node.strip() else fallback


def _stem(p: Path) -> str:
    """The node a Run file belongs to: its name up to the first dot, so that NODE.json, NODE.bench.json
    and NODE.gpu0.json are one node's Runs."""
    return p.name.split(".", 1)[0] or p.name


def read_run_file(p: Path) -> NodeSummary | None:
    """One Run file as a summary; None for a fleet Run (the analysis of other files, not a node)."""
    try:
        size = p.stat().st_size
    except OSError as e:
        return failed(_stem(p), f"cannot read {p.name}: {e.strerror or e}", str(p))
    if size > MAX_RUN_BYTES:
        return failed(_stem(p), f"{p.name} is {size / 2**20:.0f} MiB, larger than any Run; not read", str(p))
    try:
        run = Run.load(p)
    except PerfstackError as e:
        return failed(_stem(p), e.message, str(p))
    except (RecursionError, MemoryError) as e:
        return failed(_stem(p), f"{p.name} could not be loaded ({type(e).__name__})", str(p))
    if run.meta.command == "fleet":
        return None
    redact.scrub_run(run)  # a node's Run may come unredacted (an older perfstack, a hand-made file)
    return summarize(run, _node_name(run, _stem(p)), str(p))


def audit_bundle(d: Path) -> NodeSummary:
    from perfstack.audit import audit
    from perfstack.host.bundle import BundleHost
    from perfstack.rules import select_checks
    try:
        run = audit(BundleHost(d), select_checks(), f"bundle {d}")
    except PerfstackError as e:
        return failed(d.name, e.message, str(d))
    return summarize(redact.scrub_run(run), d.name, str(d))


def entries(paths: Iterable[str | Path]) -> list[Path]:
    """The Run files and bundle directories under ``paths`` (one level deep), in a stable order."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise InputError(f"{p} does not exist", hint="give a directory of Runs (perfstack doctor -o DIR/NODE.json) "
                                                         "or of bundles (perfstack capture DIR/NODE)")
        if p.is_file() or is_bundle(p):
            out.append(p)
            continue
        if not p.is_dir():
            raise InputError(f"{p} is neither a Run file nor a directory (a pipe, socket or device)",
                             hint="give Run files or a directory of Runs or bundles")
        found = sorted(c for c in p.iterdir() if (c.is_file() and c.name.endswith(".json")) or is_bundle(c))
        if not found:
            raise InputError(f"{p} holds no Run (*.json) and no bundle directory",
                             hint="each node writes one: perfstack doctor -o DIR/$(hostname).json")
        out.extend(found)
    return out


def read_entry(p: Path) -> NodeSummary | None:
    return audit_bundle(p) if p.is_dir() else read_run_file(p)


def summaries(paths: Iterable[Path], progress: Callable[[str], None] = lambda _: None,
              workers: int | None = None) -> Iterator[NodeSummary]:
    """Each entry's summary. Reading and validating a Run costs far more than analysing it (about
    10 ms for a 400 kB bench Run), so from ``PARALLEL_FROM`` entries on the reading is spread over
    worker processes; only the small summaries come back."""
    paths = list(paths)
    workers = workers if workers is not None else (os.cpu_count() or 1)
    if workers > 1 and len(paths) >= PARALLEL_FROM:
        # spawn, not fork: the caller may hold threads (a Ray client, a progress bar)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, 32), mp_context=ctx) as pool:
            for p, s in zip(paths, pool.map(read_entry, paths, chunksize=16)):
                progress(p.name)
                if s is not None:
                    yield s
        return
    for p in paths:
        progress(p.name)
        s = read_entry(p)
        if s is not None:
            yield s


def gather(paths: Iterable[str | Path], progress: Callable[[str], None] = lambda _: None,
           workers: int | None = None) -> list[NodeSummary]:
    """Every node under ``paths``, merged by name, in name order."""
    nodes: dict[str, NodeSummary] = {}
    for s in summaries(entries(paths), progress, workers):
        nodes[s.name] = merge(nodes[s.name], s) if s.name in nodes else s
    if not nodes:
        raise InputError("no node Runs found: the files given are all fleet Runs")
    return [nodes[k] for k in sorted(nodes)]
