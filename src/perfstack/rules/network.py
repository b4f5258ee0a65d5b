"""Network: the fabric multi-node collectives and data loading run over."""

from __future__ import annotations

import re
from typing import Any

from perfstack.model import Facts, NotApplicable, NotChecked
from perfstack.rules.common import env_or_empty, gpu_count, sysctl_commands
from perfstack.rules.registry import Hit, Hits, check
from perfstack.rules.shell import Command
from perfstack.sources import BOOK

LAYER = "network"
FAST_MBPS = 25_000
DEFAULT_PORTS = (32768, 60999)  # the Linux default ephemeral range: 28232 ports
# perfstack's threshold: the round-trip time assumed when sizing TCP buffers, generous for one data centre, so that a
# buffer judged large enough is large enough across racks and spine switches too.
ASSUMED_RTT_S = 1e-3


def data_nics(f: Facts) -> list[dict[str, Any]]:
    """Physical Ethernet interfaces that are up (bonds, teams and VLANs on top of them count)."""
    return [i for i in f.need("network.interfaces")
            if i.get("link_type") == "ether" and not i.get("is_virtual") and i.get("operstate") == "up"
            and (i.get("has_device") or i["name"].startswith(("bond", "team")) or "." in i["name"])]


def active_rdma(f: Facts) -> list[dict[str, Any]]:
    return [p for p in f.value("network.rdma_ports") or [] if p.get("state") == "ACTIVE"]


def _sysctl_list(name: str, values: list[int]) -> list[Command]:
    """Like sysctl_commands, for the multi-value knobs."""
    v = " ".join(str(x) for x in values)
    return sysctl_commands(name, v, line=f"{name} = {v}")


@check("rdma-port-state", LAYER, "critical", "RDMA port down or slower than its peers",
       doc="Reads state, phys_state, rate and link_layer of every /sys/class/infiniband/<dev>/ports/<n>. "
           "Critical when no port is ACTIVE; warning for a port that is down while others are up (a missing "
           "rail, or an unused port) and for an ACTIVE port whose rate is below the fastest of its link layer.",
       why="RDMA is the fast path between nodes: a few microseconds and hundreds of Gb/s, against 5-10x the "
           "latency over TCP. A dead port sends NCCL to sockets; a port trained at half rate halves that rail.",
       fix="Check cables and optics, the switch port and the subnet manager (ibstat; ibv_devinfo); update the "
           "HCA firmware",
       refs="Book ch. 4 (networking)")
def rdma_port_state(f: Facts) -> Hits:
    ports = f.need("network.rdma_ports")
    if not ports:
        raise NotApplicable("no RDMA device")
    active = [p for p in ports if p.get("state") == "ACTIVE"]
    for p in ports:
        name = f"{p['device']}/{p['port']}"
        if p.get("state") != "ACTIVE":
            yield Hit(f"{name} ({p.get('link_layer')}): state {p.get('state')}, phys_state {p.get('phys_state')}",
                      severity="warning" if active else "critical", subject=name, host_action=True)
    for p in active:
        peers = [q["rate_gbps"] for q in active if q.get("link_layer") == p.get("link_layer") and q.get("rate_gbps")]
        if p.get("rate_gbps") and peers and p["rate_gbps"] < max(peers):
            yield Hit(f"{p['device']}/{p['port']}: {p['rate_gbps']:g} Gb/s while other ports run {max(peers):g} Gb/s",
                      severity="warning", subject=f"{p['device']}/{p['port']}", host_action=True)


@check("nvidia-peermem", LAYER, "critical", "GPUDirect RDMA module not loaded",
       doc="On a GPU host with RDMA devices, fires when neither nvidia_peermem nor nv_peer_mem is in "
           "/proc/modules. Critical on kernels before 5.12, which lack DMA-BUF; warning otherwise, since NCCL "
           "can register GPU memory through DMA-BUF with the open GPU kernel modules instead.",
       why="Without a way to register GPU memory with the NIC there is no GPUDirect RDMA: every inter-node "
           "transfer is staged through host memory, costing bandwidth, latency and CPU.",
       fix="modprobe nvidia-peermem and persist it in /etc/modules-load.d/ (or the GPU Operator's "
           "driver.rdma.enabled=true); on kernel 5.12+ with the open GPU modules, DMA-BUF is NVIDIA's "
           "recommended alternative",
       refs="Book ch. 2-4 (GPUDirect RDMA); NVIDIA GPU Operator docs (DMA-BUF)")
def nvidia_peermem(f: Facts) -> Hits:
    if not f.need("network.rdma_ports"):
        raise NotApplicable("no RDMA device")
    if not gpu_count(f):
        raise NotApplicable("no NVIDIA GPU")
    modules = f.need("kernel.modules")
    if "nvidia_peermem" in modules or "nv_peer_mem" in modules:
        return
    release = f.value("system.kernel_release") or ""
    m = re.match(r"(\d+)\.(\d+)", release)
    old = m is not None and (int(m.group(1)), int(m.group(2))) < (5, 12)
    yield Hit(f"nvidia_peermem not loaded (kernel {release or 'unknown'}"
              + (", too old for DMA-BUF)" if old else "; DMA-BUF may serve instead)"),
              severity="critical" if old else "warning", host_action=True,
              commands=["modprobe nvidia-peermem",
                        "echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf"])


@check("mtu-jumbo", LAYER, "warning", "Fast Ethernet NIC without jumbo frames",
       doc="Reads the MTU of physical Ethernet interfaces that are up at 25 Gb/s or more; fires below 9000. "
           "InfiniBand (IPoIB) interfaces are not Ethernet and are skipped.",
       why="At 1500 bytes a 100 Gb/s link moves over 8 million packets a second; jumbo frames cut per-packet "
           "CPU work about sixfold and raise TCP and RoCE throughput.",
       fix="ip link set dev <if> mtu 9000 on every node and switch port of the data network (all must agree); "
           "persist it in netplan or NetworkManager",
       refs="Book ch. 4 and appendix")
def mtu_jumbo(f: Facts) -> Hits:
    fast = [i for i in data_nics(f) if (i.get("speed_mbps") or 0) >= FAST_MBPS]
    if not fast:
        raise NotApplicable("no Ethernet NIC at 25 Gb/s or faster is up")
    for i in fast:
        if i.get("mtu") is not None and i["mtu"] < 9000:
            yield Hit(f"{i['name']}: MTU {i['mtu']} at {i['speed_mbps'] / 1000:g} Gb/s", subject=i["name"],
                      host_action=True)


@check("nic-speed-selected", LAYER, "warning", "Only slow NICs on a multi-GPU host",
       doc="On hosts with two or more GPUs and no ACTIVE RDMA port, fires when the fastest physical Ethernet "
           "interface runs at 10 Gb/s or less: warning when the environment shows a multi-node job "
           "(WORLD_SIZE above the local GPU count), info otherwise.",
       why="All-reduce of a large model's gradients over 10 Gb/s takes seconds per step; a 200-400 Gb/s "
           "fabric is 20-40x faster. Multi-node training on this host will be network bound.",
       fix="Use a 100 Gb/s+ (RDMA) data network for multi-node jobs and point NCCL_SOCKET_IFNAME / "
           "NCCL_IB_HCA at it",
       refs="Book ch. 4")
def nic_speed_selected(f: Facts) -> Hits:
    gpus = gpu_count(f)
    if gpus < 2:
        raise NotApplicable("fewer than two GPUs")
    if active_rdma(f):
        return
    speeds = {i["name"]: i["speed_mbps"] for i in data_nics(f) if i.get("speed_mbps")}
    if not speeds:
        raise NotChecked("no physical NIC reports a link speed (virtual NICs, or a container's own network)")
    best = max(speeds, key=lambda n: speeds[n])
    if speeds[best] <= 10_000:
        world = str(env_or_empty(f).get("WORLD_SIZE", ""))
        multi = world.isdigit() and int(world) > gpus
        yield Hit(f"fastest NIC {best} runs at {speeds[best] / 1000:g} Gb/s; no active RDMA port; {gpus} GPUs"
                  + (f"; WORLD_SIZE={world}" if multi else ""), severity="warning" if multi else "info",
                  host_action=True)


@check("tcp-stack-tuning", LAYER, "warning", "TCP buffers too small for a fast NIC",
       doc="On hosts with an Ethernet NIC up at 25 Gb/s or more, compares net.core.rmem_max/wmem_max and the "
           "maxima of net.ipv4.tcp_rmem/tcp_wmem with the bandwidth-delay product of the fastest NIC at an "
           "assumed 1 ms round trip (our conservative choice). Info when an RDMA port is ACTIVE, since "
           "collectives then bypass TCP.",
       why="A TCP connection can have at most one buffer of data in flight per round trip, so buffers below "
           "the bandwidth-delay product cap each socket below line rate, whatever the NIC.",
       fix="sysctl -w net.core.rmem_max=<BDP> net.core.wmem_max=<BDP> and raise the third value of "
           "net.ipv4.tcp_rmem / tcp_wmem to match; persist in /etc/sysctl.d/",
       refs="Book ch. 4 and appendix")
def tcp_stack_tuning(f: Facts) -> Hits:
    speeds = [i["speed_mbps"] for i in data_nics(f) if (i.get("speed_mbps") or 0) >= FAST_MBPS]
    if not speeds:
        raise NotApplicable("no Ethernet NIC at 25 Gb/s or faster is up")
    bdp = int(max(speeds) * 1e6 / 8 * ASSUMED_RTT_S)
    target = 16 << 20  # twice the BDP, as a power of two, and at least 16 MiB
    while target < 2 * bdp:
        target *= 2
    values = {"net.core.rmem_max": f.need("network.rmem_max"), "net.core.wmem_max": f.need("network.wmem_max"),
              "net.ipv4.tcp_rmem": f.need("network.tcp_rmem")[-1], "net.ipv4.tcp_wmem": f.need("network.tcp_wmem")[-1]}
    label = {"net.ipv4.tcp_rmem": "net.ipv4.tcp_rmem max", "net.ipv4.tcp_wmem": "net.ipv4.tcp_wmem max"}
    low = {k: v for k, v in values.items() if v < bdp}
    if not low:
        return
    commands = []
    for name in low:
        if name.startswith("net.core"):
            commands += sysctl_commands(name, target)
        else:
            current = f.need(f"network.{name.split('.')[-1]}")
            commands += _sysctl_list(name, current[:-1] + [target])
    shown = ", ".join(f"{label.get(k, k)}={v}" for k, v in low.items())
    yield Hit(f"{shown}: below {bdp / 2**20:.1f} MiB, the bandwidth-delay product of {max(speeds) / 1000:g} Gb/s "
              "at 1 ms", severity="info" if active_rdma(f) else "warning", commands=commands, host_action=True)


@check("ip-local-port-range", LAYER, "warning", "Narrow ephemeral port range",
       doc="Reads net.ipv4.ip_local_port_range; fires when it holds fewer ports than the Linux default "
           f"32768-60999 (28232 ports). Beware the example 50000-51000 in the book {BOOK}: it narrows the range "
           "to 1001.",
       why="NCCL's bootstrap and socket transport and the PyTorch store open many connections per rank; "
           "when ephemeral ports run out, rendezvous fails or hangs on large jobs.",
       fix="sysctl -w net.ipv4.ip_local_port_range=\"32768 60999\" (or wider, clear of local services' ports); "
           "persist in /etc/sysctl.d/",
       refs="Book ch. 4 (ephemeral ports)")
def ip_local_port_range(f: Facts) -> Hits:
    low, high = f.need("network.ip_local_port_range")[:2]
    ports = high - low + 1
    if ports < DEFAULT_PORTS[1] - DEFAULT_PORTS[0] + 1:
        yield Hit(f"ip_local_port_range = {low} {high} ({ports} ports)", host_action=True,
                  commands=_sysctl_list("net.ipv4.ip_local_port_range", list(DEFAULT_PORTS)))
