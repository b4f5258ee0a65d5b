"""Host↔device copy bandwidth over PCIe (or C2C): pinned vs pageable host memory over a size sweep,
the method of CUDA's ``bandwidthTest --memory=pinned|pageable``.

Sweep points are "h2d.pinned.16MiB" etc. (params ``sweep: True``); the headline figures
"h2d.pinned.best", "h2d.pageable.best", "d2h.pinned.best", "d2h.pageable.best" are the best median
over sizes ≥ 16 MiB (small copies measure latency, not bandwidth). Pinned copies are issued with
``non_blocking=True`` from page-locked memory, so the copy engine DMAs straight from the buffer;
pageable copies go through the driver's staging buffer. CUDA events bracket each copy on the
stream, so the host-side staging time of a pageable copy is inside the measured interval.

The peak is the link's maximum generation and width (pcie_gbps per direction). On a machine with
several NUMA nodes the full suite also measures pinned H2D from a buffer on the GPU's own node
and on a remote one: a child process pins itself with ``os.sched_setaffinity`` to that node's CPUs
before allocating, and since page-locked memory is placed on the node of the thread that first
touches it (Linux's default local policy), the buffer lands on that node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

from perfstack.bench import BenchContext, Suite, _gpu, benchmark, timing
from perfstack.model import Facts, Measurement

KIB, MIB, GIB = _gpu.KIB, _gpu.MIB, _gpu.GIB
SIZES_QUICK = (64 * KIB, MIB, 16 * MIB, 256 * MIB)
SIZES_FULL = tuple(4 * KIB * 4**i for i in range(10))  # 4 KiB, 16 KiB, ... 1 GiB
HEADLINE_MIN = 16 * MIB
MEMORY = ("pinned", "pageable")
TIMING: dict[Suite, timing.Budget] = {"quick": {"budget_s": 0.12, "warmup_s": 0.04}, "full": {"budget_s": 0.3, "warmup_s": 0.08}}
NUMA_BYTES = 256 * MIB
NUMA_TIMEOUT_S = 120.0
RESULT = "PERFSTACK_RESULT "


def sizes(suite: Suite) -> tuple[int, ...]:
    return SIZES_FULL if suite == "full" else SIZES_QUICK


def point_name(direction: str, memory: str, nbytes: int) -> str:
    return f"{direction}.{memory}.{_gpu.size_label(nbytes)}"


def headline(points: list[Measurement]) -> Measurement | None:
    """The best sweep point at or above HEADLINE_MIN bytes."""
    big = [m for m in points if m.status == "ok" and m.value is not None and m.params.get("bytes", 0) >= HEADLINE_MIN]
    return max(big, key=lambda m: m.value) if big else None  # type: ignore[arg-type, return-value]


def link_peak(entry: dict[str, Any]) -> tuple[float | None, str, list[str]]:
    """(GB/s per direction of the link at its maximum, where that came from, notes on the current state)."""
    link = _gpu.pcie_link(entry)
    peak = _gpu.pcie_peak(link["gen_max"], link["width_max"])
    src = f"PCIe Gen{link['gen_max']} x{link['width_max']} per direction" if peak else ""
    return peak, src, _gpu.link_notes(link)


# -- the sweep ------------------------------------------------------------------------------
def _sweep(torch: Any, direction: str, suite: Suite, dev: int) -> list[Measurement]:
    todo = sizes(suite)
    top = max(todo)
    free = _gpu.free_bytes(torch, dev)
    if not _gpu.fits(top, free):
        todo = tuple(n for n in todo if _gpu.fits(n, free))
        if not todo:
            return [_gpu.skip(direction, f"{direction}.{m}.best", _gpu.no_room(min(sizes(suite)), free), "GB/s")
                    for m in MEMORY]
        top = max(todo)
    device_buf = torch.randint(0, 256, (top,), dtype=torch.uint8, device=f"cuda:{dev}")
    out: list[Measurement] = []
    for memory in MEMORY:
        try:
            host = torch.empty(top, dtype=torch.uint8, pin_memory=(memory == "pinned"))
            host.copy_(device_buf)  # random bytes, and every page touched before timing
        except RuntimeError as e:
            reason = f"could not allocate {_gpu.size_label(top)} of {memory} host memory: {e}"[:300]
            out.append(_gpu.skip(direction, f"{direction}.{memory}.best", reason, "GB/s"))
            continue
        for n in todo:
            h, d = host[:n], device_buf[:n]
            nb = memory == "pinned"  # a pageable copy is synchronous whatever it is told
            if direction == "h2d":
                fn = partial(d.copy_, h, non_blocking=nb)
            else:
                fn = partial(h.copy_, d, non_blocking=nb)
            samples = timing.measure(fn, timing.CudaTimer(torch), min_reps=10, max_reps=500, **TIMING[suite])
            out.append(_gpu.measurement(direction, point_name(direction, memory, n), samples,
                                        partial(_gpu.gbps, n), "GB/s",
                                        {"sweep": True, "bytes": n, "memory": memory, "direction": direction}))
        del host
    del device_buf
    for memory in MEMORY:
        best = headline([m for m in out if m.params.get("memory") == memory])
        if best is None:
            if not any(m.name == f"{direction}.{memory}.best" for m in out):
                out.append(_gpu.skip(direction, f"{direction}.{memory}.best",
                                     f"no copy of {_gpu.size_label(HEADLINE_MIN)} or more fit", "GB/s"))
            continue
        m = _gpu.measurement(direction, f"{direction}.{memory}.best", best.samples,
                             partial(_gpu.gbps, best.params["bytes"]), "GB/s", {**best.params, "sweep": False,
                                                   "sizes": [x.params["bytes"] for x in out
                                                             if x.params.get("memory") == memory]})
        at = _gpu.size_label(best.params["bytes"])
        m.notes.insert(0, f"best over sizes ≥ {_gpu.size_label(HEADLINE_MIN)}: at {at}")
        out.append(m)
    return out


def _run(ctx: BenchContext, direction: str) -> list[Measurement]:
    import torch

    dev = ctx.device
    entry = _gpu.device_entry(torch, ctx.facts, dev)
    peak, src, link_notes = link_peak(entry)
    with _gpu.on_device(torch, dev), _gpu.sampled(entry.get("index", dev)) as tel:
        out = _sweep(torch, direction, ctx.suite, dev)
    _gpu.finish(out, tel)
    if direction == "h2d" and ctx.full:
        out += numa_compare(ctx, entry)
    headlines = {m.params.get("memory"): m for m in out if m.name.endswith(".best") and m.status == "ok"}
    for m in out:
        memory = m.params.get("memory", "pinned")
        _gpu.judged(m, peak, src, _gpu.practical(f"pcie_{memory}"))
        if not m.params.get("sweep") and m.status == "ok":
            m.notes += link_notes
            if peak is None:
                m.notes.append("PCIe link generation/width unknown: no peak to compare with")
    pinned, pageable = headlines.get("pinned"), headlines.get("pageable")
    if pinned and pageable and pinned.value and pageable.value:
        pinned.notes.append(f"pinned is {pinned.value / pageable.value:.1f}× pageable "
                            "(use pin_memory=True in DataLoaders and non_blocking=True copies)")
    return out


@benchmark("h2d", needs_cuda=True, host_bound=True, doc="""Host-to-device copy bandwidth (GB/s), pinned vs pageable host memory,
           over a size sweep, against the PCIe link's per-direction peak; in the full suite also from the GPU's
           own NUMA node vs a remote one.""")
def run_h2d(ctx: BenchContext) -> list[Measurement]:
    return _run(ctx, "h2d")


@benchmark("d2h", needs_cuda=True, host_bound=True, doc="""Device-to-host copy bandwidth (GB/s), pinned vs pageable host memory,
           over a size sweep, against the PCIe link's per-direction peak.""")
def run_d2h(ctx: BenchContext) -> list[Measurement]:
    return _run(ctx, "d2h")


# -- NUMA: local vs remote host buffer ------------------------------------------------------
def numa_plan(facts: Facts, entry: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | str:
    """(the GPU's node, the remote node farthest from it), both with CPUs, or why not measurable."""
    nodes = [n for n in (facts.value("numa.nodes") or []) if isinstance(n, dict) and n.get("cpus")]
    if len(nodes) < 2:
        return f"{len(nodes)} NUMA node(s) with CPUs: no local vs remote host memory to compare"
    gpu_node = entry.get("numa_node")
    if not isinstance(gpu_node, int) or gpu_node < 0:
        aff = ((facts.value("pcie.topology") or {}).get("numa_affinity") or {}).get(f"GPU{entry.get('index', 0)}")
        gpu_node = int(aff) if isinstance(aff, str) and aff.isdigit() else None
    if gpu_node is None:
        return "the GPU's NUMA node is unknown (firmware did not report it)"
    local = next((n for n in nodes if n.get("id") == gpu_node), None)
    if local is None:
        return f"the GPU's NUMA node {gpu_node} has no CPUs"
    dist = local.get("distances") or []
    ids = [n.get("id") for n in (facts.value("numa.nodes") or []) if isinstance(n, dict)]

    def distance(n: dict[str, Any]) -> int:
        i = ids.index(n["id"]) if n.get("id") in ids else -1
        return dist[i] if 0 <= i < len(dist) else 0
    remote = max((n for n in nodes if n is not local), key=distance)
    return local, remote


def numa_compare(ctx: BenchContext, entry: dict[str, Any]) -> list[Measurement]:
    plan = numa_plan(ctx.facts, entry)
    if isinstance(plan, str):
        return [_gpu.skip("h2d", "h2d.pinned.numa", plan, "GB/s")]
    out = []
    for label, node in zip(("numa-local", "numa-remote"), plan):
        got = _numa_child_run(ctx.device, node["cpus"], ctx.suite)
        params = {"bytes": NUMA_BYTES, "memory": "pinned", "direction": "h2d", "numa_node": node["id"],
                  "gpu_numa_node": plan[0]["id"]}
        if isinstance(got, str):
            out.append(_gpu.error("h2d", f"h2d.pinned.{label}", got, "GB/s", params))
        else:
            out.append(_gpu.measurement("h2d", f"h2d.pinned.{label}", got, lambda s: _gpu.gbps(NUMA_BYTES, s), "GB/s",
                                        params))
    if all(m.status == "ok" and m.value for m in out):
        ratio = out[1].value / out[0].value  # type: ignore[operator]
        out[1].notes.insert(0, f"remote node {plan[1]['id']} delivers {ratio:.0%} of the GPU's own node "
                               f"{plan[0]['id']}: bind data loaders to the GPU's node (numactl --cpunodebind)")
    return out


def _numa_child_run(device: int, cpus: list[int], suite: Suite) -> list[float] | str:
    """Run the pinned H2D measurement in a child bound to ``cpus``; its raw samples, or the error."""
    cfg = json.dumps({"device": device, "cpus": cpus, "bytes": NUMA_BYTES, "timing": TIMING[suite]})
    env = dict(os.environ)
    src_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH", "")) if p)
    try:
        p = subprocess.run([sys.executable, "-c", "from perfstack.bench.transfer import numa_child; numa_child()"],
                           input=cfg, capture_output=True, text=True, timeout=NUMA_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return f"the NUMA-bound child did not finish in {NUMA_TIMEOUT_S:.0f} s"
    lines = [ln[len(RESULT):] for ln in p.stdout.splitlines() if ln.startswith(RESULT)]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the NUMA-bound child failed (exit {p.returncode}): {tail}"[:400]
    samples: list[float] = json.loads(lines[-1])["samples"]  # written by our own child (the lines above)
    return samples


def numa_child() -> None:
    """Entry point of the child: bind to the node's CPUs first, then allocate and measure."""
    cfg = json.loads(sys.stdin.read())
    os.sched_setaffinity(0, cfg["cpus"])
    import torch

    dev, n = cfg["device"], cfg["bytes"]
    torch.cuda.set_device(dev)
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d = torch.randint(0, 256, (n,), dtype=torch.uint8, device=f"cuda:{dev}")
    host.copy_(d)
    samples = timing.measure(lambda: d.copy_(host, non_blocking=True), timing.CudaTimer(torch), min_reps=10,
                             max_reps=2000, **cfg["timing"])
    print(RESULT + json.dumps({"samples": samples}), flush=True)
