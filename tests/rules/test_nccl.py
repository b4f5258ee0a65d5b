from fakes import facts
from hypothesis import given
from hypothesis import strategies as st

from perfstack.host import Unavailable
from perfstack.rules import CHECKS, load, run_check
from perfstack.rules.nccl import ALGOS, as_int, unknown_names

load()

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000:19:00.0", "compute_capability": "9.0",
        "memory_total_bytes": 85520809984, "numa_node": 0}
V100 = {**H100, "name": "Tesla V100-SXM2-32GB", "compute_capability": "7.0"}
IFACES = [{"name": "lo", "operstate": "unknown", "link_type": "loopback", "is_virtual": True},
          {"name": "eth0", "operstate": "up", "link_type": "ether", "is_virtual": False},
          {"name": "ib0", "operstate": "down", "link_type": "infiniband", "is_virtual": False},
          {"name": "docker0", "operstate": "up", "link_type": "ether", "is_virtual": True}]
IB_PORT = [{"device": "mlx5_0", "port": "1", "state": "ACTIVE", "phys_state": "LinkUp", "rate_gbps": 400.0,
            "link_layer": "InfiniBand", "numa_node": 0}]


def base(**over):
    values = dict(env={}, nccl__conf={}, gpu__count=8, gpu__list=[{**H100, "index": i} for i in range(8)],
                  network__rdma_ports=[], network__interfaces=IFACES, python__torch="2.11.0+cu130",
                  python__torch_cuda="13.0", python__nccl="2.28.9", python__packages={"nvidia-nccl-cu13": "2.28.9"},
                  python__matmul_allow_tf32=False, python__float32_matmul_precision="highest",
                  cpu__logical_count=16)
    values.update(over)
    return facts(**values)


def run(check_id, **over):
    return run_check(CHECKS[check_id], base(**over))


# -- nccl-p2p-disabled (required) ----------------------------------------------------------------------
def test_p2p_disabled_is_critical_and_names_each_variable():
    found, res = run("nccl-p2p-disabled", env={"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"})
    assert res.status == "found"
    assert {f.subject: f.severity.value for f in found} == {"NCCL_P2P_DISABLE": "critical",
                                                            "NCCL_SHM_DISABLE": "warning"}
    assert "NCCL_P2P_DISABLE=1" in found[0].evidence and found[0].fix == "unset NCCL_P2P_DISABLE"


def test_p2p_disabled_from_config_file_says_where():
    found, _ = run("nccl-p2p-disabled", nccl__conf={"NCCL_P2P_DISABLE": {"value": "1", "file": "/etc/nccl.conf"}})
    assert "(from /etc/nccl.conf)" in found[0].evidence and "/etc/nccl.conf" in found[0].fix
    # the environment wins over the file, as in NCCL
    assert run("nccl-p2p-disabled", env={"NCCL_P2P_DISABLE": "0"},
               nccl__conf={"NCCL_P2P_DISABLE": {"value": "1", "file": "/etc/nccl.conf"}})[1].status == "passed"


def test_ib_disable_depends_on_rdma_and_single_gpu_is_info():
    found, _ = run("nccl-p2p-disabled", env={"NCCL_IB_DISABLE": "1"}, network__rdma_ports=IB_PORT)
    assert found[0].severity.value == "critical" and "TCP" in found[0].evidence
    found, _ = run("nccl-p2p-disabled", env={"NCCL_IB_DISABLE": "1"})
    assert found[0].severity.value == "info"
    found, _ = run("nccl-p2p-disabled", env={"NCCL_IB_DISABLE": "1"}, network__rdma_ports=Unavailable("x"))
    assert found[0].severity.value == "warning"
    found, _ = run("nccl-p2p-disabled", env={"NCCL_P2P_LEVEL": "LOC"}, gpu__count=1, gpu__list=[H100])
    assert found[0].severity.value == "info" and "one GPU" in found[0].evidence
    found, _ = run("nccl-p2p-disabled", env={"NCCL_NET": "Socket"}, network__rdma_ports=IB_PORT)
    assert found[0].subject == "NCCL_NET"


def test_p2p_quiet_when_healthy_and_not_checked_without_env():
    assert run("nccl-p2p-disabled", env={"NCCL_P2P_DISABLE": "0", "NCCL_DEBUG": "WARN"})[1].status == "passed"
    _, res = run("nccl-p2p-disabled", env=Unavailable("env.json missing from bundle"))
    assert res.status == "not-checked" and "env.json" in res.reason
    assert run("nccl-p2p-disabled", gpu__count=0, gpu__list=[])[1].status == "not-applicable"


# -- nccl-debug-env (required) --------------------------------------------------------------------------
def test_nccl_debug():
    found, _ = run("nccl-debug-env", env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
    assert [f.subject for f in found] == ["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"] and found[0].severity.value == "info"
    assert run("nccl-debug-env", env={"NCCL_DEBUG": "WARN"})[1].status == "passed"
    assert run("nccl-debug-env", env=Unavailable("env.json missing"))[1].status == "not-checked"


# -- the others ------------------------------------------------------------------------------------------
def test_async_error_handling():
    found, _ = run("nccl-async-error-handling", env={"NCCL_ASYNC_ERROR_HANDLING": "1"})
    assert "deprecated" in found[0].evidence
    found, _ = run("nccl-async-error-handling", env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"})
    assert "hanging" in found[0].evidence
    found, _ = run("nccl-async-error-handling", env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
                                                     "NCCL_ASYNC_ERROR_HANDLING": "0"})
    assert "torch uses 1" in found[0].evidence and len(found) == 1
    assert run("nccl-async-error-handling", env={})[1].status == "passed"


def test_socket_threads():
    found, _ = run("nccl-socket-threads", env={"NCCL_SOCKET_NTHREADS": "16", "NCCL_NSOCKS_PERTHREAD": "8"})
    assert "128 sockets" in found[0].evidence
    found, _ = run("nccl-socket-threads", env={"NCCL_SOCKET_NTHREADS": "32"})
    assert "maximum of 16" in found[0].evidence
    found, _ = run("nccl-socket-threads", env={"NCCL_NSOCKS_PERTHREAD": "four"})
    assert "not a positive number" in found[0].evidence
    four = {"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"}
    assert run("nccl-socket-threads", env=four)[1].status == "passed"


def test_manual_overrides():
    found, _ = run("nccl-manual-overrides", env={"NCCL_ALGO": "Ring,NVLSS", "NCCL_NTHREADS": "16",
                                                 "NCCL_BUFFSIZE": str(64 << 20)})
    sev = {f.subject or "list": f.severity.value for f in found}
    assert sev == {"list": "info", "NCCL_ALGO": "warning", "NCCL_NTHREADS": "warning", "NCCL_BUFFSIZE": "warning"}
    assert "NVLSS" in found[1].evidence and "64 MiB" in found[3].evidence
    found, _ = run("nccl-manual-overrides", env={"NCCL_ALGO": "allreduce:tree,ring;broadcast:^ring",
                                                 "NCCL_PROTO": "LL128"})
    assert [f.severity.value for f in found] == ["info"]
    assert run("nccl-manual-overrides", env={})[1].status == "passed"


def test_unknown_names_and_as_int():
    assert unknown_names("^Tree,PAT", ALGOS) == [] and unknown_names("ring;NVLSS", ALGOS) == ["NVLSS"]
    assert as_int(" 12abc") == 12 and as_int("x") is None


@given(st.text())
def test_unknown_names_total(text):
    assert all(isinstance(n, str) for n in unknown_names(text, ALGOS))


def test_version_mismatch():
    found, _ = run("nccl-version-mismatch", python__nccl="2.21.5")
    assert "loaded NCCL 2.21.5" in found[0].evidence and "2.28.9" in found[0].evidence
    found, _ = run("nccl-version-mismatch", env={"LD_PRELOAD": "/opt/nccl/lib/libnccl.so.2"})
    assert "LD_PRELOAD" in found[0].evidence
    assert run("nccl-version-mismatch", python__packages={})[1].status == "passed"
    assert run("nccl-version-mismatch", python__packages={"nvidia-nccl-cu13": "2.28.9.post1"})[1].status == "passed"
    assert run("nccl-version-mismatch", python__nccl=Unavailable("torch raised X"))[1].status == "not-checked"


def test_socket_ifname():
    found, _ = run("nccl-socket-ifname", env={"NCCL_SOCKET_IFNAME": "ens"})
    assert found[0].severity.value == "critical" and "matches no interface" in found[0].evidence
    assert "eth0" in found[0].evidence
    found, _ = run("nccl-socket-ifname", env={"NCCL_SOCKET_IFNAME": "=ib0"})
    assert found[0].severity.value == "critical" and "down" in found[0].evidence
    found, _ = run("nccl-socket-ifname", env={"NCCL_SOCKET_IFNAME": "lo,docker"})
    assert found[0].severity.value == "warning"
    for ok in ("eth", "=eth0", "^docker,lo"):
        assert run("nccl-socket-ifname", env={"NCCL_SOCKET_IFNAME": ok})[1].status == "passed"
    _, res = run("nccl-socket-ifname", env={"NCCL_SOCKET_IFNAME": "eth0"}, network__interfaces=Unavailable("sysfs"))
    assert res.status == "not-checked"


# -- math libraries ---------------------------------------------------------------------------------
def test_tf32_override_env():
    found, res = run("tf32-override-env", env={"NVIDIA_TF32_OVERRIDE": "0"})
    assert res.status == "found" and found[0].severity.value == "warning" and "GPU 0" in found[0].evidence
    assert run("tf32-override-env", env={"NVIDIA_TF32_OVERRIDE": "1"})[1].status == "passed"
    assert run("tf32-override-env", env={"NVIDIA_TF32_OVERRIDE": "0"}, gpu__count=1,
               gpu__list=[V100])[1].status == "not-applicable"
    found, _ = run("tf32-override-env", env={"NVIDIA_TF32_OVERRIDE": "0"}, gpu__list=Unavailable("x"))
    assert found  # capability unknown: still reported
    assert run("tf32-override-env", env=Unavailable("env.json missing"))[1].status == "not-checked"


def test_tf32_default_off():
    found, _ = run("tf32-default-off")
    assert found[0].severity.value == "info" and "'highest'" in found[0].evidence
    assert run("tf32-default-off", python__matmul_allow_tf32=True, python__float32_matmul_precision="high")[1].status \
        == "passed"
    assert run("tf32-default-off", env={"NVIDIA_TF32_OVERRIDE": "0"})[1].status == "not-applicable"
    assert run("tf32-default-off", python__matmul_allow_tf32=Unavailable("x"))[1].status == "not-checked"


def test_cpu_thread_env():
    found, _ = run("cpu-thread-env", env={"OMP_NUM_THREADS": "64"})
    assert "more threads than 16 logical CPUs" in found[0].evidence
    found, _ = run("cpu-thread-env", env={"OMP_NUM_THREADS": "4", "LOCAL_WORLD_SIZE": "8"})
    assert "32 threads" in found[0].evidence
    found, _ = run("cpu-thread-env", env={"MKL_NUM_THREADS": "8"}, cgroup__cpu_quota_cpus=4.0)
    assert "cgroup quota of 4 CPUs" in found[0].evidence
    found, _ = run("cpu-thread-env", env={"OPENBLAS_NUM_THREADS": "auto"})
    assert found[0].subject == "OPENBLAS_NUM_THREADS"
    assert run("cpu-thread-env", env={"OMP_NUM_THREADS": "8,2"})[1].status == "passed"
    assert run("cpu-thread-env", env={"OMP_NUM_THREADS": "8"}, cpu__logical_count=Unavailable("no cpuinfo"))[1].status \
        == "not-checked"
