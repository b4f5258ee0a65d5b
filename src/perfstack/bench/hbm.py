"""HBM bandwidth: device-to-device copy (read + write), a read-only reduction and a write-only fill,
on buffers far larger than L2, against the SKU's HBM peak.

Bytes counted: a copy of n bytes moves 2n (n read, n written), as CUDA's bandwidthTest and STREAM
count it; the sum reads n; the fill writes n. GB/s are decimal (10⁹), like the spec sheets.
The buffers are up to 4 GiB each (≈80× a 50 MB L2), so what a repetition leaves in L2 is a few
percent of the next one's traffic; where free memory forces a buffer under 4× L2, an L2 flush
runs between repetitions (outside the timed region).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from perfstack.bench import BenchContext, Suite, _gpu, benchmark, timing
from perfstack.model import Measurement

GIB, MIB = _gpu.GIB, _gpu.MIB
BUFFER_SIZES = (4 * GIB, 2 * GIB, GIB, 512 * MIB, 256 * MIB, 128 * MIB)
TIMING: dict[Suite, timing.Budget] = {"quick": {"budget_s": 0.3, "warmup_s": 0.1}, "full": {"budget_s": 0.8, "warmup_s": 0.2}}
# (figure, buffers it needs, bytes moved per repetition as a multiple of the buffer size)
KERNELS = (("copy", 2, 2), ("read", 1, 1), ("write", 1, 1))


def bytes_moved(kind: str, buffer_bytes: int) -> int:
    return dict((k, f) for k, _, f in KERNELS)[kind] * buffer_bytes


def buffer_size(free: int | None, cap: int | None = None) -> int | None:
    """The largest buffer for which a copy's two buffers fit."""
    sizes = [s for s in BUFFER_SIZES if cap is None or s <= cap]
    return _gpu.largest_fitting(sizes, 2, free)


def needs_flush(buffer_bytes: int, l2: int) -> bool:
    return buffer_bytes < 4 * l2


def _kernel(torch: Any, kind: str, src: Any, dst: Any) -> Callable[[], Any]:
    if kind == "copy":
        return lambda: dst.copy_(src)
    if kind == "read":
        return lambda: src.sum()
    return lambda: dst.fill_(1.5)


@benchmark("hbm", needs_cuda=True, host_bound=False, doc="""GPU memory bandwidth (GB/s): device-to-device copy counting read +
           write, a read-only reduction and a write-only fill, on buffers ≫ L2, against the SKU's HBM peak.""")
def run(ctx: BenchContext) -> list[Measurement]:
    import torch

    dev = ctx.device
    entry = _gpu.device_entry(torch, ctx.facts, dev)
    spec = _gpu.spec_for(entry)
    tbps = _gpu.spec_value(spec, "hbm_tbps")
    peak = tbps * 1000 if isinstance(tbps, (int, float)) and tbps else None
    out: list[Measurement] = []
    with _gpu.on_device(torch, dev), _gpu.sampled(entry.get("index", dev)) as tel:
        free = _gpu.free_bytes(torch, dev)
        n = buffer_size(free, ctx.options.get("hbm_max_bytes"))
        if n is None:
            reason = _gpu.no_room(2 * BUFFER_SIZES[-1], free)
            return [_gpu.skip("hbm", f"hbm.{k}", reason, "GB/s") for k, _, _ in KERNELS]
        l2 = _gpu.l2_bytes(spec)
        flush = _gpu.L2Flush(torch, dev, l2) if needs_flush(n, l2) else None
        src = torch.rand(n // 4, dtype=torch.float32, device=f"cuda:{dev}")
        dst = torch.empty_like(src)
        for kind, _, _ in KERNELS:
            samples = timing.measure(_kernel(torch, kind, src, dst), timing.CudaTimer(torch), min_reps=20,
                                     max_reps=5000, between=flush, **TIMING[ctx.suite])
            moved = bytes_moved(kind, n)
            out.append(_gpu.measurement("hbm", f"hbm.{kind}", samples, partial(_gpu.gbps, moved), "GB/s",
                                        {"buffer_bytes": n, "bytes_per_rep": moved, "l2_flush": flush is not None,
                                         "counts": {"copy": "read + write", "read": "read", "write": "write"}[kind]}))
        del src, dst, flush
    _gpu.finish(out, tel)
    for m in out:
        kind = m.name.split(".")[1]
        # The practical ceiling is known for copies (≈90%); reads and writes are held to the same one.
        _gpu.judged(m, peak, _gpu.source(spec, "HBM peak"), _gpu.practical(f"hbm_{kind}") or _gpu.practical("hbm_copy"))
    if peak is None:
        _gpu.add_notes(out, [f"no HBM peak known for {entry.get('name') or 'this GPU'}"])
    return out
