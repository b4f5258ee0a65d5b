"""Kernel / host OS checks: memory residency, CPU frequency and idle, NUMA, limits, IOMMU."""

from __future__ import annotations

import re
from typing import Any

from perfstack.model import Facts, NotApplicable, NotChecked
from perfstack.probes.cpu import format_cpulist
from perfstack.rules.common import cpu_nodes, env_of, size, sysctl_commands
from perfstack.rules.registry import Hit, Hits, check
from perfstack.rules.shell import Command, sh
from perfstack.sources import BOOK, INFRA_ARTICLE, KERNEL_ARTICLE
from perfstack.units import GiB as GIB
from perfstack.units import KiB as KIB

MEMLOCK_CRITICAL = 64 * KIB  # the common distribution default; far too small for RDMA registration
NOFILE_LOW = 1024  # the soft default of most distributions
CSTATE_MAX_LATENCY_US = 20  # perfstack's threshold: C1/C1E wake in ~1-10 µs; C6-class states take ~100 µs or more
STRANDED_POOL_MIN = GIB  # perfstack's threshold: smaller unused huge-page pools are not worth a finding
DIRTY_LIMIT_MIN = 8 * GIB  # perfstack's threshold: below this a multi-GB checkpoint write blocks on writeback
PSI_LIMITS = {"memory": 10.0, "cpu": 20.0}  # perfstack's threshold: percent of the last minute some task stalled
HMM_KERNELS = ((6, 1, 24), (6, 2, 11), (6, 3, 0))  # the first releases of each series with CUDA HMM
ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")
KEEP_CMDLINE = ("iommu", "iommu.passthrough", "intel_iommu", "amd_iommu")  # read by iommu-mode: a capture keeps their values


def limits_file_commands(item: str, value: object) -> list[Command]:
    """A limits.d drop-in owned by perfstack; rewriting it whole is idempotent. New logins get it."""
    path = f"/etc/security/limits.d/99-perfstack-{item}.conf"
    return [sh("printf", "* soft %s %s\\n* hard %s %s\\n", item, value, item, value, into=path)]


def limit_commands(f: Facts, item: str, value: object, ulimit: str) -> tuple[list[Command], str | None]:
    """The commands that raise a resource limit, and the fix to say instead where they cannot work. Inside a
    container the limit is the one the container was started with (limits.d is read by PAM at login, which
    a container's processes never go through), so the fix is to start it again with ``--ulimit``."""
    if f.value("container.in_container") is True:
        return [], (f"start the container again with --ulimit {ulimit} (docker run; 'ulimits:' in Compose; "
                    "under Kubernetes, the container runtime's default limits); limits.d does not apply in a container")
    return limits_file_commands(item, value), None


def limit_text(v: Any) -> str:
    return str(v) if v == "unlimited" else size(v)


@check("swappiness", "kernel", "warning", "vm.swappiness above 10",
       doc="Reads /proc/sys/vm/swappiness and fires when it is above 10.",
       why=f"A swapped-out page of a buffer that feeds a GPU stalls the GPU on disk I/O; the book {BOOK} puts "
           "the slowdown at orders of magnitude. The book recommends 0; 10 is the common compromise on "
           "hosts short of RAM, where 0 can provoke the OOM killer.",
       fix="sysctl -w vm.swappiness=10 (or 0), persisted in /etc/sysctl.d/",
       refs="Book ch. 3 (OS tuning); appendix checklist")
def swappiness(f: Facts) -> Hits:
    v = f.need("kernel.swappiness")
    if v > 10:
        yield Hit(f"vm.swappiness = {v}", commands=sysctl_commands("vm.swappiness", 10), host_action=True)


@check("thp-mode", "kernel", "warning", "Transparent huge pages disabled",
       doc="Reads /sys/kernel/mm/transparent_hugepage/enabled (the bracketed value). Fires a warning for "
           "'never' (training and batch hosts lose THP's gain); reports 'always' with defrag 'always' as info, "
           "since compaction stalls hurt latency-critical serving.",
       why="2 MB pages cut page faults and TLB misses on large host buffers: about 3-5% throughput for "
           "training input pipelines. Synchronous compaction (defrag=always) causes unpredictable pauses.",
       fix="echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (or 'always' for training hosts); "
           "persist with transparent_hugepage=madvise on the kernel command line",
       refs="Book ch. 3; appendix checklist")
def thp_mode(f: Facts) -> Hits:
    mode = f.need("kernel.thp_enabled")
    if mode == "never":
        yield Hit("transparent_hugepage/enabled = [never]", host_action=True,
                  commands=["echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"])
    elif mode == "always" and f.value("kernel.thp_defrag") == "always":
        yield Hit("transparent_hugepage enabled = [always] with defrag = [always]: synchronous compaction "
                  "can stall allocations", severity="info", host_action=True,
                  fix="echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag",
                  commands=["echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag"])


@check("swap-enabled", "kernel", "critical", "Swap is on, or the audited process has pages in swap",
       doc="Reads SwapTotal/SwapFree from /proc/meminfo, the devices in /proc/swaps and VmSwap of "
           "/proc/self/status. Critical when the audited process has pages in swap; a warning when swap is "
           "configured on a GPU node; info when the swap is only zram (compressed RAM) or no GPU was found.",
       why=f"Each touch of a swapped-out host page that feeds the GPU waits on disk: the book {BOOK} calls the "
           "slowdown catastrophic, multiple orders of magnitude. GPU jobs hold large host caches, which are "
           "exactly what the kernel picks to swap out.",
       fix="swapoff -a (only when free RAM exceeds the swap in use) and comment out the swap lines in "
           "/etc/fstab; if swap must stay, keep vm.swappiness low and pin critical buffers (pinned memory)",
       refs="Book ch. 3 (swapping); appendix checklist")
def swap_enabled(f: Facts) -> Hits:
    total = f.need("mem.swap_total_bytes")
    swapped = f.value("proc.vm_swap_bytes") or 0
    if total == 0 and swapped == 0:
        return
    used = total - f.value("mem.swap_free_bytes", total)
    devices = f.value("swap.devices") or []
    names = ", ".join(d["name"] for d in devices) or "swap"
    state = f"{names}: {size(used)} of {size(total)} in use"
    fits = used < f.value("mem.available_bytes", 0)
    cmds = ["swapoff -a", r"sed -i '/^[^#].*\sswap\s/s/^/#/' /etc/fstab"] if fits else []
    if swapped:
        yield Hit(f"the audited process has {size(swapped)} in swap (VmSwap); {state}", severity="critical",
                  commands=cmds, host_action=True)
    elif devices and all("zram" in d["name"] for d in devices):
        yield Hit(f"{state}; zram swap is compressed RAM, so swapping costs CPU time rather than disk I/O",
                  severity="info", host_action=True)
    elif f.value("gpu.count"):
        yield Hit(f"swap is on on a GPU node ({state})", severity="warning", commands=cmds, host_action=True)
    else:
        why_info = "no GPU was found" if f.value("gpu.count") == 0 else "the GPU count is unknown"
        yield Hit(f"swap is on ({state}); {why_info}, so this is only a note", severity="info", host_action=True)


@check("numa-balancing", "kernel", "warning", "Automatic NUMA balancing on a multi-node host",
       doc="Reads /proc/sys/kernel/numa_balancing and the NUMA nodes. Fires when automatic balancing is on "
           "(bit 0 set) and the host has more than one NUMA node; not applicable on one node.",
       why="The kernel periodically unmaps pages to sample where they are touched, taking hinting faults, "
           f"then migrates pages and tasks between nodes. That fights explicit numactl binding, which the book {BOOK} "
           "recommends (remote memory is ~75% slower: ~139 ns vs ~80 ns), and adds latency spikes.",
       fix="sysctl -w kernel.numa_balancing=0, persisted in /etc/sysctl.d/, when GPU jobs are bound "
           "explicitly with numactl or a cpuset",
       refs="Book ch. 3 (NUMA binding); Linux kernel documentation (sysctl kernel.numa_balancing)")
def numa_balancing(f: Facts) -> Hits:
    nodes = f.need("numa.nodes")
    if len(nodes) < 2:
        raise NotApplicable("single NUMA node")
    v = f.need("kernel.numa_balancing")
    if v & 1:  # 2 alone is memory-tiering promotion only, not general migration
        yield Hit(f"kernel.numa_balancing = {v} on a {len(nodes)}-node host", host_action=True,
                  commands=sysctl_commands("kernel.numa_balancing", 0))


@check("cpu-governor", "kernel", "warning", "CPU frequency governor is not 'performance'",
       doc="Reads /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor and fires when any CPU uses another "
           "governor (powersave, ondemand, schedutil). Not checked where cpufreq is not exposed (most VMs).",
       why="Down-clocked cores take time to ramp up when a batch or kernel launch is due; meanwhile the GPU "
           "sits idle in a bubble. GPUs dominate the node's power, so the CPU's extra draw is cheap.",
       fix="cpupower frequency-set -g performance (persist with tuned-adm or the BIOS high-performance profile)",
       refs="Book ch. 3 (CPU frequency and C-states); appendix checklist")
def cpu_governor(f: Facts) -> Hits:
    govs = f.need("cpu.governors")
    bad = {g: cpus for g, cpus in govs.items() if g != "performance"}
    if bad:
        driver = f.value("cpu.scaling_driver")
        listed = "; ".join(f"{g} on CPUs {cpus}" for g, cpus in bad.items())
        yield Hit(f"scaling_governor {listed}" + (f" (driver {driver})" if driver else ""), host_action=True,
                  commands=["for g in /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor; "
                            "do echo performance > \"$g\"; done"])


@check("memlock-limit", "kernel", "critical", "Locked-memory limit (ulimit -l) is not unlimited",
       doc="Reads 'Max locked memory' in /proc/self/limits (the audited process). A warning when the soft "
           "limit is finite; critical at 64 KiB or less.",
       why="Pinned host memory and RDMA registration (NCCL over InfiniBand/RoCE, GPUDirect) lock pages; under "
           f"a small limit they fail, or fall back to pageable memory and slower copies. The book {BOOK} sets it to "
           "unlimited for AI workloads.",
       fix="'* soft memlock unlimited' and '* hard memlock unlimited' in /etc/security/limits.d/; "
           "LimitMEMLOCK=infinity in a systemd unit; in a container, only the container's own limit applies: "
           "docker run --ulimit memlock=-1",
       refs="Book ch. 3 (pinned memory); appendix checklist")
def memlock_limit(f: Facts) -> Hits:
    lim = f.need("limits.memlock")
    soft, hard = lim["soft"], lim["hard"]
    if soft == "unlimited":
        return
    commands, fix = limit_commands(f, "memlock", "unlimited", "memlock=-1")
    if hard == "unlimited" or hard > soft:
        kib = hard if hard == "unlimited" else hard // KIB  # ulimit -l counts KiB
        fix = f"the hard limit allows more: run 'ulimit -l {kib}' in the launching shell or job script"
    yield Hit(f"max locked memory: soft {limit_text(soft)}, hard {limit_text(hard)}", fix=fix,
              severity="critical" if soft <= MEMLOCK_CRITICAL else "warning", commands=commands)


@check("nofile-limit", "kernel", "info", "Open-file limit at the 1024 default",
       doc="Reads 'Max open files' in /proc/self/limits and fires when the soft limit is 1024 or less.",
       why="Servers with many connections and loaders that open many shard files run out of descriptors "
           "('Too many open files').",
       fix="'* soft nofile 65536' in /etc/security/limits.d/, LimitNOFILE= in the systemd unit, or "
           "docker run --ulimit nofile=65536:65536",
       refs="Linux man pages getrlimit(2) (RLIMIT_NOFILE) and limits.conf(5)")
def nofile_limit(f: Facts) -> Hits:
    lim = f.need("limits.nofile")
    soft, hard = lim["soft"], lim["hard"]
    if soft != "unlimited" and soft <= NOFILE_LOW:
        raise_to = hard if isinstance(hard, int) and hard > soft else None
        commands, fix = limit_commands(f, "nofile", 65536, "nofile=65536:65536")
        if raise_to:
            fix = f"ulimit -n {raise_to} in the launching shell (the hard limit allows it)"
        yield Hit(f"max open files: soft {soft}, hard {hard}", fix=fix, commands=commands)


@check("numa-topology", "kernel", "info", "Multi-node NUMA host: bind each rank to its GPU's node",
       doc="Reads /sys/devices/system/node/node*/{cpulist,meminfo,distance}. Reports the layout when there is "
           "more than one node; the other NUMA checks depend on it.",
       why=f"Memory on the other socket is ~75% slower to reach (~139 ns vs ~80 ns in an example of the book {BOOK}); "
           "cross-node traffic also cuts host-to-GPU bandwidth.",
       fix="numactl --cpunodebind=N --membind=N per rank, N being the node of that rank's GPU "
           "(nvidia-smi topo -m, 'NUMA Affinity')",
       refs="Book ch. 3 (NUMA awareness)")
def numa_topology(f: Facts) -> Hits:
    nodes = f.need("numa.nodes")
    if len(nodes) < 2:
        return
    parts = [f"node{n['id']} " + (f"CPUs {format_cpulist(n['cpus'])}" if n["cpus"] else "no CPUs (memory-only)")
             + f", {size(n['mem_total_kib'] * KIB)}" for n in nodes]
    # Each distance row lists every node in order; position `pos` is the node itself.
    local = sorted({n["distances"][pos] for pos, n in enumerate(nodes) if pos < len(n["distances"])})
    remote = sorted({d for pos, n in enumerate(nodes) for i, d in enumerate(n["distances"]) if i != pos})
    dist = f"; distance remote {'/'.join(map(str, remote))} vs local {'/'.join(map(str, local))}" if remote else ""
    yield Hit(f"{len(nodes)} NUMA nodes: " + "; ".join(parts) + dist)


@check("proc-numa-binding", "kernel", "warning", "Process not bound to its GPUs' NUMA node",
       doc="Reads Cpus_allowed_list of /proc/self/status, the NUMA nodes, and each GPU's node (gpu.list). "
           "Info when the audited process may run on every node; a warning when it is bound to nodes that "
           "hold none of the GPUs. Not applicable with one node that has CPUs.",
       why="Binding each rank to its GPU's node typically gives 5-10% more training throughput and less "
           "jitter; memory on the wrong node is ~75% slower to reach.",
       fix="numactl --cpunodebind=N --membind=N python train.py, per rank, N being its GPU's node",
       refs="Book ch. 3 (NUMA binding); appendix checklist")
def proc_numa_binding(f: Facts) -> Hits:
    nodes = cpu_nodes(f)
    allowed = set(f.need("proc.cpus_allowed"))
    used = [n["id"] for n in nodes if allowed & set(n["cpus"])]
    gpu_nodes = {g.get("numa_node") for g in f.value("gpu.list") or []} - {None, -1}
    if len(used) == len(nodes):
        yield Hit(f"may run on CPUs {format_cpulist(sorted(allowed))}, which span all {len(nodes)} nodes: "
                  "the audited process is not NUMA-bound", severity="info")
    elif gpu_nodes and not gpu_nodes & set(used):
        yield Hit(f"bound to node(s) {', '.join(map(str, used))} while the GPUs are on node(s) "
                  f"{', '.join(map(str, sorted(gpu_nodes)))}")


@check("hugetlb-pool", "kernel", "info", "Reserved huge-page pool unused",
       doc="Reads /sys/kernel/mm/hugepages/hugepages-*/{nr,free,resv}_hugepages. Fires when a pool of at least "
           "1 GiB is entirely free and unreserved: no process maps it now.",
       why="Explicit huge pages are taken out of ordinary memory at reservation time; an unused pool is RAM "
           "the page cache and the job cannot use. Explicit pools pay off only for applications that map "
           "them (large preallocated pinned pools, hugetlbfs).",
       fix="if the workload that should use it is not running, release it: sysctl -w vm.nr_hugepages=0 "
           "(or echo 0 > /sys/kernel/mm/hugepages/hugepages-<size>/nr_hugepages)",
       refs="Book ch. 3 (huge pages)")
def hugetlb_pool(f: Facts) -> Hits:
    for p in f.need("mem.hugepage_pools"):
        pool = p["total"] * p["size_kib"] * KIB
        if p["total"] and p["free"] == p["total"] and not p["reserved"] and pool >= STRANDED_POOL_MIN:
            yield Hit(f"{p['total']} × {size(p['size_kib'] * KIB)} huge pages ({size(pool)}) reserved, all free",
                      subject=f"hugepages-{p['size_kib']}kB", host_action=True)


@check("cpu-cstates", "kernel", "info", "Deep CPU idle states enabled",
       doc="Reads /sys/devices/system/cpu/cpu0/cpuidle/state*/{name,latency,disable}. Fires when a state with "
           "an exit latency above 20 µs (C6-class) is enabled. Not applicable in a VM, where the host decides.",
       why="A core woken from a deep C-state takes tens to hundreds of µs before it runs; repeated on every "
           "loader wake-up or kernel launch this becomes GPU bubbles. Mostly matters for latency-critical serving.",
       fix="the BIOS high-performance profile, or cpupower idle-set -D 20; persist with "
           "intel_idle.max_cstate=1 processor.max_cstate=1 on the kernel command line",
       refs="Book ch. 3 (CPU frequency and C-states)")
def cpu_cstates(f: Facts) -> Hits:
    if f.value("cpu.virtualized"):
        raise NotApplicable("virtual machine: the host's idle states decide and are not visible here")
    deep = [s for s in f.need("cpu.idle_states") if not s["disabled"] and s["latency_us"] > CSTATE_MAX_LATENCY_US]
    if deep:
        listed = ", ".join(f"{s['name']} ({s['latency_us']} µs)" for s in deep)
        yield Hit(f"enabled idle states with exit latency above {CSTATE_MAX_LATENCY_US} µs: {listed}",
                  host_action=True,
                  commands=["for s in /sys/devices/system/cpu/cpu*/cpuidle/state*; do if [ \"$(cat \"$s/latency\")\" "
                            f"-gt {CSTATE_MAX_LATENCY_US} ]; then echo 1 > \"$s/disable\"; fi; done"])


@check("smt-state", "kernel", "info", "SMT on while CPUs are contended",
       doc="Reads /sys/devices/system/cpu/smt/active and /proc/pressure/cpu. Fires when SMT is active and "
           "tasks waited for a CPU more than 20% of the last minute.",
       why="Hyperthread siblings share a core's execution units; a CPU-bound data pipeline can run more "
           "evenly with SMT off. The gain depends on the workload: measure before and after.",
       fix="echo off > /sys/devices/system/cpu/smt/control (until reboot), or disable SMT in the BIOS",
       refs="Book ch. 3; appendix checklist (SMT)")
def smt_state(f: Facts) -> Hits:
    smt = f.need("cpu.smt")
    if not smt["active"]:
        return
    stall = f.need("psi.cpu")["some"]["avg60"]
    if stall > PSI_LIMITS["cpu"]:
        yield Hit(f"SMT active (control {smt['control']}) with CPU pressure some avg60 = {stall:.1f}%",
                  host_action=True)


@check("iommu-mode", "kernel", "warning", "IOMMU translates GPU DMA (not passthrough)",
       doc="Reads /sys/class/iommu, the type of a few /sys/kernel/iommu_groups, and iommu= options on /proc/cmdline. "
           "Fires on a GPU host when IOMMU units are active in a translating mode (group type DMA or DMA-FQ, "
           "or no iommu=pt when the type is not exposed).",
       why="Every DMA mapping then goes through the IOVA allocator and IOTLB; on many-core, many-GPU hosts "
           "that allocator becomes a lock hot spot and adds µs to each DMA setup, and peer-to-peer traffic "
           "can be routed through the CPU. NCCL's troubleshooting guide recommends passthrough.",
       fix="add iommu=pt to GRUB_CMDLINE_LINUX (keep intel_iommu=on / amd_iommu=on only where VFIO needs "
           "it), update-grub, reboot; keep BIOS and firmware current",
       refs=f"{KERNEL_ARTICLE} (IOMMU / DMA — P2PDMA & IOVA Caching); Book appendix checklist (BIOS and firmware); NCCL troubleshooting docs")
def iommu_mode(f: Facts) -> Hits:
    if f.value("gpu.count") == 0:
        raise NotApplicable("no NVIDIA GPU")
    iommu = f.need("kernel.iommu")
    if not iommu["units"]:
        return
    units = ", ".join(iommu["units"])
    translating = {"DMA", "DMA-FQ"} & set(iommu["group_types"])
    if translating:
        yield Hit(f"IOMMU {units} active with default domain type {'/'.join(sorted(translating))}",
                  host_action=True)
    elif not iommu["group_types"]:
        cmdline = f.value("system.cmdline") or ""
        if not re.search(r"(^|\s)(iommu=pt|iommu\.passthrough=(1|on|y)|(intel|amd)_iommu=off)(\s|$)", cmdline):
            yield Hit(f"IOMMU {units} active and no iommu=pt on the kernel command line", host_action=True)


@check("kernel-version-features", "kernel", "info", "Kernel predates CUDA's HMM support",
       doc="Reads the kernel release and fires when it is older than 6.1.24 (or 6.2.x before 6.2.11), the "
           "releases NVIDIA lists for heterogeneous memory management. Distribution kernels may backport it.",
       why="With HMM (CUDA 12.2+, open kernel modules) GPU kernels can use ordinary malloc'd and mmap'd host "
           f"memory without explicit copies or cudaMallocManaged. The book {BOOK} asks for a recent, stable kernel "
           "validated with the installed driver.",
       fix="move to a recent distribution kernel validated with the installed NVIDIA driver (e.g. a 6.8 HWE kernel)",
       refs=f"Book ch. 3; {KERNEL_ARTICLE} (Scope; Memory Management: HMM, SVM & ATS); NVIDIA HMM documentation")
def kernel_version_features(f: Facts) -> Hits:
    release = f.need("system.kernel_release")
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    if not m:
        raise NotChecked(f"cannot read a version in kernel release {release!r}")
    version = tuple(int(x or 0) for x in m.groups())
    if version < HMM_KERNELS[0] or any(version[:2] == k[:2] and version < k for k in HMM_KERNELS):
        yield Hit(f"kernel {release} has no HMM for CUDA (needs 6.1.24+, 6.2.11+ or 6.3+)", host_action=True)


@check("cpu-cores-per-gpu", "kernel", "warning", "Fewer CPU cores than GPUs",
       doc="Compares physical cores (/proc/cpuinfo) and the CPUs the audited process may use with the GPU "
           "count; fires below one per GPU. Not applicable without a GPU.",
       why=f"Each GPU needs about one fast core for data loading and networking at the least; the book {BOOK} would "
           "rather leave a GPU idle than starve all of them.",
       fix="give the job more CPUs (a larger cpuset or instance), run fewer GPU jobs per node, or fewer "
           "loader workers",
       refs="Book appendix (CPU/GPU ratios, oversubscription)")
def cpu_cores_per_gpu(f: Facts) -> Hits:
    gpus = f.value("gpu.count")
    if not gpus:
        raise NotApplicable("no NVIDIA GPU" if gpus == 0 else "GPU count unknown")
    cores = f.need("cpu.physical_cores")
    allowed = f.value("proc.cpus_allowed")
    if cores < gpus:
        yield Hit(f"{cores} physical cores for {gpus} GPUs")
    elif allowed is not None and len(allowed) < gpus:
        yield Hit(f"the audited process may use {len(allowed)} CPUs ({format_cpulist(allowed)}) for {gpus} GPUs")


@check("dirty-writeback", "kernel", "info", "Page-cache dirty limit is small for checkpoint bursts",
       doc="Reads vm.dirty_ratio / vm.dirty_bytes (and the background knobs) with MemTotal and fires when "
           "writers are throttled below 8 GiB of dirty data (dirty_ratio is taken of MemTotal, an upper bound).",
       why="A multi-GB checkpoint that exceeds the dirty limit makes the writing thread wait on disk writeback, "
           "stalling training; a higher limit lets the kernel batch the burst in RAM.",
       fix="sysctl -w vm.dirty_ratio=40 (setting it clears vm.dirty_bytes), or write checkpoints from a "
           "separate thread, with O_DIRECT, or to local disk first",
       refs="Book ch. 3 (filesystem caching and write-back)")
def dirty_writeback(f: Facts) -> Hits:
    dirty_bytes = f.need("kernel.dirty_bytes")
    ratio = f.need("kernel.dirty_ratio")
    limit = dirty_bytes or f.need("mem.total_bytes") * ratio // 100
    if limit < DIRTY_LIMIT_MIN:
        how = f"vm.dirty_bytes = {dirty_bytes}" if dirty_bytes else f"vm.dirty_ratio = {ratio}% of RAM"
        bg_bytes = f.value("kernel.dirty_background_bytes")
        bg = size(bg_bytes) if bg_bytes else f"{f.value('kernel.dirty_background_ratio', '?')}% of RAM"
        yield Hit(f"writers block at about {size(limit)} of dirty pages ({how}; background flush at {bg})",
                  host_action=True)


@check("host-allocator", "kernel", "info", "Host code uses glibc malloc",
       doc="Reads LD_PRELOAD in the audited environment and fires when no jemalloc, tcmalloc or mimalloc is "
           "preloaded.",
       why="A tuned allocator removes lock contention and fragmentation pauses in host-heavy data "
           "preparation, keeping GPUs fed between deliberate sync points.",
       fix="LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 with "
           "MALLOC_CONF=background_thread:true,dirty_decay_ms:10000,muzzy_decay_ms:10000 (or tcmalloc)",
       refs="Book ch. 3 (tuning host memory allocators)")
def host_allocator(f: Facts) -> Hits:
    preload = env_of(f).get("LD_PRELOAD", "")
    if not any(a in preload for a in ALLOCATORS):
        yield Hit(f"LD_PRELOAD = {preload!r}: glibc malloc" if preload else "LD_PRELOAD unset: glibc malloc")


@check("cpu-isa-flags", "kernel", "info", "x86 CPU without AVX-512",
       doc="Reads the flags in /proc/cpuinfo and fires on an x86 CPU without avx512f; lists the vector and "
           "matrix extensions found. A hypervisor may hide flags the hardware has.",
       why="PyTorch's CPU kernels, oneDNN, CPU optimizer offload and llama.cpp choose faster code paths with "
           "AVX-512 (and AMX for BF16/INT8 matrix work); without them CPU-side work runs on AVX2 paths.",
       fix="nothing to set on this host: keep heavy math on the GPU, or pick an AVX-512/AMX CPU for CPU offload",
       refs=f"{INFRA_ARTICLE} (§1 The kernel layer: the lscpu flags)")
def cpu_isa_flags(f: Facts) -> Hits:
    if f.need("cpu.arch") != "x86_64":
        return
    isa = f.need("cpu.isa")
    if "avx512f" not in isa:
        model = f.value("cpu.model", "CPU")
        yield Hit(f"{model}: no AVX-512 (found: {', '.join(isa) or 'none of the tracked extensions'})")


@check("pressure-stall", "kernel", "warning", "Tasks stall on memory or CPU (pressure stall information)",
       doc="Reads /proc/pressure/memory and /proc/pressure/cpu and fires when 'some avg60' (the share of the "
           "last minute in which at least one task waited) exceeds 10% for memory or 20% for CPU.",
       why="Memory stalls mean reclaim, compaction or swap-in on the critical path; CPU stalls mean runnable "
           "loader and launch threads wait for a core. Either starves the GPU. Thresholds are perfstack's own.",
       fix="memory: lower host-memory use (dataset preload, loader workers) or add RAM; CPU: fewer workers per "
           "core, pin loaders, move noisy neighbours off the GPU's node",
       refs="Linux kernel documentation (PSI - Pressure Stall Information); the thresholds are perfstack's own")
def pressure_stall(f: Facts) -> Hits:
    found = {r: f.value(f"psi.{r}") for r in PSI_LIMITS}
    if not any(found.values()):
        f.need("psi.memory")  # raises NotChecked with the reason
    for resource, limit in PSI_LIMITS.items():
        psi = found[resource]
        if psi and psi["some"]["avg60"] > limit:
            full = psi.get("full", {}).get("avg60")
            extra = f", full avg60 = {full:.1f}%" if full else ""
            yield Hit(f"{resource} pressure some avg60 = {psi['some']['avg60']:.1f}%{extra}", subject=resource)
