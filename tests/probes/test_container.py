import pytest
from fakes import FakeHost
from hypothesis import given
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.probes.collector import Collector, run_probes
from perfstack.probes.container import (
    container,
    parse_cpu_list,
    parse_limit,
    parse_proc_cgroup,
    parse_size,
)

# A Docker container on a cgroup v2 host, as /proc/self/mountinfo shows it (trimmed).
DOCKER_MOUNTINFO = """\
1234 1200 0:345 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/ABC:/var/lib/docker/overlay2/l/DEF,upperdir=/var/lib/docker/overlay2/x/diff,workdir=/var/lib/docker/overlay2/x/work
1235 1234 0:350 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1236 1234 0:351 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755,inode64
1239 1236 0:349 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k,inode64
1240 1234 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate,memory_recursiveprot
1241 1234 259:2 /var/lib/docker/containers/abc/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
1244 1234 259:2 /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05 /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05 ro,nosuid,nodev,relatime master:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
"""

HOST_MOUNTINFO = """\
24 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
26 24 0:23 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw,size=263921472k,inode64
"""

V2_CPU_STAT = """\
usage_usec 81234567
user_usec 60000000
system_usec 21234567
nr_periods 1000
nr_throttled 150
throttled_usec 4500000
nr_bursts 0
burst_usec 0
"""

V2_MEMORY_EVENTS = "low 0\nhigh 0\nmax 41\noom 3\noom_kill 2\noom_group_kill 0\n"


def docker_v2() -> FakeHost:
    cg = "/sys/fs/cgroup"
    return FakeHost(
        files={"/.dockerenv": "", "/proc/self/cgroup": "0::/\n", "/proc/1/cgroup": "0::/\n",
               "/proc/self/mountinfo": DOCKER_MOUNTINFO,
               f"{cg}/memory.max": "8589934592\n", f"{cg}/memory.current": "8000000000\n",
               f"{cg}/memory.stat": "anon 7000000000\nfile 1000000000\ninactive_file 600000000\n",
               f"{cg}/memory.events": V2_MEMORY_EVENTS, f"{cg}/cpu.max": "400000 100000\n",
               f"{cg}/cpu.stat": V2_CPU_STAT, f"{cg}/pids.max": "max\n", f"{cg}/pids.current": "57\n",
               f"{cg}/cpuset.cpus.effective": "0-3,8\n", f"{cg}/cpuset.mems.effective": "0\n"},
        dirs={"/dev": ["null", "nvidia0", "nvidia-uvm", "nvidiactl", "shm"]},
        env={"NVIDIA_VISIBLE_DEVICES": "all"})


def test_docker_on_cgroup_v2():
    f = run_probes(docker_v2(), [container])
    assert f["container.in_container"].value is True
    assert f["container.runtime"].value == "docker"
    assert "/.dockerenv exists" in f["container.evidence"].value
    assert "the root filesystem is overlay" in f["container.evidence"].value
    assert f["container.shm_size_bytes"].value == 64 << 20
    assert f["container.root_fstype"].value == "overlay"
    assert f["container.nvidia_device_nodes"].value == ["nvidia0", "nvidiactl"]
    assert f["container.infiniband_device_nodes"].value == []  # /dev/infiniband absent: none passed in
    assert f["cgroup.version"].value == 2 and f["cgroup.path"].value == "/"
    assert f["cgroup.memory_limit_bytes"].value == 8 << 30
    assert f["cgroup.memory_limit_bytes"].source == "/sys/fs/cgroup/memory.max"
    assert f["cgroup.memory_current_bytes"].value == 8_000_000_000
    assert f["cgroup.memory_working_set_bytes"].value == 7_400_000_000
    assert f["cgroup.memory_oom_kills"].value == 2
    assert f["cgroup.cpu_quota_cpus"].value == 4.0
    assert f["cgroup.cpu_stat"].value == {"nr_periods": 1000, "nr_throttled": 150, "throttled_usec": 4500000}
    assert f["cgroup.pids_max"].value is None
    assert f["cgroup.cpuset_cpus"].value == [0, 1, 2, 3, 8]
    assert f["cgroup.cpuset_mems"].value == [0]


def test_bare_metal_v2_takes_the_tightest_ancestor_limit():
    leaf = "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"
    host = FakeHost(files={
        "/proc/self/cgroup": "0::/user.slice/user-1000.slice/session-3.scope\n", "/proc/1/cgroup": "0::/init.scope\n",
        "/proc/self/mountinfo": HOST_MOUNTINFO,
        f"{leaf}/memory.max": "max\n", "/sys/fs/cgroup/user.slice/user-1000.slice/memory.max": "max\n",
        "/sys/fs/cgroup/user.slice/memory.max": "17179869184\n",
        "/sys/fs/cgroup/user.slice/memory.current": "1048576\n",
        "/sys/fs/cgroup/user.slice/memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
        f"{leaf}/cpu.max": "max 100000\n", f"{leaf}/pids.max": "4915\n", f"{leaf}/pids.current": "12\n",
        "/sys/fs/cgroup/user.slice/user-1000.slice/pids.max": "10813\n"},
        dirs={"/dev": ["null", "nvidia0", "nvidiactl"]}, env={"HOME": "/root"})
    f = run_probes(host, [container])
    assert f["container.in_container"].value is False and f["container.runtime"].value is None
    assert f["container.evidence"].value == []
    assert f["container.shm_size_bytes"].value == 263921472 * 1024
    assert f["cgroup.memory_limit_bytes"].value == 16 << 30
    assert f["cgroup.memory_limit_bytes"].source == "/sys/fs/cgroup/user.slice/memory.max"
    assert f["cgroup.memory_current_bytes"].value == 1048576
    assert f["cgroup.memory_oom_kills"].value == 0
    assert f["cgroup.cpu_quota_cpus"].value is None
    assert f["cgroup.pids_max"].value == 4915 and f["cgroup.pids_current"].value == 12
    assert not f["cgroup.cpuset_cpus"].available


V1_CGROUP = """\
12:pids:/kubepods/burstable/pod5f1c/abc123
9:cpu,cpuacct:/kubepods/burstable/pod5f1c/abc123
4:memory:/kubepods/burstable/pod5f1c/abc123
3:cpuset:/kubepods/burstable/pod5f1c/abc123
1:name=systemd:/kubepods/burstable/pod5f1c/abc123
0::/
"""

V1_OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"


def test_kubernetes_pod_on_cgroup_v1():
    # Inside a v1 container the controller directories are the container's own cgroup.
    cg = "/sys/fs/cgroup"
    host = FakeHost(files={
        "/proc/self/cgroup": V1_CGROUP, "/proc/1/cgroup": V1_CGROUP, "/proc/self/mountinfo": DOCKER_MOUNTINFO,
        f"{cg}/memory/memory.limit_in_bytes": "34359738368\n", f"{cg}/memory/memory.usage_in_bytes": "1000\n",
        f"{cg}/memory/memory.stat": "cache 500\nrss 500\ntotal_inactive_file 100\n",
        f"{cg}/memory/memory.oom_control": V1_OOM_CONTROL,
        f"{cg}/cpu/cpu.cfs_quota_us": "200000\n", f"{cg}/cpu/cpu.cfs_period_us": "100000\n",
        f"{cg}/cpu/cpu.stat": "nr_periods 10\nnr_throttled 5\nthrottled_time 3000000000\n",
        f"{cg}/pids/pids.max": "1024\n", f"{cg}/pids/pids.current": "100\n",
        f"{cg}/cpuset/cpuset.effective_cpus": "0-15\n", f"{cg}/cpuset/cpuset.effective_mems": "0-1\n"},
        dirs={"/dev": ["null"]}, env={"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    f = run_probes(host, [container])
    assert f["container.runtime"].value == "kubernetes"
    assert f["cgroup.version"].value == 1
    assert f["cgroup.path"].value == "/kubepods/burstable/pod5f1c/abc123"
    assert f["cgroup.memory_limit_bytes"].value == 32 << 30
    assert f["cgroup.memory_working_set_bytes"].value == 900
    assert f["cgroup.memory_oom_kills"].value == 0
    assert f["cgroup.cpu_quota_cpus"].value == 2.0
    assert f["cgroup.cpu_stat"].value == {"nr_periods": 10, "nr_throttled": 5, "throttled_usec": 3000000}
    assert f["cgroup.pids_max"].value == 1024
    assert f["cgroup.cpuset_cpus"].value == list(range(16)) and f["cgroup.cpuset_mems"].value == [0, 1]


def test_v1_unlimited_is_none_and_podman_is_named():
    cg = "/sys/fs/cgroup/memory/process_api/1a83"
    host = FakeHost(files={
        "/run/.containerenv": 'engine="podman-4.9.3"\n', "/proc/self/mountinfo": HOST_MOUNTINFO,
        "/proc/self/cgroup": "4:memory:/process_api/1a83\n1:cpu:/\n0::/\n",
        f"{cg}/memory.limit_in_bytes": "9223372036854771712\n", f"{cg}/memory.usage_in_bytes": "5435392\n",
        f"{cg}/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n",
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"},
        dirs={"/dev": []})
    f = run_probes(host, [container])
    assert f["container.runtime"].value == "podman"
    assert f["cgroup.memory_limit_bytes"].value is None
    assert f["cgroup.cpu_quota_cpus"].value is None
    assert "no oom_kill counter" in f["cgroup.memory_oom_kills"].reason  # kernels before 4.13


def test_unlistable_dev_is_not_an_empty_answer():
    host = docker_v2()
    host.dirs.pop("/dev")
    f = run_probes(host, [container])
    assert not f["container.nvidia_device_nodes"].available
    assert "absent" in f["container.nvidia_device_nodes"].reason


def test_garbage_cgroup_file_live_is_not_available_with_reason():
    host = docker_v2()
    host.files["/proc/self/cgroup"] = "this is not a cgroup file\n"
    f = run_probes(host, [container])
    assert not f["cgroup.version"].available
    assert "not a cgroup membership list (line 1" in f["cgroup.version"].reason
    assert "not a cgroup membership list" in f["cgroup.memory_limit_bytes"].reason
    assert f["container.in_container"].value is True  # detection still works


def test_garbage_in_bundle_is_an_input_error_naming_the_file():
    host = docker_v2()
    host.kind = "bundle"
    host.files["/sys/fs/cgroup/cpu.max"] = "lots\n"
    with pytest.raises(InputError, match="bundle file sys/fs/cgroup/cpu.max is not in the expected format"):
        run_probes(host, [container])


def test_parsers():
    assert parse_limit("max\n") is None and parse_limit("-1") is None and parse_limit("4096\n") == 4096
    assert parse_cpu_list("0-2,7\n") == [0, 1, 2, 7] and parse_cpu_list("\n") == []
    assert parse_size("size=65536k") == 64 << 20 and parse_size("size=2g") == 2 << 30
    assert parse_proc_cgroup("1:cpu,cpuacct:/a\n0::/b\n") == {"cpu": "/a", "cpuacct": "/a", "": "/b"}
    with pytest.raises(ValueError):
        parse_cpu_list("3-1")


@given(st.text())
def test_cgroup_parsers_return_or_raise(text):
    for parse, kind in ((parse_proc_cgroup, dict), (parse_cpu_list, list)):
        try:
            assert isinstance(parse(text), kind)
        except ValueError:
            pass
    try:
        value = parse_limit(text)
        assert value is None or isinstance(value, int)
    except ValueError:
        pass


@given(st.text())
def test_bundle_probe_raises_only_input_errors(text):
    host = docker_v2()
    host.kind = "bundle"
    for path in ("/proc/self/cgroup", "/proc/self/mountinfo", "/sys/fs/cgroup/memory.events",
                 "/sys/fs/cgroup/cpuset.cpus.effective"):
        host.files[path] = text
    c = Collector(host)
    try:
        container(c)
    except InputError:
        pass
