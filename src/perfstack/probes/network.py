"""Network: interfaces, RDMA ports and the TCP knobs multi-node collectives depend on."""

from __future__ import annotations

import re
from typing import Any, Callable, TypeVar

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe
from perfstack.probes.memory import parse_int

T = TypeVar("T")

NET = "/sys/class/net"
IB = "/sys/class/infiniband"

# Software interfaces: bridges, veth pairs, CNI and overlay devices, tunnels. A container's own
# eth0 is a veth too but keeps its name; 'has_device' (no backing device) tells it apart.
VIRTUAL = re.compile(r"^(lo$|docker|veth|virbr|br-|cni|flannel|cali|vxlan|ifb|dummy|tun|tap|kube-|cilium|"
                     r"weave|genev|lxc|vnet|podman|nodelocaldns|tailscale|zt|wg)")
# ARPHRD_* link types from /sys/class/net/<if>/type (include/uapi/linux/if_arp.h).
LINK_TYPES = {1: "ether", 32: "infiniband", 772: "loopback", 65534: "none"}


def parse_speed(text: str) -> int | None:
    """speed in Mb/s; -1 (or 4294967295 from older drivers) when the link is down or unknown."""
    value = int(text.strip())
    return value if 0 < value < 0xFFFFFFFF else None


def parse_numa_node(text: str) -> int | None:
    value = int(text.strip())
    return value if value >= 0 else None


def parse_uevent(text: str) -> dict[str, str]:
    """device/uevent: 'KEY=VALUE' lines (DRIVER=mlx5_core, PCI_SLOT_NAME=0000:17:00.0)."""
    out = {}
    for line in text.splitlines():
        if line.strip():
            key, sep, value = line.partition("=")
            if not sep:
                raise Malformed(f"not KEY=VALUE lines: {line[:60]!r}")
            out[key] = value
    return out


def parse_ib_state(text: str) -> str:
    """ports/<n>/state and phys_state: '4: ACTIVE', '5: LinkUp'."""
    m = re.fullmatch(r"\s*\d+:\s*(\S+)\s*", text)
    if not m:
        raise Malformed(f"not an 'N: STATE' line: {text.strip()[:40]!r}")
    return m.group(1)


def parse_ib_rate(text: str) -> float:
    """ports/<n>/rate: '400 Gb/sec (4X NDR)' -> 400.0."""
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", text)
    if not m:
        raise Malformed(f"not a 'N Gb/sec' rate: {text.strip()[:40]!r}")
    return float(m.group(1))


def parse_ints(text: str) -> list[int]:
    """Whitespace-separated integers: tcp_rmem '4096 131072 6291456', ip_local_port_range '32768 60999'."""
    values = [int(w) for w in text.split()]
    if not values:
        raise Malformed("empty")
    return values


def _read(c: Collector, path: str, parse: Callable[[str], T]) -> T | None:
    try:
        return c.parsed(path, parse)
    except Unavailable:
        return None


def _interface(c: Collector, name: str) -> dict[str, Any]:
    d = f"{NET}/{name}"
    link = _read(c, f"{d}/type", parse_int)
    uevent = _read(c, f"{d}/device/uevent", parse_uevent)
    operstate = _read(c, f"{d}/operstate", str.strip)
    return {
        "name": name, "operstate": operstate, "mtu": _read(c, f"{d}/mtu", parse_int),
        # Reading speed fails (EINVAL) on a down link: that is "unknown", not an error.
        "speed_mbps": _read(c, f"{d}/speed", parse_speed) if operstate != "down" else None,
        "link_type": LINK_TYPES.get(link, str(link)) if link is not None else None,
        "is_virtual": bool(VIRTUAL.match(name)) or link == 772,
        "has_device": uevent is not None,
        "driver": (uevent or {}).get("DRIVER"),
        "pci_bus_id": (uevent or {}).get("PCI_SLOT_NAME", "").lower() or None,
        "numa_node": _read(c, f"{d}/device/numa_node", parse_numa_node) if uevent is not None else None,
    }


def _rdma_ports(c: Collector) -> list[dict[str, Any]]:
    ports = []
    for dev in c.listdir(IB):
        numa = _read(c, f"{IB}/{dev}/device/numa_node", parse_numa_node)
        for port in c.listdir(f"{IB}/{dev}/ports"):
            p = f"{IB}/{dev}/ports/{port}"
            ports.append({"device": dev, "port": port, "state": _read(c, f"{p}/state", parse_ib_state),
                          "phys_state": _read(c, f"{p}/phys_state", parse_ib_state),
                          "rate_gbps": _read(c, f"{p}/rate", parse_ib_rate),
                          "link_layer": _read(c, f"{p}/link_layer", str.strip), "numa_node": numa})
    return ports


@probe
def network(c: Collector) -> None:
    """Sources: /sys/class/net/<if>/{operstate,mtu,speed,type,device/uevent,device/numa_node};
    /sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer};
    /proc/sys/net/core/{rmem_max,wmem_max}, /proc/sys/net/ipv4/{tcp_rmem,tcp_wmem,ip_local_port_range,
    tcp_congestion_control}. Shell: ip -d link; ethtool <if>; ibstat; sysctl net.core net.ipv4"""
    names = c.listdir(NET)
    if names:
        c.put("network.interfaces", [_interface(c, n) for n in names], NET)
    else:  # every network namespace has at least lo: an empty answer means we could not look
        c.missing("network.interfaces", f"{NET} not readable", NET)
    # No /sys/class/infiniband means the kernel knows no RDMA device: an empty list, not a gap.
    c.put("network.rdma_ports", _rdma_ports(c), IB)
    c.file("network.rmem_max", "/proc/sys/net/core/rmem_max", parse_int)
    c.file("network.wmem_max", "/proc/sys/net/core/wmem_max", parse_int)
    c.file("network.tcp_rmem", "/proc/sys/net/ipv4/tcp_rmem", parse_ints)
    c.file("network.tcp_wmem", "/proc/sys/net/ipv4/tcp_wmem", parse_ints)
    c.file("network.ip_local_port_range", "/proc/sys/net/ipv4/ip_local_port_range", parse_ints)
    c.file("network.tcp_congestion_control", "/proc/sys/net/ipv4/tcp_congestion_control")
