from fakes import facts

from perfstack.host import Unavailable
from perfstack.rules import CHECKS, load, run_check

load()
GiB, MiB = 1 << 30, 1 << 20


def run(check_id, **values):
    return run_check(CHECKS[check_id], facts(**values))


def test_container_context_info_inside_quiet_outside():
    found, _ = run("container-context", container__in_container=True, container__runtime="docker",
                   container__evidence=["/.dockerenv exists"])
    assert found[0].severity.value == "info" and "docker" in found[0].evidence and "/.dockerenv" in found[0].evidence
    assert run("container-context", container__in_container=False)[1].status == "passed"
    assert run("container-context")[1].status == "not-checked"


def test_shm_size_critical_at_docker_default():
    found, res = run("shm-size", container__shm_size_bytes=64 * MiB, mem__total_bytes=512 * GiB,
                     container__in_container=True)
    assert res.status == "found" and found[0].severity.value == "critical"
    assert found[0].evidence == "/dev/shm is 64 MiB on a host with 512 GiB RAM"
    assert found[0].host_action and found[0].fix_commands == []  # the fix is a run flag, not a command in here
    assert "--shm-size" in found[0].fix


def test_shm_size_warning_when_small_for_the_machine():
    found, _ = run("shm-size", container__shm_size_bytes=2 * GiB, mem__total_bytes=512 * GiB)
    assert found[0].severity.value == "warning"
    assert found[0].fix_commands == ["mount -o remount,size=16G -- /dev/shm"]  # bare metal: remount
    found, _ = run("shm-size", container__shm_size_bytes=512 * MiB)  # RAM unknown: below 1 GiB
    assert found[0].severity.value == "warning"


def test_shm_size_quiet_when_healthy():
    assert run("shm-size", container__shm_size_bytes=16 * GiB, mem__total_bytes=512 * GiB)[1].status == "passed"
    # Half of a small machine's RAM is the tmpfs default and fine.
    assert run("shm-size", container__shm_size_bytes=3 * GiB, mem__total_bytes=6 * GiB)[1].status == "passed"


def test_shm_size_not_checked_when_missing():
    _, res = run("shm-size", container__shm_size_bytes=Unavailable("no tmpfs with a size is mounted on /dev/shm"))
    assert res.status == "not-checked" and "no tmpfs" in res.reason


def test_cgroup_memory_oom_kills_are_critical():
    found, _ = run("cgroup-memory-limit", cgroup__memory_limit_bytes=32 * GiB, cgroup__memory_oom_kills=3,
                   mem__total_bytes=512 * GiB)
    assert found[0].severity.value == "critical"
    assert found[0].evidence == "3 OOM kill(s) recorded by this cgroup; cgroup memory limit 32 GiB (host RAM 512 GiB)"


def test_cgroup_memory_near_limit_warns_on_working_set_not_cache():
    found, _ = run("cgroup-memory-limit", cgroup__memory_limit_bytes=32 * GiB, cgroup__memory_oom_kills=0,
                   cgroup__memory_current_bytes=31 * GiB, cgroup__memory_working_set_bytes=30 * GiB)
    assert found[0].severity.value == "warning" and "94%" in found[0].evidence
    # Mostly page cache: the working set is far from the limit, so only the info about the limit remains.
    found, _ = run("cgroup-memory-limit", cgroup__memory_limit_bytes=32 * GiB, cgroup__memory_oom_kills=0,
                   cgroup__memory_current_bytes=31 * GiB, cgroup__memory_working_set_bytes=4 * GiB,
                   mem__total_bytes=512 * GiB)
    assert found[0].severity.value == "info" and "see 512 GiB" in found[0].evidence


def test_cgroup_memory_quiet_without_limit_and_not_checked_when_missing():
    assert run("cgroup-memory-limit", cgroup__memory_limit_bytes=None, cgroup__memory_oom_kills=0,
               mem__total_bytes=64 * GiB)[1].status == "passed"
    assert run("cgroup-memory-limit", cgroup__memory_limit_bytes=128 * GiB, mem__total_bytes=64 * GiB)[1].status == "passed"
    _, res = run("cgroup-memory-limit", cgroup__memory_limit_bytes=Unavailable("memory.max: absent"))
    assert res.status == "not-checked" and "absent" in res.reason


def test_cgroup_cpu_quota_below_host_warns_with_throttle_share():
    found, _ = run("cgroup-cpu-quota", cgroup__cpu_quota_cpus=4.0, cpu__logical_count=224,
                   cgroup__cpu_stat={"nr_periods": 1000, "nr_throttled": 150, "throttled_usec": 4_500_000})
    assert found[0].evidence == ("CFS quota allows 4 CPUs of the host's 224; "
                                 "throttled in 15.0% of periods (150 of 1000, 4.5 s in all)")


def test_cgroup_cpu_throttling_alone_fires_above_5_percent():
    stat = {"nr_periods": 1000, "nr_throttled": 80, "throttled_usec": 10}
    found, _ = run("cgroup-cpu-quota", cgroup__cpu_quota_cpus=None, cgroup__cpu_stat=stat)
    assert "8.0% of periods" in found[0].evidence
    stat["nr_throttled"] = 20
    assert run("cgroup-cpu-quota", cgroup__cpu_quota_cpus=None, cgroup__cpu_stat=stat)[1].status == "passed"


def test_cgroup_cpu_quota_quiet_and_not_checked():
    assert run("cgroup-cpu-quota", cgroup__cpu_quota_cpus=None)[1].status == "passed"
    assert run("cgroup-cpu-quota", cgroup__cpu_quota_cpus=64.0, cpu__logical_count=64)[1].status == "passed"
    assert run("cgroup-cpu-quota", cgroup__cpu_quota_cpus=Unavailable("cpu.max: absent"))[1].status == "not-checked"
    # A quota but no host CPU count: cannot compare.
    assert run("cgroup-cpu-quota", cgroup__cpu_quota_cpus=4.0)[1].status == "not-checked"


def test_cgroup_pids():
    found, _ = run("cgroup-pids", cgroup__pids_max=1024, cgroup__pids_current=100, gpu__count=8)
    assert found[0].evidence == "pids.max = 1024, 100 in use (suggested at least 4096)"
    assert run("cgroup-pids", cgroup__pids_max=4096, cgroup__pids_current=3500, gpu__count=1)[0]
    assert run("cgroup-pids", cgroup__pids_max=None)[1].status == "passed"
    assert run("cgroup-pids", cgroup__pids_max=32768, cgroup__pids_current=100, gpu__count=8)[1].status == "passed"


NODES = [{"id": 0, "cpus": list(range(0, 8)), "mem_total_kib": 1}, {"id": 1, "cpus": list(range(8, 16)), "mem_total_kib": 1}]
GPUS = [{"index": 0, "name": "H100", "numa_node": 1}, {"index": 1, "name": "H100", "numa_node": 1}]


def test_cpuset_on_the_wrong_node_warns():
    found, _ = run("cgroup-cpuset-numa", numa__nodes=NODES, gpu__list=GPUS, cgroup__cpuset_cpus=list(range(0, 4)),
                   cgroup__cpuset_mems=[0])
    assert [h.severity.value for h in found] == ["warning", "warning", "info"]
    assert found[0].evidence == "cpuset CPUs 0-3 include none of node 1's (GPU 0,1 on NUMA node 1)"
    assert found[1].evidence == "cpuset.mems 0 exclude node 1 (GPU 0,1 on NUMA node 1)"
    assert found[0].subject == "numa1"


def test_cpuset_local_or_unrestricted_passes():
    assert run("cgroup-cpuset-numa", numa__nodes=NODES, gpu__list=GPUS, cgroup__cpuset_cpus=list(range(8, 12)),
               cgroup__cpuset_mems=[1])[1].status == "passed"
    assert run("cgroup-cpuset-numa", numa__nodes=NODES, cgroup__cpuset_cpus=list(range(16)))[1].status == "passed"
    assert run("cgroup-cpuset-numa", numa__nodes=NODES[:1])[1].status == "not-applicable"
    assert run("cgroup-cpuset-numa", numa__nodes=NODES, gpu__list=[{"index": 0, "numa_node": None}],
               cgroup__cpuset_cpus=[0])[1].status == "not-checked"


MOUNTS = [{"mountpoint": "/", "fstype": "overlay", "source": "overlay", "options": ["rw"], "dev": "0:1"},
          {"mountpoint": "/etc/hosts", "fstype": "ext4", "source": "/dev/nvme0n1p2", "options": ["rw"], "dev": "259:2"},
          {"mountpoint": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "fstype": "ext4", "source": "/dev/nvme0n1p2",
           "options": ["ro"], "dev": "259:2"},
          {"mountpoint": "/dev/shm", "fstype": "tmpfs", "source": "shm", "options": ["rw"], "dev": "0:2"}]


def test_overlay_without_volumes_warns_with_a_volume_passes():
    found, _ = run("overlay-io", container__root_fstype="overlay", storage__mounts=MOUNTS)
    assert found[0].evidence == "/ is overlayfs and no data volume is mounted"
    volume = {"mountpoint": "/mnt/dataset", "fstype": "xfs", "source": "/dev/nvme1n1", "options": ["ro"], "dev": "259:3"}
    assert run("overlay-io", container__root_fstype="overlay", storage__mounts=MOUNTS + [volume])[1].status == "passed"
    assert run("overlay-io", container__root_fstype="ext4")[1].status == "passed"


def test_container_gpu_runtime():
    base = dict(container__in_container=True, env={"NVIDIA_VISIBLE_DEVICES": "all"})
    found, _ = run("container-gpu-runtime", container__nvidia_device_nodes=[], **base)
    assert found[0].severity.value == "critical" and "NVIDIA_VISIBLE_DEVICES=all" in found[0].evidence
    assert run("container-gpu-runtime", container__nvidia_device_nodes=["nvidiactl"], **base)[0]  # control node alone
    assert run("container-gpu-runtime", container__nvidia_device_nodes=["nvidia0", "nvidiactl"], **base)[1].status == "passed"
    assert run("container-gpu-runtime", container__in_container=True, env={})[1].status == "not-applicable"
    assert run("container-gpu-runtime", container__in_container=False)[1].status == "not-applicable"
    assert run("container-gpu-runtime", container__nvidia_device_nodes=Unavailable("/dev: absent"),
               **base)[1].status == "not-checked"


PORTS = [{"device": "mlx5_0", "port": "1", "state": "ACTIVE", "rate_gbps": 400.0, "link_layer": "InfiniBand"}]


def test_rdma_in_container():
    found, _ = run("rdma-in-container", container__in_container=True, network__rdma_ports=PORTS,
                   container__infiniband_device_nodes=[])
    assert found[0].severity.value == "critical" and "mlx5_0" in found[0].evidence
    assert run("rdma-in-container", container__in_container=True, network__rdma_ports=PORTS,
               container__infiniband_device_nodes=["uverbs0"])[1].status == "passed"
    assert run("rdma-in-container", container__in_container=True, network__rdma_ports=[])[1].status == "not-applicable"


VETH = [{"name": "lo", "is_virtual": True, "has_device": False}, {"name": "eth0", "is_virtual": False, "has_device": False}]


def test_container_network_mode():
    base = dict(container__in_container=True, gpu__count=8, env={"WORLD_SIZE": "16"})
    found, _ = run("container-network-mode", network__interfaces=VETH, **base)
    assert found[0].evidence == "WORLD_SIZE=16 with 8 local GPU(s), but only virtual interfaces are visible (eth0)"
    host_net = VETH + [{"name": "ens1f0np0", "is_virtual": False, "has_device": True}]
    assert run("container-network-mode", network__interfaces=host_net, **base)[1].status == "passed"
    single = dict(base, env={"WORLD_SIZE": "8"})
    assert run("container-network-mode", network__interfaces=VETH, **single)[1].status == "not-applicable"


def test_k8s_qos_class():
    k8s = dict(container__runtime="kubernetes")
    found, _ = run("k8s-qos-class", cgroup__path="/kubepods/burstable/pod5f1c/abc", **k8s)
    assert "Burstable" in found[0].evidence
    assert run("k8s-qos-class", cgroup__path="/kubepods/pod5f1c/abc", **k8s)[1].status == "passed"
    assert run("k8s-qos-class", cgroup__path="/", **k8s)[1].status == "not-checked"
    assert run("k8s-qos-class", container__runtime="docker")[1].status == "not-applicable"
