"""Containers and cgroups: the limits a container or pod puts between the job and the hardware."""

from __future__ import annotations

import re

from perfstack.model import Facts, NotApplicable, NotChecked
from perfstack.probes.cpu import format_cpulist
from perfstack.rules.common import SYSTEM_MOUNT, cpu_nodes, env_of, size
from perfstack.rules.registry import Hit, Hits, SeverityName, check
from perfstack.rules.shell import Abs, sh
from perfstack.units import GiB, MiB
from perfstack.sources import INFRA_ARTICLE

LAYER = "container-orch"


def _in_container(f: Facts) -> bool:
    if not f.need("container.in_container"):
        raise NotApplicable("not running in a container")
    return True


@check("container-context", LAYER, "info", "Running inside a container",
       doc="Reads container.in_container and container.runtime (from /.dockerenv, /run/.containerenv, the "
           "runtime named in /proc/1/cgroup, KUBERNETES_SERVICE_HOST, an overlay root). Fires (info) inside a "
           "container, so host-level findings read as actions for the host.",
       why="A container shares the host's kernel and driver: THP, the CPU governor, hugepages, most sysctls and "
           "driver settings are inherited and cannot be changed from inside. Set up right, a GPU container runs "
           "within about 2% of bare metal.",
       fix="Apply host-level fixes on the host (or its node image / a privileged DaemonSet); apply container "
           "fixes in the run flags, Compose file or pod spec.",
       refs="Book ch. 3 (container runtime optimizations)")
def container_context(f: Facts) -> Hits:
    if f.need("container.in_container"):
        evidence = "; ".join(f.value("container.evidence", []))
        yield Hit(f"inside a container (runtime: {f.value('container.runtime') or 'unknown'}): {evidence}")


@check("shm-size", LAYER, "critical", "/dev/shm too small",
       doc="Reads the size= option of the tmpfs on /dev/shm in /proc/self/mountinfo (else /proc/mounts). Critical at 64 MiB or less "
           "(Docker's default); warning below 4 GiB when that is also under a quarter of RAM (below 1 GiB when "
           "RAM is unknown). The 4 GiB line follows the sources' 4-16 GB guidance; it is a judgement call.",
       why="DataLoader workers hand batches to the main process through /dev/shm, and NCCL's shared-memory "
           "transport puts its intra-node buffers there. At 64 MB, workers die with 'bus error' and NCCL "
           "fails or falls back to slower paths.",
       fix="docker run --shm-size=16g (or --ipc=host); Compose: shm_size: \"16gb\"; Kubernetes: mount an "
           "emptyDir with medium: Memory (and a sizeLimit) at /dev/shm",
       refs=f"Book appendix checklist; {INFRA_ARTICLE} (§9.3 Compose deploy with resources)")
def shm_size(f: Facts) -> Hits:
    shm = f.need("container.shm_size_bytes")
    total = f.value("mem.total_bytes")
    inside = bool(f.value("container.in_container"))
    evidence = f"/dev/shm is {size(shm)}" + (f" on a host with {size(total)} RAM" if total else "")
    severity: SeverityName
    if shm <= 64 * MiB:
        severity = "critical"
    elif (shm < 4 * GiB and shm < total / 4) if total else shm < GiB:
        severity = "warning"
    else:
        return
    target = min(16 * GiB, total // 2) if total else 16 * GiB
    yield Hit(evidence, severity=severity, host_action=inside,
              commands=[] if inside else [sh("mount", "-o", f"remount,size={target // GiB}G", Abs("/dev/shm"))])


@check("cgroup-memory-limit", LAYER, "critical", "cgroup memory limit kills or nearly kills the job",
       doc="Reads the tightest memory limit on the process's cgroup path (v2 memory.max, v1 "
           "memory.limit_in_bytes), the usage and oom_kill counter where it is set, and mem.total_bytes. "
           "Critical when the cgroup has OOM-killed anything; warning when the working set (usage minus "
           "inactive page cache, as the kubelet counts it) is above 90% of the limit; info when a limit sits "
           "below host RAM. No limit passes.",
       why="The cgroup, not the host, OOM-kills a process that /proc/meminfo tells has the whole machine's RAM: "
           "possibly days into a run, with no Python traceback. GPU memory is not under cgroup control, but "
           "pinned host buffers, loader workers and checkpoint staging are.",
       fix="Raise the container's memory limit above the job's peak with headroom (docker run --memory, pod "
           "resources.limits.memory with requests == limits), or drop the hard limit and monitor instead.",
       refs=f"Book ch. 3 (Kubernetes resource limits); {INFRA_ARTICLE} (§6.4 cgroups)")
def cgroup_memory_limit(f: Facts) -> Hits:
    limit = f.need("cgroup.memory_limit_bytes")
    kills = f.value("cgroup.memory_oom_kills") or 0
    total = f.value("mem.total_bytes")
    used = f.value("cgroup.memory_working_set_bytes", f.value("cgroup.memory_current_bytes"))
    shown = f"cgroup memory limit {size(limit)}" if limit is not None else "no cgroup memory limit"
    if total:
        shown += f" (host RAM {size(total)})"
    if kills:
        yield Hit(f"{kills} OOM kill(s) recorded by this cgroup; {shown}", host_action=True)
    elif limit is None or (total and limit >= total):
        return
    elif used is not None and used > 0.9 * limit:
        yield Hit(f"working set {size(used)} is {used / limit:.0%} of the {shown}", severity="warning",
                  host_action=True)
    elif total:
        yield Hit(f"{shown}: tools that size buffers from /proc/meminfo see {size(total)}", severity="info",
                  host_action=True)


@check("cgroup-cpu-quota", LAYER, "warning", "CPU quota below the host's CPU count",
       doc="Reads the tightest CFS quota on the cgroup path (v2 cpu.max, v1 cpu.cfs_quota_us / cfs_period_us), "
           "cpu.stat's nr_throttled / nr_periods, and cpu.logical_count. Fires when the quota is worth fewer "
           "CPUs than the host shows, or when more than 5% of periods were throttled.",
       why="os.cpu_count() and nproc report every host CPU, so DataLoader workers, OpenMP and NCCL threads "
           "are sized for the host and then throttled by the quota: the GPUs wait for input and launches.",
       fix="Raise the CPU limit (docker run --cpus, pod resources.limits.cpu with the static CPU manager), and "
           "size num_workers and OMP_NUM_THREADS to the quota.",
       refs=f"Book ch. 3 and appendix; {INFRA_ARTICLE} (§6.4 cgroups, §9.3 Compose deploy with resources)")
def cgroup_cpu_quota(f: Facts) -> Hits:
    quota = f.need("cgroup.cpu_quota_cpus")
    stat = f.value("cgroup.cpu_stat") or {}
    periods, throttled = stat.get("nr_periods", 0), stat.get("nr_throttled", 0)
    share = throttled / periods if periods else 0.0
    notes = []
    if quota is not None:
        host = f.need("cpu.logical_count")
        if quota < host:
            notes.append(f"CFS quota allows {quota:g} CPUs of the host's {host}")
    if share > 0.05 or (notes and throttled):
        notes.append(f"throttled in {share:.1%} of periods ({throttled} of {periods}, "
                     f"{stat.get('throttled_usec', 0) / 1e6:.1f} s in all)")
    if notes:
        yield Hit("; ".join(notes), host_action=True)


@check("cgroup-pids", LAYER, "warning", "cgroup process limit low for loader workers",
       doc="Reads the tightest pids.max on the cgroup path and pids.current. Fires when the limit is below "
           "max(1024, 512 per GPU) or when usage is above 80% of it. The per-GPU figure is our estimate: every "
           "thread counts, and a rank with 8 workers runs well over a hundred.",
       why="DataLoader workers, their threads and NCCL's helper threads all count against pids.max; at the "
           "limit, fork and thread creation fail and the job dies with 'Resource temporarily unavailable'.",
       fix="docker run --pids-limit=-1 (or a large value); Kubernetes: raise the kubelet's podPidsLimit",
       refs=f"{INFRA_ARTICLE} (§6.4 cgroups: the pids controller)")
def cgroup_pids(f: Facts) -> Hits:
    limit = f.need("cgroup.pids_max")
    if limit is None:
        return
    floor = max(1024, 512 * (f.value("gpu.count") or 1))
    current = f.value("cgroup.pids_current")
    if limit < floor or (current is not None and current > 0.8 * limit):
        used = f", {current} in use" if current is not None else ""
        yield Hit(f"pids.max = {limit}{used} (suggested at least {floor})", host_action=True)


@check("cgroup-cpuset-numa", LAYER, "warning", "cpuset not local to the GPUs",
       doc="Reads cgroup cpuset.cpus.effective / cpuset.mems.effective, numa.nodes and each GPU's NUMA node. "
           "Applies to multi-node machines with a restricted cpuset. Warning when the cpuset has no CPU, or the "
           "memory nodes exclude the node, where a visible GPU sits; info when it also spans a node with no "
           "visible GPU. An unrestricted cpuset passes (process binding is a kernel-layer check).",
       why="Staging buffers and loader threads on the far socket push every host-to-device copy across the "
           "inter-socket link; the sources call cgroup CPU and memory affinity strongly recommended in "
           "production.",
       fix="docker run --cpuset-cpus=<GPU-local CPUs> --cpuset-mems=<node>; systemd-run --scope "
           "-p AllowedCPUs=... -p AllowedMemoryNodes=...; Kubernetes topology manager single-numa-node",
       refs=f"Book ch. 3 (NUMA); {INFRA_ARTICLE} (§6.4 cgroups)")
def cgroup_cpuset_numa(f: Facts) -> Hits:
    nodes = cpu_nodes(f)
    node_cpus = {n["id"]: set(n["cpus"]) for n in nodes}
    cpus = set(f.need("cgroup.cpuset_cpus"))
    if cpus >= set().union(*node_cpus.values()):
        return
    gpus = f.need("gpu.list")
    if not gpus:
        raise NotApplicable("no NVIDIA GPU")
    by_node: dict[int, list[str]] = {}
    for g in gpus:
        if g.get("numa_node") is not None:
            by_node.setdefault(g["numa_node"], []).append(str(g["index"]))
    if not by_node:
        raise NotChecked("the GPUs' NUMA nodes are unknown")
    mems = set(f.value("cgroup.cpuset_mems") or [])
    for node, idx in sorted(by_node.items()):
        where = f"GPU {','.join(idx)} on NUMA node {node}"
        if not cpus & node_cpus.get(node, set()):
            yield Hit(f"cpuset CPUs {format_cpulist(cpus)} include none of node {node}'s ({where})",
                      subject=f"numa{node}", host_action=True)
        if mems and node not in mems:
            yield Hit(f"cpuset.mems {format_cpulist(mems)} exclude node {node} ({where})", subject=f"numa{node}",
                      host_action=True)
    far = sorted(n for n, cs in node_cpus.items() if cs & cpus and n not in by_node)
    if far:
        yield Hit(f"cpuset CPUs {format_cpulist(cpus)} also span NUMA node(s) {far} with no visible GPU",
                  severity="info", host_action=True)


@check("overlay-io", LAYER, "warning", "No data volume: I/O goes through the overlay filesystem",
       doc="Reads the root filesystem type and the mount table. Fires when / is overlayfs and nothing but the "
           "runtime's own bind mounts (/etc, /usr, /dev, /run, ...) and tmpfs is mounted: datasets, model "
           "weights and checkpoints can only live in the image or the copy-on-write layer.",
       why="OverlayFS looks files up across image layers and copies a file up before its first write; bind "
           "mounts read and write at the host filesystem's speed.",
       fix="docker run -v /data/dataset:/mnt/dataset:ro -v /data/ckpt:/mnt/ckpt; keep datasets out of images",
       refs="Book ch. 3 (avoiding container overlay filesystem overhead)")
def overlay_io(f: Facts) -> Hits:
    if f.need("container.root_fstype") != "overlay":
        return
    volumes = [m for m in f.need("storage.mounts")
               if m["mountpoint"] != "/" and not SYSTEM_MOUNT.match(m["mountpoint"])
               and m["fstype"] not in ("tmpfs", "overlay", "ramfs")]
    if not volumes:
        yield Hit("/ is overlayfs and no data volume is mounted", host_action=True)


@check("container-gpu-runtime", LAYER, "critical", "Container asks for GPUs but has none",
       doc="Inside a container whose environment sets NVIDIA_VISIBLE_DEVICES (CUDA images do), fires when /dev "
           "has no /dev/nvidia<N> device node: the NVIDIA runtime hook did not run.",
       why="The driver stays on the host; the NVIDIA Container Toolkit injects /dev/nvidia* and the host's "
           "libcuda.so / libnvidia-ml.so at start-up. Without it, CUDA sees no device.",
       fix="Start the container with --gpus all (docker) or --device nvidia.com/gpu=all (CDI); on the host: "
           "install the NVIDIA Container Toolkit and run nvidia-ctk runtime configure; Kubernetes: request "
           "nvidia.com/gpu with the device plugin or GPU Operator.",
       refs=f"Book ch. 3 (NVIDIA container runtime); {INFRA_ARTICLE} (§9.1 The NVIDIA container stack)")
def container_gpu_runtime(f: Facts) -> Hits:
    _in_container(f)
    wanted = env_of(f).get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if wanted.lower() in ("", "void", "none"):
        raise NotApplicable("NVIDIA_VISIBLE_DEVICES is not set: the container asked for no GPU")
    nodes = f.need("container.nvidia_device_nodes")
    if not [n for n in nodes if n != "nvidiactl"]:
        yield Hit(f"NVIDIA_VISIBLE_DEVICES={wanted} but /dev has no nvidia<N> device node", host_action=True)


@check("rdma-in-container", LAYER, "critical", "RDMA devices not passed into the container",
       doc="Inside a container, fires when /sys/class/infiniband shows HCAs but /dev/infiniband has no uverbs "
           "device: critical when a port is ACTIVE, warning otherwise.",
       why="Without the verbs devices NCCL silently falls back from InfiniBand/RoCE to TCP sockets: from tens "
           "of GB/s to a few Gb/s, with no error.",
       fix="docker run --device=/dev/infiniband --cap-add=IPC_LOCK (--ulimit memlock=-1); Kubernetes: the RDMA "
           "shared device plugin or SR-IOV network operator",
       refs="Book ch. 3-4 (RDMA in containers)")
def rdma_in_container(f: Facts) -> Hits:
    _in_container(f)
    ports = f.need("network.rdma_ports")
    if not ports:
        raise NotApplicable("no RDMA device visible")
    if not f.need("container.infiniband_device_nodes"):
        active = sorted({p["device"] for p in ports if p.get("state") == "ACTIVE"})
        hcas = sorted({p["device"] for p in ports})
        yield Hit(f"HCAs {', '.join(hcas)} visible ({len(active)} with an ACTIVE port) but /dev/infiniband has "
                  "no uverbs device", severity="critical" if active else "warning", host_action=True)


@check("container-network-mode", LAYER, "warning", "Multi-node job on a container bridge network",
       doc="Inside a container running a multi-node job (WORLD_SIZE above the local GPU count), fires when the "
           "container sees no physical NIC (only veth/bridge interfaces) and no usable RDMA device.",
       why="Bridge and overlay networks add NAT, user-space proxies and port mapping to every collective; "
           "gradient traffic needs the host's NICs or an RDMA CNI.",
       fix="docker run --network=host (Kubernetes: hostNetwork: true) or an RDMA/SR-IOV CNI; then set "
           "NCCL_SOCKET_IFNAME to the data NIC",
       refs=f"Book ch. 3 (container networking); {INFRA_ARTICLE} (§9.3 Compose deploy with resources, §10 Debugging order)")
def container_network_mode(f: Facts) -> Hits:
    _in_container(f)
    world = env_of(f).get("WORLD_SIZE", "")
    gpus = f.value("gpu.count") or 0
    if not world.isdigit() or not gpus or int(world) <= gpus:
        raise NotApplicable("no multi-node job in the environment (WORLD_SIZE unset or within this host)")
    ifaces = f.need("network.interfaces")
    physical = [i["name"] for i in ifaces if i.get("has_device") and not i.get("is_virtual")]
    rdma = f.value("container.infiniband_device_nodes") and any(
        p.get("state") == "ACTIVE" for p in f.value("network.rdma_ports") or [])
    if not physical and not rdma:
        seen = ", ".join(i["name"] for i in ifaces if i["name"] != "lo") or "none"
        yield Hit(f"WORLD_SIZE={world} with {gpus} local GPU(s), but only virtual interfaces are visible ({seen})",
                  host_action=True)


@check("k8s-qos-class", LAYER, "warning", "GPU pod not in the Guaranteed QoS class",
       doc="In a Kubernetes pod, reads the QoS class from the cgroup path (kubepods-burstable / besteffort). "
           "Not checked when the path is namespaced ('/'), as with cgroup v2 namespaces.",
       why="BestEffort pods are evicted first and Burstable pods share CPUs with their neighbours; only "
           "Guaranteed pods (requests == limits for CPU and memory) can get exclusive cores.",
       fix="Set resources.requests equal to resources.limits for CPU and memory in every container of the pod",
       refs="Book ch. 3 (Kubernetes)")
def k8s_qos_class(f: Facts) -> Hits:
    if f.need("container.runtime") != "kubernetes":
        raise NotApplicable("not a Kubernetes pod")
    path = f.need("cgroup.path")
    m = re.search(r"(besteffort|burstable)", path.lower())
    if m:
        yield Hit(f"cgroup path {path} places the pod in the {m.group(1).capitalize()} class", host_action=True)
    elif "kubepods" not in path:
        raise NotChecked(f"the cgroup path ({path}) is namespaced: the QoS class is not visible from inside")
