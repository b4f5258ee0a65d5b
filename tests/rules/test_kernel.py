from fakes import facts

from perfstack.host import Unavailable
from perfstack.rules import CHECKS, load, run_check

load()


def ids(findings):
    return [f.id for f in findings]


def test_swappiness_fires_above_10():
    found, res = run_check(CHECKS["swappiness"], facts(kernel__swappiness=60))
    assert res.status == "found" and found[0].evidence == "vm.swappiness = 60"
    assert found[0].sources == ["test:kernel.swappiness"]
    assert any("vm.swappiness=10" in c for c in found[0].fix_commands)


def test_swappiness_quiet_at_10():
    assert run_check(CHECKS["swappiness"], facts(kernel__swappiness=10))[1].status == "passed"


def test_swappiness_not_checked_when_missing():
    _, res = run_check(CHECKS["swappiness"], facts(kernel__swappiness=Unavailable("permission denied")))
    assert res.status == "not-checked" and "permission denied" in res.reason


def test_thp_never_warns_always_with_defrag_is_info():
    found, _ = run_check(CHECKS["thp-mode"], facts(kernel__thp_enabled="never"))
    assert found[0].severity.value == "warning"
    found, _ = run_check(CHECKS["thp-mode"], facts(kernel__thp_enabled="always", kernel__thp_defrag="always"))
    assert found[0].severity.value == "info"
    assert run_check(CHECKS["thp-mode"], facts(kernel__thp_enabled="madvise"))[1].status == "passed"


def run(check_id, **values):
    """(findings, result) of one check over hand-built facts."""
    return run_check(CHECKS[check_id], facts(**values))


def status(check_id, **values):
    return run(check_id, **values)[1].status


GONE = Unavailable("/proc/meminfo: absent")
TWO_NODES = [{"id": 0, "cpus": list(range(0, 56)) + list(range(112, 168)), "mem_total_kib": 1056546240,
              "distances": [10, 21]},
             {"id": 1, "cpus": list(range(56, 112)) + list(range(168, 224)), "mem_total_kib": 1056546240,
              "distances": [21, 10]}]
ONE_NODE = [{"id": 0, "cpus": [0, 1], "mem_total_kib": 24683656, "distances": [10]}]
GIB = 1024**3


# -- swap-enabled -------------------------------------------------------------------------------
def test_swap_process_swapped_is_critical_with_commands_when_ram_allows():
    found, res = run("swap-enabled", mem__swap_total_bytes=8 * GIB, mem__swap_free_bytes=7 * GIB,
                     mem__available_bytes=100 * GIB, proc__vm_swap_bytes=512 * 1024**2, gpu__count=8,
                     swap__devices=[{"name": "/dev/dm-1", "type": "partition"}])
    assert res.status == "found" and found[0].severity.value == "critical"
    assert "512 MiB in swap" in found[0].evidence and "/dev/dm-1: 1 GiB of 8 GiB in use" in found[0].evidence
    assert found[0].fix_commands[0] == "swapoff -a"


def test_swap_on_gpu_node_warns_and_without_gpu_is_info():
    found, _ = run("swap-enabled", mem__swap_total_bytes=8 * GIB, mem__swap_free_bytes=8 * GIB,
                   proc__vm_swap_bytes=0, gpu__count=1)
    assert found[0].severity.value == "warning"
    assert found[0].fix_commands == []  # available memory unknown: swapoff could not be shown to fit
    found, _ = run("swap-enabled", mem__swap_total_bytes=8 * GIB, mem__swap_free_bytes=8 * GIB, gpu__count=0)
    assert found[0].severity.value == "info" and "no GPU was found" in found[0].evidence


def test_swap_on_zram_only_is_info():
    found, _ = run("swap-enabled", mem__swap_total_bytes=GIB, mem__swap_free_bytes=GIB, gpu__count=8,
                   swap__devices=[{"name": "/dev/zram0", "type": "partition"}])
    assert found[0].severity.value == "info" and "zram" in found[0].evidence


def test_swap_quiet_without_swap_and_not_checked_without_meminfo():
    assert status("swap-enabled", mem__swap_total_bytes=0, mem__swap_free_bytes=0, proc__vm_swap_bytes=0,
                  gpu__count=8) == "passed"
    _, res = run("swap-enabled", mem__swap_total_bytes=GONE, gpu__count=8)
    assert res.status == "not-checked" and "/proc/meminfo: absent" in res.reason


# -- numa-balancing -----------------------------------------------------------------------------
def test_numa_balancing_fires_on_multi_node_only():
    found, res = run("numa-balancing", numa__nodes=TWO_NODES, kernel__numa_balancing=1)
    assert res.status == "found" and found[0].evidence == "kernel.numa_balancing = 1 on a 2-node host"
    assert found[0].host_action and "sysctl -w kernel.numa_balancing=0" in found[0].fix_commands
    assert status("numa-balancing", numa__nodes=TWO_NODES, kernel__numa_balancing=0) == "passed"
    assert status("numa-balancing", numa__nodes=TWO_NODES, kernel__numa_balancing=2) == "passed"  # tiering only
    _, res = run("numa-balancing", numa__nodes=ONE_NODE, kernel__numa_balancing=1)
    assert res.status == "not-applicable" and res.reason == "single NUMA node"


def test_numa_balancing_not_checked_when_missing():
    _, res = run("numa-balancing", numa__nodes=TWO_NODES,
                 kernel__numa_balancing=Unavailable("/proc/sys/kernel/numa_balancing: Cannot allocate memory"))
    assert res.status == "not-checked" and "Cannot allocate memory" in res.reason


# -- cpu-governor -------------------------------------------------------------------------------
def test_cpu_governor_fires_on_powersave_and_names_the_cpus():
    found, _ = run("cpu-governor", cpu__governors={"performance": "0-55", "powersave": "56-111"},
                   cpu__scaling_driver="intel_pstate")
    assert found[0].evidence == "scaling_governor powersave on CPUs 56-111 (driver intel_pstate)"
    assert "echo performance" in found[0].fix_commands[0] and found[0].host_action
    assert status("cpu-governor", cpu__governors={"performance": "0-223"}) == "passed"


def test_cpu_governor_in_a_vm_is_not_checked_with_the_reason():
    reason = "cpufreq not exposed (VM or container?): /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor: absent"
    _, res = run("cpu-governor", cpu__governors=Unavailable(reason))
    assert res.status == "not-checked" and "cpufreq not exposed (VM or container?)" in res.reason


# -- memlock-limit / nofile-limit ---------------------------------------------------------------
def test_memlock_64k_is_critical_8m_is_warning_unlimited_passes():
    found, _ = run("memlock-limit", limits__memlock={"soft": 65536, "hard": 65536, "units": "bytes"})
    assert found[0].severity.value == "critical" and found[0].evidence == "max locked memory: soft 64 KiB, hard 64 KiB"
    assert "memlock unlimited" in found[0].fix_commands[0]
    found, _ = run("memlock-limit", limits__memlock={"soft": 8388608, "hard": "unlimited", "units": "bytes"})
    assert found[0].severity.value == "warning" and "ulimit -l unlimited" in found[0].fix
    found, _ = run("memlock-limit", limits__memlock={"soft": 65536, "hard": 8388608, "units": "bytes"})
    assert "ulimit -l 8192" in found[0].fix  # ulimit -l counts KiB
    assert status("memlock-limit", limits__memlock={"soft": "unlimited", "hard": "unlimited", "units": "bytes"}) \
        == "passed"
    _, res = run("memlock-limit", limits__memlock=Unavailable("/proc/self/limits: absent"))
    assert res.status == "not-checked"


def test_nofile_at_1024_is_info_and_above_passes():
    found, _ = run("nofile-limit", limits__nofile={"soft": 1024, "hard": 1048576, "units": "files"})
    assert found[0].severity.value == "info" and "ulimit -n 1048576" in found[0].fix
    assert status("nofile-limit", limits__nofile={"soft": 65536, "hard": 65536, "units": "files"}) == "passed"
    assert status("nofile-limit", limits__nofile=Unavailable("/proc/self/limits: absent")) == "not-checked"


# -- NUMA topology and binding ------------------------------------------------------------------
def test_numa_topology_reports_layout_and_memory_only_nodes():
    gh200 = [{"id": 0, "cpus": list(range(72)), "mem_total_kib": 503152448, "distances": [10, 80]},
             {"id": 1, "cpus": [], "mem_total_kib": 100663296, "distances": [80, 10]}]
    found, _ = run("numa-topology", numa__nodes=gh200)
    assert found[0].evidence == ("2 NUMA nodes: node0 CPUs 0-71, 479.8 GiB; node1 no CPUs (memory-only), 96 GiB; "
                                 "distance remote 80 vs local 10")
    assert status("numa-topology", numa__nodes=ONE_NODE) == "passed"


def test_proc_numa_binding():
    found, _ = run("proc-numa-binding", numa__nodes=TWO_NODES, proc__cpus_allowed=list(range(224)))
    assert found[0].severity.value == "info" and "span all 2 nodes" in found[0].evidence
    gpus = [{"index": 0, "numa_node": 1}]
    found, _ = run("proc-numa-binding", numa__nodes=TWO_NODES, proc__cpus_allowed=list(range(56)), gpu__list=gpus)
    assert found[0].severity.value == "warning" and "bound to node(s) 0 while the GPUs are on node(s) 1" \
        == found[0].evidence
    assert status("proc-numa-binding", numa__nodes=TWO_NODES, proc__cpus_allowed=list(range(56, 112)),
                  gpu__list=gpus) == "passed"
    assert status("proc-numa-binding", numa__nodes=ONE_NODE, proc__cpus_allowed=[0, 1]) == "not-applicable"


# -- the other static kernel checks -------------------------------------------------------------
def test_hugetlb_pool_unused_pool_is_info():
    pools = [{"size_kib": 2048, "total": 0, "free": 0, "reserved": 0},
             {"size_kib": 1048576, "total": 64, "free": 64, "reserved": 0}]
    found, _ = run("hugetlb-pool", mem__hugepage_pools=pools)
    assert found[0].evidence == "64 × 1 GiB huge pages (64 GiB) reserved, all free"
    assert found[0].subject == "hugepages-1048576kB"
    pools[1]["free"] = 10
    assert status("hugetlb-pool", mem__hugepage_pools=pools) == "passed"


def test_cpu_cstates():
    states = [{"name": "POLL", "latency_us": 0, "disabled": False}, {"name": "C1", "latency_us": 2, "disabled": False},
              {"name": "C6", "latency_us": 290, "disabled": False}]
    found, _ = run("cpu-cstates", cpu__idle_states=states, cpu__virtualized=False)
    assert "C6 (290 µs)" in found[0].evidence and "-gt 20" in found[0].fix_commands[0]
    states[2]["disabled"] = True
    assert status("cpu-cstates", cpu__idle_states=states, cpu__virtualized=False) == "passed"
    assert status("cpu-cstates", cpu__idle_states=[], cpu__virtualized=True) == "not-applicable"


def test_smt_state_needs_cpu_pressure():
    psi = {"some": {"avg10": 40.0, "avg60": 35.5, "avg300": 20.0, "total": 1}}
    found, _ = run("smt-state", cpu__smt={"active": True, "control": "on"}, psi__cpu=psi)
    assert "avg60 = 35.5%" in found[0].evidence
    assert status("smt-state", cpu__smt={"active": False, "control": "notsupported"}, psi__cpu=psi) == "passed"
    psi["some"]["avg60"] = 3.0
    assert status("smt-state", cpu__smt={"active": True, "control": "on"}, psi__cpu=psi) == "passed"


def test_iommu_mode():
    found, _ = run("iommu-mode", gpu__count=8, kernel__iommu={"units": ["dmar0"], "group_types": ["DMA-FQ"]})
    assert found[0].evidence == "IOMMU dmar0 active with default domain type DMA-FQ"
    assert status("iommu-mode", gpu__count=8, kernel__iommu={"units": ["dmar0"], "group_types": ["identity"]}) \
        == "passed"
    older = {"units": ["ivhd0"], "group_types": []}  # no group type files: judge by the command line
    assert status("iommu-mode", gpu__count=8, kernel__iommu=older, system__cmdline="ro quiet") == "found"
    assert status("iommu-mode", gpu__count=8, kernel__iommu=older, system__cmdline="ro iommu=pt quiet") == "passed"
    assert status("iommu-mode", gpu__count=8, kernel__iommu={"units": [], "group_types": []}) == "passed"
    assert status("iommu-mode", gpu__count=0, kernel__iommu=older) == "not-applicable"


def test_kernel_version_features():
    assert status("kernel-version-features", system__kernel_release="5.15.0-105-generic") == "found"
    assert status("kernel-version-features", system__kernel_release="6.2.9-300.fc38.x86_64") == "found"
    assert status("kernel-version-features", system__kernel_release="6.1.24") == "passed"
    assert status("kernel-version-features", system__kernel_release="6.8.0-1015-nvidia") == "passed"
    assert status("kernel-version-features", system__kernel_release="6.18.44-fc-v769") == "passed"
    _, res = run("kernel-version-features", system__kernel_release="custom")
    assert res.status == "not-checked" and "custom" in res.reason


def test_cpu_cores_per_gpu():
    found, _ = run("cpu-cores-per-gpu", gpu__count=8, cpu__physical_cores=4)
    assert found[0].evidence == "4 physical cores for 8 GPUs"
    found, _ = run("cpu-cores-per-gpu", gpu__count=8, cpu__physical_cores=112, proc__cpus_allowed=[0, 1, 2, 3])
    assert "may use 4 CPUs (0-3) for 8 GPUs" in found[0].evidence
    assert status("cpu-cores-per-gpu", gpu__count=8, cpu__physical_cores=112) == "passed"
    assert status("cpu-cores-per-gpu", gpu__count=0, cpu__physical_cores=2) == "not-applicable"
    assert status("cpu-cores-per-gpu", cpu__physical_cores=2) == "not-applicable"


def test_dirty_writeback():
    found, _ = run("dirty-writeback", kernel__dirty_bytes=268435456, kernel__dirty_ratio=0,
                   kernel__dirty_background_bytes=134217728, mem__total_bytes=2048 * GIB)
    assert found[0].evidence == ("writers block at about 256 MiB of dirty pages (vm.dirty_bytes = 268435456; "
                                 "background flush at 128 MiB)")
    assert status("dirty-writeback", kernel__dirty_bytes=0, kernel__dirty_ratio=20,
                  mem__total_bytes=2048 * GIB) == "passed"
    assert status("dirty-writeback", kernel__dirty_bytes=0, kernel__dirty_ratio=20, mem__total_bytes=16 * GIB) \
        == "found"


def test_host_allocator():
    assert status("host-allocator", env={}) == "found"
    assert status("host-allocator", env={"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}) == "passed"
    assert status("host-allocator", env=Unavailable("env.json missing")) == "not-checked"


def test_cpu_isa_flags():
    found, _ = run("cpu-isa-flags", cpu__arch="x86_64", cpu__isa=["avx2"], cpu__model="AMD EPYC 7763 64-Core Processor")
    assert found[0].evidence == "AMD EPYC 7763 64-Core Processor: no AVX-512 (found: avx2)"
    assert status("cpu-isa-flags", cpu__arch="x86_64", cpu__isa=["avx2", "avx512f", "amx_tile"]) == "passed"
    assert status("cpu-isa-flags", cpu__arch="aarch64", cpu__isa=["sve2"]) == "passed"


def test_pressure_stall_per_resource():
    hot = {"some": {"avg10": 30.0, "avg60": 25.0, "avg300": 9.0, "total": 1},
           "full": {"avg10": 12.0, "avg60": 8.0, "avg300": 2.0, "total": 1}}
    calm = {"some": {"avg10": 0.0, "avg60": 0.1, "avg300": 0.0, "total": 1}}
    found, _ = run("pressure-stall", psi__memory=hot, psi__cpu=calm)
    assert [(x.subject, x.evidence) for x in found] == [("memory", "memory pressure some avg60 = 25.0%, "
                                                                   "full avg60 = 8.0%")]
    assert status("pressure-stall", psi__memory=calm, psi__cpu=calm) == "passed"
    # Only one resource readable: still checked on that one.
    assert status("pressure-stall", psi__memory=Unavailable("psi=0"), psi__cpu=hot) == "found"
    _, res = run("pressure-stall", psi__memory=Unavailable("/proc/pressure/memory: absent"),
                 psi__cpu=Unavailable("/proc/pressure/cpu: absent"))
    assert res.status == "not-checked" and "absent" in res.reason


def test_inside_a_container_limits_are_raised_with_ulimit_not_limits_d():
    found, _ = run("memlock-limit", limits__memlock={"soft": 65536, "hard": 65536, "units": "bytes"},
                   container__in_container=True)
    assert found[0].fix_commands == [] and "--ulimit memlock=-1" in found[0].fix
    found, _ = run("nofile-limit", limits__nofile={"soft": 1024, "hard": 1024, "units": "files"},
                   container__in_container=True)
    assert found[0].fix_commands == [] and "--ulimit nofile=65536:65536" in found[0].fix
    found, _ = run("memlock-limit", limits__memlock={"soft": 65536, "hard": 65536, "units": "bytes"},
                   container__in_container=False)
    assert "/etc/security/limits.d/99-perfstack-memlock.conf" in found[0].fix_commands[0]
