"""The PCIe fabric around the GPUs: NVIDIA devices on the bus, the GPU-to-GPU topology matrix,
link power management and payload sizes.

The per-GPU link state (generation, width) and NUMA node are in gpu.list (probes/gpu.py); this
module adds what the driver does not say: what the bus itself holds, and how devices connect.
"""

from __future__ import annotations

import re
from typing import Any

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe
from perfstack.probes.gpu import norm_bus_id
from perfstack.probes.memory import parse_bracketed

PCI = "/sys/bus/pci/devices"
NVIDIA = "0x10de"
TOPO = ("nvidia-smi", "topo", "-m")
LSPCI = ("lspci", "-vvv")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LINK_TYPES = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|NV\d+|SOC|CNC|N/A)$")


def parse_hex(text: str) -> int:
    return int(text.strip(), 16)


def parse_topo(text: str) -> dict[str, Any]:
    """``nvidia-smi topo -m`` -> {"devices": [...], "links": {a: {b: "NV18"}}, "cpu_affinity": {...},
    "numa_affinity": {...}, "nics": {"NIC0": "mlx5_0"}}. Columns are tab-separated; trailing
    columns do not always line up with the header, so only the device columns and the two
    affinity columns right after them are read."""
    lines = [ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    header_at = next((i for i, ln in enumerate(lines) if re.match(r"^\s+GPU0\b", ln)), None)
    if header_at is None:
        raise Malformed("not nvidia-smi topo -m output (no GPU0 column header)")
    head = [h.strip() for h in lines[header_at].split("\t") if h.strip()]
    devices = [h for h in head if re.fullmatch(r"(GPU|NIC)\d+", h)]
    out: dict[str, Any] = {"devices": devices, "links": {}, "cpu_affinity": {}, "numa_affinity": {}, "nics": {}}
    for ln in lines[header_at + 1:]:
        if not ln.strip() or ln.startswith("Legend"):
            break
        cells = [x.strip() for x in ln.split("\t")]
        row, links = cells[0], cells[1:1 + len(devices)]
        if row not in devices or len(links) < len(devices) or not all(LINK_TYPES.match(x) for x in links):
            raise Malformed(f"not nvidia-smi topo -m output (bad row {ln.strip()[:60]!r})")
        out["links"][row] = {d: x for d, x in zip(devices, links) if d != row}
        extra = cells[1 + len(devices):]
        if row.startswith("GPU") and len(extra) >= 2:
            out["cpu_affinity"][row], out["numa_affinity"][row] = extra[0] or None, extra[1] or None
    for m in re.finditer(r"^\s*(NIC\d+):\s*(\S+)", "\n".join(lines), re.M):
        out["nics"][m.group(1)] = m.group(2)
    return out


def parse_lspci(text: str) -> list[dict[str, Any]]:
    """``lspci -vvv`` -> the GPUs, NVSwitches and NICs with their PCIe link control and payload
    settings. Without root lspci prints "Capabilities: <access denied>": those fields are None."""
    blocks = re.split(r"\n(?=[0-9a-fA-F]{2,}:[0-9a-fA-F]{2}[:.])", "\n" + text)
    devices = []
    for block in blocks:
        if not block.strip():
            continue
        m = re.match(r"\s*((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) ([^:]+): (.*)", block)
        if not m:
            raise Malformed(f"not lspci -vvv output (unexpected line {block.strip().splitlines()[0][:60]!r})")
        kind, desc = m.group(2).strip(), m.group(3).strip()
        if "NVIDIA" not in desc and not re.search(r"Ethernet|Infiniband|Network", kind):
            continue
        cap = re.search(r"DevCap:\s*MaxPayload (\d+) bytes", block)
        ctl = re.search(r"DevCtl:(.*?)DevSta:", block, re.S)
        ctl_mps = re.search(r"MaxPayload (\d+) bytes, MaxReadReq (\d+) bytes", ctl.group(1)) if ctl else None
        aspm = re.search(r"LnkCtl:\s*ASPM ([^;]+);", block)
        devices.append({
            "bus_id": norm_bus_id(m.group(1)), "kind": kind, "description": desc[:120],
            "access_denied": "<access denied>" in block,
            "max_payload_cap": int(cap.group(1)) if cap else None,
            "max_payload": int(ctl_mps.group(1)) if ctl_mps else None,
            "max_read_request": int(ctl_mps.group(2)) if ctl_mps else None,
            "aspm": aspm.group(1).strip() if aspm else None,
        })
    return devices


@probe
def pcie(c: Collector) -> None:
    """Sources: /sys/bus/pci/devices/*/{vendor,class}; nvidia-smi topo -m; lspci -vvv;
    /sys/module/pcie_aspm/parameters/policy.
    Shell: lspci -d 10de: ; nvidia-smi topo -m; sudo lspci -vvv | grep -E 'LnkCtl|DevCtl|MaxPayload'"""
    try:
        entries = c.host.listdir(PCI)
    except Unavailable as e:
        c.missing_all(("pcie.nvidia_gpus", "pcie.nvswitches"), e.reason, PCI)
    else:
        gpus, switches = [], []
        for bdf in entries:
            try:
                if c.parsed(f"{PCI}/{bdf}/vendor", str.strip) != NVIDIA:
                    continue
                cls = c.parsed(f"{PCI}/{bdf}/class", parse_hex)
            except Unavailable:
                continue
            # 0x0300 VGA / 0x0302 3D controller are GPUs; 0x0680 "other bridge" is an NVSwitch.
            if cls >> 8 in (0x0300, 0x0302):
                gpus.append(norm_bus_id(bdf) or bdf)
            elif cls >> 8 == 0x0680:
                switches.append(norm_bus_id(bdf) or bdf)
        c.put("pcie.nvidia_gpus", gpus, PCI)
        c.put("pcie.nvswitches", switches, PCI)
    for key, argv, parse in (("pcie.topology", TOPO, parse_topo), ("pcie.lspci", LSPCI, parse_lspci)):
        try:
            c.put(key, c.command(argv, parse), " ".join(argv))
        except Unavailable as e:
            c.missing(key, e.reason, " ".join(argv))
    c.file("pcie.aspm_policy", "/sys/module/pcie_aspm/parameters/policy", parse_bracketed)
