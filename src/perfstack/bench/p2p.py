"""GPU→GPU copy bandwidth for every ordered pair of GPUs ("p2p.<src>-<dst>", GB/s).

Each figure is a large contiguous ``dst.copy_(src)`` from device src to device dst on PyTorch's
default path: with peer access (torch enables it where ``can_device_access_peer`` says so) the
copy engine writes straight over NVLink or PCIe; without it the driver stages through host memory.
PyTorch issues the copy on the source device's stream and makes the destination's current stream
wait for it, so CUDA events recorded on the destination's stream bracket the whole copy.

The peak is the per-direction NVLink bandwidth (spec nvlink_gbps_per_gpu / 2, scaled by the share
of the GPU's links that join this pair) when ``nvidia-smi topo -m`` shows NV<n> between the two,
else the slower of the two PCIe links.
"""

from __future__ import annotations

import re
from typing import Any

from perfstack.bench import BenchContext, Suite, _gpu, benchmark, timing
from perfstack.model import Facts, Measurement

MIB, GIB = _gpu.MIB, _gpu.GIB
BYTES = {"quick": 256 * MIB, "full": GIB}
TIMING: dict[Suite, timing.Budget] = {"quick": {"budget_s": 0.2, "warmup_s": 0.05}, "full": {"budget_s": 0.5, "warmup_s": 0.1}}


def pair_link(facts: Facts, a: int, b: int) -> str | None:
    """The topology matrix cell between NVML GPUs a and b ("NV18", "PIX", "SYS", ...), if known."""
    topo = facts.value("pcie.topology") or {}
    cell = ((topo.get("links") or {}).get(f"GPU{a}") or {}).get(f"GPU{b}")
    return cell if isinstance(cell, str) else None


def nvlinks(cell: str | None) -> int | None:
    m = re.fullmatch(r"NV(\d+)", cell or "")
    return int(m.group(1)) if m else None


def nvlink_peak(spec: Any, pair_links: int | None, gpu_links: int | None) -> float | None:
    """Per-direction NVLink GB/s between two GPUs: half the GPU's aggregate, times the share of its
    links that go to this peer (all of them on NVSwitch systems, where topo shows NV18 everywhere)."""
    total = _gpu.spec_value(spec, "nvlink_gbps_per_gpu")
    if not isinstance(total, (int, float)) or not total:
        return None
    share = 1.0
    if pair_links and gpu_links and pair_links < gpu_links:
        share = pair_links / gpu_links
    return total / 2 * share


def peer_peak(facts: Facts, spec: Any, src: dict[str, Any], dst: dict[str, Any]) -> tuple[float | None, str, str]:
    """(peak GB/s per direction, its source, "nvlink" | "pcie" | "unknown") for a copy src→dst."""
    a, b = src.get("index"), dst.get("index")
    cell = pair_link(facts, a, b) if isinstance(a, int) and isinstance(b, int) else None
    n = nvlinks(cell)
    active = src.get("nvlink_active")
    on_nvlink = n is not None or (cell is None and isinstance(active, int) and active > 0
                                  and isinstance(dst.get("nvlink_active"), int) and dst["nvlink_active"] > 0)
    if on_nvlink:
        peak = nvlink_peak(spec, n, active if isinstance(active, int) else None)
        label = f"NVLink ({cell or 'active links'}) per direction"
        return peak, _gpu.source(spec, label) if peak else "", "nvlink"
    peaks = [(_gpu.pcie_peak(lk["gen_max"], lk["width_max"]), lk) for lk in map(_gpu.pcie_link, (src, dst))]
    known = [(p, lk) for p, lk in peaks if p]
    if not known:
        return None, "", "pcie" if cell else "unknown"
    p, lk = min(known, key=lambda x: x[0])
    return p, f"PCIe Gen{lk['gen_max']} x{lk['width_max']} per direction" + (f" (topo {cell})" if cell else ""), "pcie"


@benchmark("p2p", needs_cuda=True, host_bound=True, min_gpus=2, doc="""GPU-to-GPU copy bandwidth (GB/s) for every ordered pair,
           on PyTorch's default path (peer access where available), against NVLink or PCIe per-direction peak.""")
def run(ctx: BenchContext) -> list[Measurement]:
    import torch

    n_dev = torch.cuda.device_count()
    entries = [_gpu.device_entry(torch, ctx.facts, d) for d in range(n_dev)]
    spec = _gpu.spec_for(entries[0])
    nbytes = BYTES[ctx.suite]
    out: list[Measurement] = []
    for i in range(n_dev):
        for j in range(n_dev):
            if i != j:
                ctx.progress(f"p2p {i}->{j}")
                out.append(_pair(torch, ctx, i, j, nbytes, entries, spec))
    return out


def _pair(torch: Any, ctx: BenchContext, i: int, j: int, nbytes: int, entries: list[dict[str, Any]],
          spec: Any) -> Measurement:
    name = f"p2p.{i}-{j}"
    peer = bool(torch.cuda.can_device_access_peer(i, j))
    params: dict[str, Any] = {"src": i, "dst": j, "bytes": nbytes, "peer_access": peer}
    for d in (i, j):
        free = _gpu.free_bytes(torch, d)
        if not _gpu.fits(nbytes, free):
            return _gpu.skip("p2p", name, f"GPU {d} {_gpu.no_room(nbytes, free)}", "GB/s", params)
    peak, source, path = peer_peak(ctx.facts, spec, entries[i], entries[j])
    params["link"] = path
    try:
        with _gpu.sampled(entries[i].get("index", i)) as tel:
            samples, ok = _copy(torch, i, j, nbytes, ctx.suite)
    finally:
        torch.cuda.empty_cache()
    m = _gpu.measurement("p2p", name, samples, lambda s: _gpu.gbps(nbytes, s), "GB/s", params)
    _gpu.finish([m], tel)
    m.notes.insert(0, f"can_device_access_peer({i}, {j}) = {peer}"
                   + ("" if peer else ": copies are staged through host memory"))
    if not ok:
        m.status, m.reason = "error", "the copied bytes differ from the source"
    _gpu.judged(m, peak, source, _gpu.practical(f"p2p_{path}"))
    return m


def _copy(torch: Any, i: int, j: int, nbytes: int, suite: Suite) -> tuple[list[float], bool]:
    """Raw seconds per copy of ``nbytes`` from GPU i to GPU j, and whether the bytes arrived intact."""
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=f"cuda:{i}")
    dst = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{j}")
    with torch.cuda.device(j):  # events and synchronize on the destination, whose stream waits for the copy
        samples = timing.measure(lambda: dst.copy_(src), timing.CudaTimer(torch), min_reps=10, max_reps=2000,
                                 **TIMING[suite])
        ok = bool(torch.equal(src[-4096:].to(f"cuda:{j}"), dst[-4096:]))
    torch.cuda.synchronize(i)
    return samples, ok
