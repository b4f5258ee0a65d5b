"""PCIe, topology and NUMA checks: the link each GPU trained to, where it hangs in the machine,
how GPUs reach each other, and the PCIe error and power-management state of their links."""

from __future__ import annotations

from typing import Any

from perfstack.model import Facts, NotApplicable, NotChecked
from perfstack.rules.common import busy, cpu_nodes, gpu_list, label
from perfstack.rules.registry import Hit, Hits, SeverityName, check
from perfstack.sources import BOOK, INFRA_ARTICLE, KERNEL_ARTICLE

# Usable GB/s per lane and direction, after line encoding (8b/10b to Gen2, 128b/130b from Gen3).
GBS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}
SLOW_PATHS = {"SYS": "crosses the CPU interconnect", "NODE": "crosses PCIe host bridges",
              "PHB": "goes through the CPU's host bridge"}
RECHECK = "nvidia-smi -q -d PCIE while the job runs, or perfstack doctor during training"


def _link(g: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """(gen, max gen, width, max width): the driver's view, sysfs where the driver is silent."""
    pick = lambda a, b: g.get(a) if g.get(a) is not None else g.get(b)  # noqa: E731
    return (pick("pcie_gen", "sysfs_pcie_gen"), pick("pcie_gen_max", "sysfs_pcie_gen_max"),
            pick("pcie_width", "sysfs_pcie_width"), pick("pcie_width_max", "sysfs_pcie_width_max"))


@check("pcie-link-downgraded", "pcie-topology", "critical", "GPU PCIe link below its capability",
       doc="Compares each GPU's current PCIe generation and width with the maximum it and the slot support "
           "(NVML / nvidia-smi, sysfs as a fallback). A busy GPU (>10% utilization) below its maximum is "
           "critical. An idle GPU at a lower generation is info only: GPUs train the link down to save power "
           "when idle, so re-check under load. A narrower width at idle is a warning, since GPUs keep their "
           "lane count when idle. A host (slot/CPU) maximum below the GPU's own is a warning.",
       why="Host-device copies scale with lanes x transfer rate: a Gen5 x16 GPU that trained to Gen4 x8 moves "
           "data at a quarter of the rate, and no software setting can recover it. Tuning anything above a "
           "GPU silently stuck at x4 is wasted effort.",
       fix="reseat the GPU in a full x16 slot; check risers, cables and the BIOS bifurcation and PCIe "
           "generation settings; update BIOS/firmware",
       refs=f"{INFRA_ARTICLE} (§2 The driver layer, §10 Debugging order)")
def pcie_link_downgraded(f: Facts) -> Hits:
    gpus = [g for g in gpu_list(f) if None not in _link(g)]
    if not gpus:
        raise NotChecked("neither the driver nor sysfs reported the GPUs' PCIe link state")
    for g in gpus:
        gen, gen_max, width, width_max = _link(g)
        sub, now = f"gpu{g['index']}", f"PCIe Gen{gen} x{width}, capable of Gen{gen_max} x{width_max}"
        rate = GBS_PER_LANE.get(gen, 0) * width
        full = GBS_PER_LANE.get(gen_max, 0) * width_max
        loss = f" (about {full / rate:.0f}× less host-GPU bandwidth)" if rate and full / rate >= 1.5 else ""
        util = g.get("utilization_gpu")
        if gen < gen_max or width < width_max:
            if busy(g):
                yield Hit(f"{label(g)}: {now}, while {util}% busy{loss}", subject=sub)
            else:
                state = "while idle" if util is not None else "(utilization unknown)"
                yield Hit(f"{label(g)}: {now} {state}{loss}. Idle GPUs lower the link speed to save power: "
                          f"re-check under load ({RECHECK})", subject=sub,
                          severity="warning" if width < width_max else "info",
                          fix=f"re-check under load ({RECHECK}); if it stays low, reseat and check the BIOS")
        host, own = g.get("pcie_gen_host_max"), g.get("pcie_gen_gpu_max")
        if host is not None and own is not None and host < own:
            yield Hit(f"{label(g)}: the slot/CPU supports PCIe Gen{host}, the GPU Gen{own}: the host limits the link",
                      severity="warning", subject=sub,
                      fix="move the GPU to a slot wired to a Gen{0}-capable root port, or enable the higher "
                          "generation in the BIOS".format(own))


@check("gpu-numa-affinity", "pcie-topology", "warning", "GPU NUMA node unknown on a multi-node host",
       doc="On a host with more than one NUMA node, reads each GPU's /sys/bus/pci/devices/<bus>/numa_node "
           "and fires when it is -1 (unknown). The evidence carries the GPU-to-node map.",
       why="NUMA-aware launchers bind each rank's CPU threads and pinned memory next to its GPU; when the "
           "firmware does not say where the GPU is, they fall back to node 0 and half the ranks feed their "
           "GPU across the socket link, 30-50% slower than local memory.",
       fix="enable the BIOS NUMA/ACPI SRAT options (not node interleaving); meanwhile bind each rank "
           "explicitly, e.g. numactl --cpunodebind=N --membind=N, using nvidia-smi topo -m's NUMA Affinity",
       refs=f"Book ch. 3 (NUMA affinity); {INFRA_ARTICLE} (§1 The kernel layer)")
def gpu_numa_affinity(f: Facts) -> Hits:
    nodes = cpu_nodes(f)
    gpus = gpu_list(f)
    unknown = [g for g in gpus if g.get("numa_node") is None]
    if unknown:
        mapping = ", ".join(f"GPU{g['index']}→{'?' if g.get('numa_node') is None else g['numa_node']}" for g in gpus)
        yield Hit(f"{len(nodes)} NUMA nodes; {len(unknown)} GPU(s) with numa_node -1 (unknown): {mapping}",
                  host_action=True)


@check("gpu-p2p-topology", "pcie-topology", "warning", "GPU pairs connected only through the CPU",
       doc="Reads the nvidia-smi topo -m matrix and lists GPU pairs whose path is SYS, NODE or PHB (through "
           "CPU host bridges or across sockets) rather than NVLink (NV#) or a PCIe switch (PIX/PXB).",
       why="Topology-blind placement moves collective traffic at tens of GB/s per GPU instead of the hundreds "
           f"NVLink gives; in an example of the book {BOOK}, moving to a topology-aware layout took SM busy "
           "from 60% to 90% and an iteration from 100 to 70 ms.",
       fix="put tensor-parallel and all-reduce groups on GPUs connected by NVLink or one PCIe switch "
           "(CUDA_VISIBLE_DEVICES, scheduler topology hints); keep a job inside one NUMA node where it fits",
       refs=f"Book ch. 4 (topology-aware placement); {INFRA_ARTICLE} (§10 Debugging order)")
def gpu_p2p_topology(f: Facts) -> Hits:
    gpu_list(f)  # not applicable without a GPU, however the matrix fared
    topo = f.need("pcie.topology")
    gpus = [d for d in topo["devices"] if d.startswith("GPU")]
    if len(gpus) < 2:
        raise NotApplicable("fewer than two GPUs")
    slow, nvlink = [], 0
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            path = topo["links"].get(a, {}).get(b, "")
            nvlink += path.startswith("NV")
            if path in SLOW_PATHS:
                slow.append(f"{a}–{b} {path}")
    if slow:
        shown = ", ".join(slow[:8]) + (f" and {len(slow) - 8} more" if len(slow) > 8 else "")
        extra = f"; {nvlink} pair(s) are on NVLink: keep communicating groups inside them" if nvlink else ""
        yield Hit(f"{len(slow)} GPU pair(s) reach each other only through the CPU: {shown}{extra}")


@check("nvlink-health", "pcie-topology", "critical", "GPU with fewer active NVLinks than its peers",
       doc="Counts active NVLinks per GPU (NVML) and compares GPUs of the same model; fires when one has "
           "fewer active links than the best of its peers.",
       why="A GPU with a down link sends its share of all-reduce traffic over fewer lanes or over PCIe, and "
           "the whole job waits for the slowest rank.",
       fix="reset the GPU or reseat it; check Fabric Manager on NVSwitch systems; RMA if links stay down",
       refs="Book ch. 2, 4 (NVLink)")
def nvlink_health(f: Facts) -> Hits:
    gpus = [g for g in gpu_list(f) if g.get("nvlink_links")]
    if not gpus:
        raise NotApplicable("no NVLink reported")
    best: dict[str, int] = {}
    for g in gpus:
        best[g.get("name") or ""] = max(best.get(g.get("name") or "", 0), g.get("nvlink_active") or 0)
    for g in gpus:
        top = best[g.get("name") or ""]
        if (g.get("nvlink_active") or 0) < top:
            yield Hit(f"{label(g)}: {g.get('nvlink_active') or 0} of {g['nvlink_links']} NVLinks active; "
                      f"peers of the same model have {top}", subject=f"gpu{g['index']}")


def _nvidia_buses(f: Facts) -> dict[str, str]:
    """PCI bus id -> subject, for every GPU and NVSwitch perfstack knows of."""
    out = {b: b for b in (f.value("pcie.nvidia_gpus") or []) + (f.value("pcie.nvswitches") or [])}
    for g in f.value("gpu.list") or []:
        if g.get("pci_bus_id"):
            out[g["pci_bus_id"]] = f"gpu{g.get('index')}"
    return out


@check("pcie-aer-errors", "pcie-topology", "critical", "PCIe bus errors reported on a GPU link",
       doc="Reads 'PCIe Bus Error' (AER) lines from dmesg for GPU and NVSwitch bus ids. Critical for "
           "uncorrectable errors; warning for 10 or more corrected errors (perfstack's threshold), info for fewer. Errors "
           "logged against the upstream port rather than the GPU are not matched.",
       why="Corrected errors are retried at the link layer: a steady stream costs bandwidth and often "
           "precedes a link that retrains narrower or drops. Uncorrectable errors crash jobs or take the GPU "
           "off the bus (Xid 79).",
       fix="reseat the GPU and its risers/cables, check slot power; update BIOS and GPU firmware; "
           "drain the node if uncorrectable errors recur",
       refs=f"Linux kernel documentation (PCI Express Advanced Error Reporting); {INFRA_ARTICLE} (§2 The driver layer, §10 Debugging order); NVIDIA Xid error documentation (Xid 79)")
def pcie_aer_errors(f: Facts) -> Hits:
    errors = f.need("kernel_log.aer")
    buses = _nvidia_buses(f)
    if not buses:
        raise NotApplicable("no NVIDIA device on the PCI bus")
    per: dict[str, dict[str, int]] = {}
    for e in errors:
        if e["bus_id"] in buses:
            per.setdefault(e["bus_id"], {}).setdefault(e["severity"], 0)
            per[e["bus_id"]][e["severity"]] += e["count"]
    for bus, sev in sorted(per.items()):
        text = ", ".join(f"{n} {s.replace('-', ' ')}" for s, n in sorted(sev.items()))
        worst: SeverityName | None = (None if any(s.startswith("uncorrected") for s in sev)
                 else "warning" if sev.get("corrected", 0) >= 10 else "info")
        yield Hit(f"{bus} ({buses[bus]}): PCIe AER errors in the kernel log: {text}", severity=worst,
                  subject=buses[bus])


def _lspci_devices(f: Facts) -> list[dict[str, Any]]:
    devices = [d for d in f.need("pcie.lspci") if not d.get("access_denied")]
    if not devices:
        raise NotChecked("lspci -vvv showed no readable link capabilities for GPUs or NICs (it needs root)")
    return devices


@check("pcie-aspm", "pcie-topology", "info", "PCIe power saving (ASPM) on GPU or NIC links",
       doc="Reads the kernel's ASPM policy (/sys/module/pcie_aspm/parameters/policy) and the LnkCtl line of "
           "lspci -vvv for GPUs and NICs; fires when a power-saving policy is set or L0s/L1 is enabled on "
           "one of those links.",
       why="Link power states add wake-up latency to the first transfer after a pause; on hosts that feed "
           "GPUs and NICs continuously there is nothing to save (the sources name ASPM as a knob without "
           "figures).",
       fix="boot with pcie_aspm.policy=performance (or set it in the BIOS); at runtime: "
           "echo performance > /sys/module/pcie_aspm/parameters/policy",
       refs=f"{KERNEL_ARTICLE} (The invisible bottleneck: PCIe ASPM)")
def pcie_aspm(f: Facts) -> Hits:
    policy = f.value("pcie.aspm_policy")
    try:
        devices = _lspci_devices(f)
    except NotChecked:
        if policy is None:
            raise
        devices = []
    enabled = [d for d in devices if d.get("aspm") and "Enabled" in d["aspm"]]
    if policy in ("powersave", "powersupersave") or enabled:
        links = "; ".join(f"{d['bus_id']} {d['description'][:40]}: ASPM {d['aspm']}" for d in enabled[:6])
        yield Hit(f"ASPM policy {policy or 'unknown'}" + (f"; {links}" if links else ""), host_action=True,
                  commands=["echo performance > /sys/module/pcie_aspm/parameters/policy"])


@check("pcie-max-payload", "pcie-topology", "info", "PCIe max payload left at 128 bytes",
       doc="Reads DevCap and DevCtl MaxPayload from lspci -vvv for GPUs and NICs; fires when the configured "
           "payload is 128 bytes although the device supports more (perfstack's threshold). The upstream port may be the "
           "limit; lspci -vvv on it tells.",
       why="Each PCIe packet carries a fixed header; 128-byte payloads spend a larger share of the link on "
           "headers than 256 or 512 (the sources name MPS as a knob without figures).",
       fix="set the PCIe MPS option in the BIOS to the largest supported, or boot with pci=pcie_bus_perf",
       refs=f"{KERNEL_ARTICLE} (The invisible bottleneck: PCIe MPS)")
def pcie_max_payload(f: Facts) -> Hits:
    devices = [d for d in _lspci_devices(f) if d.get("max_payload") and d.get("max_payload_cap")]
    if not devices:
        raise NotChecked("lspci -vvv showed no MaxPayload for GPUs or NICs")
    for d in devices:
        if d["max_payload"] == 128 and d["max_payload_cap"] >= 256:
            yield Hit(f"{d['bus_id']} {d['description'][:50]}: MaxPayload {d['max_payload']} bytes, "
                      f"device supports {d['max_payload_cap']}", subject=d["bus_id"], host_action=True)
