"""Checks judged from benchmark results (perfstack bench, doctor --bench): measured, not read."""

from __future__ import annotations

from typing import Any

from perfstack.model import Facts, NotApplicable
from perfstack.rules.registry import Hit, Hits, SeverityName, check
from perfstack.rules.common import env_or_empty

MEASURED = ("h2d-bandwidth-low", "gemm-throughput-low", "hbm-bandwidth-low", "collective-bandwidth-low")
NO_BENCH = "no benchmark results (run 'perfstack doctor --bench quick' or 'perfstack bench')"


def result(f: Facts, name: str) -> dict[str, Any]:
    results = f.value("bench.results")
    if not results:
        raise NotApplicable(NO_BENCH)
    r: dict[str, Any] | None = results.get(name)
    if r is None or r.get("value") is None:
        raise NotApplicable(f"benchmark figure {name} was not measured")
    return r


def _gpu(f: Facts, index: int = 0) -> dict[str, Any]:
    gpus = f.value("gpu.list") or []
    return gpus[index] if index < len(gpus) else {}


def _pct(r: dict[str, Any]) -> str:
    return f"{r['fraction']:.0%} of {r['peak']:,.0f} {r['unit']}" if r.get("fraction") is not None else "no reference peak"


def _low(r: dict[str, Any]) -> SeverityName | None:
    """'warning' below ~70% of the practical ceiling, 'critical' below 35%; None when fine."""
    if r.get("fraction") is None:
        return None
    ratio = r["fraction"] / (r.get("expected_fraction") or 1.0)
    return "critical" if ratio < 0.35 else "warning" if ratio < 0.7 else None


@check("h2d-bandwidth-low", "pcie-topology", "critical", "Pinned host-to-device copies well below the PCIe link",
       doc="Compares the best pinned host-to-device bandwidth measured by 'perfstack bench h2d' with the "
           "theoretical rate of the GPU's PCIe link (its maximum generation and width). Fires a warning below "
           "about 70% of the practical ceiling (~85% of theoretical) and critical below 35%, naming the likely "
           "causes the doctor's facts support: a downgraded link, a remote NUMA node, an IOMMU in translation mode.",
       why="Every batch, checkpoint load and offloaded tensor crosses this link. Healthy pinned copies exceed "
           "24 GB/s on Gen4 x16 and 50 GB/s on Gen5 x16; a link trained at x8, or copies from a remote "
           "socket, halves that silently.",
       fix="reseat or move the GPU if the link trains below its maximum; bind the process to the GPU's NUMA node "
           "(numactl --cpunodebind=N --membind=N); set iommu=pt on the kernel command line",
       refs="Book ch. 2-3 (PCIe, NUMA, pinned memory)")
def h2d_bandwidth_low(f: Facts) -> Hits:
    r = result(f, "h2d.pinned.best")
    sev = _low(r)
    if not sev:
        return
    g = _gpu(f)
    causes = []
    if g.get("pcie_gen") and g.get("pcie_gen_max") and (g["pcie_gen"], g.get("pcie_width")) < (
            g["pcie_gen_max"], g.get("pcie_width_max")):
        causes.append(f"link at Gen{g['pcie_gen']} x{g.get('pcie_width')} of Gen{g['pcie_gen_max']} "
                      f"x{g.get('pcie_width_max')}")
    if len([n for n in f.value("numa.nodes") or [] if n.get("cpus")]) > 1:
        causes.append(f"GPU on NUMA node {g.get('numa_node')}; check the process runs there")
    iommu = f.value("kernel.iommu") or {}
    if isinstance(iommu, dict) and {"DMA", "DMA-FQ"} & set(iommu.get("group_types") or []):
        causes.append("IOMMU translating DMA")
    yield Hit(f"pinned H2D {r['value']:.1f} GB/s = {_pct(r)}"
              + (f"; likely: {'; '.join(causes)}" if causes else ""), severity=sev, subject="gpu0")


@check("gemm-throughput-low", "driver", "warning", "GEMM throughput well below what this GPU reaches",
       doc="Compares the best bf16 GEMM throughput measured by 'perfstack bench gemm' with the SKU's dense peak "
           "and the practical ceiling for cuBLAS (about 80% of dense peak on H100). Fires below about 70% of that "
           "ceiling, citing the clocks, power and temperature sampled around the run.",
       why="Dense GEMMs are most of a transformer's FLOPs; if the GPU cannot reach its usual GEMM rate, every "
           "model on it runs slower by the same factor. The usual causes are a power cap, thermal or power-brake "
           "throttling, clocks locked low, or another process sharing the GPU.",
       fix="check 'perfstack doctor' driver findings (power cap, throttle reasons, clock locks, other processes) "
           "and re-run 'perfstack bench gemm' on an idle GPU",
       refs="Book ch. 9-10 (Tensor Cores) and ch. 3 (clocks, power limits); NVIDIA datasheets (dense peaks)")
def gemm_throughput_low(f: Facts) -> Hits:
    r = result(f, "gemm.bf16.best")
    sev = _low(r)
    if sev:
        after = (r.get("telemetry") or {}).get("after") or {}
        tele = ", ".join(f"{k} {after[k]}" for k in ("sm_clock_mhz", "power_w", "temperature_c",
                                                     "clocks_event_reasons") if after.get(k) is not None)
        yield Hit(f"bf16 GEMM {r['value']:,.0f} TFLOP/s = {_pct(r)}" + (f"; after the run: {tele}" if tele else ""),
                  severity="warning", subject="gpu0")


@check("hbm-bandwidth-low", "driver", "warning", "GPU memory bandwidth well below the SKU's",
       doc="Compares the device-to-device copy bandwidth (read+write) measured by 'perfstack bench hbm' with "
           "the SKU's HBM peak and the practical ceiling of about 90% for copies. Fires below about 70% of it.",
       why="Decode, optimizers, normalizations and elementwise kernels are bound by memory bandwidth: they slow "
           "down in proportion. Low figures point at memory clocks held down, ECC or row-remapping trouble, or "
           "another process using the GPU.",
       fix="check the doctor's ECC, clock and sharing findings; re-run 'perfstack bench hbm' on an idle GPU",
       refs="Book ch. 6-7 (memory hierarchy; a well-coalesced copy reaches ~90% of peak DRAM throughput); NVIDIA datasheets (HBM peaks)")
def hbm_bandwidth_low(f: Facts) -> Hits:
    r = result(f, "hbm.copy")
    if _low(r):
        yield Hit(f"device copy {r['value']:,.0f} GB/s = {_pct(r)}", severity="warning", subject="gpu0")


@check("collective-bandwidth-low", "mathlib-nccl", "critical", "NCCL all-reduce bus bandwidth far below the links",
       doc="Compares the best all-reduce bus bandwidth (nccl-tests definition) measured by 'perfstack bench "
           "collectives' with the per-direction bandwidth of the link between the GPUs (NVLink when the topology "
           "shows it, else PCIe). Fires a warning below about 50% of it and critical below 20%, with the NCCL "
           "transport settings from the environment.",
       why="Data-parallel and tensor-parallel training wait on collectives every step; NCCL silently falls back "
           "to PCIe, shared memory or sockets when P2P is disabled or the topology is misdetected, costing an "
           "order of magnitude.",
       fix="unset NCCL_P2P_DISABLE / NCCL_SHM_DISABLE / NCCL_IB_DISABLE; run with NCCL_DEBUG=INFO once to see "
           "the transport chosen; check nvidia-smi topo -m",
       refs="Book ch. 4 (NCCL); nccl-tests documentation (PERFORMANCE.md: bus bandwidth)")
def collective_bandwidth_low(f: Facts) -> Hits:
    r = result(f, "collective.all_reduce.best")
    if r.get("fraction") is None:
        return
    sev: SeverityName | None = "critical" if r["fraction"] < 0.2 else "warning" if r["fraction"] < 0.5 else None
    if sev:
        env = env_or_empty(f)
        knobs = [f"{k}={v}" for k, v in env.items() if k.startswith("NCCL_") and k.endswith(("DISABLE", "LEVEL"))]
        yield Hit(f"all_reduce busbw {r['value']:,.0f} GB/s = {_pct(r)}"
                  + (f"; NCCL settings: {', '.join(knobs)}" if knobs else ""), severity=sev)
