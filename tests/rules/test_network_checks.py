from fakes import facts

from perfstack.host import Unavailable
from perfstack.rules import CHECKS, load, run_check

load()


def run(check_id, **values):
    return run_check(CHECKS[check_id], facts(**values))


def port(device, state="ACTIVE", rate=400.0, layer="InfiniBand"):
    return {"device": device, "port": "1", "state": state, "phys_state": "LinkUp" if state == "ACTIVE" else "Polling",
            "rate_gbps": rate, "link_layer": layer, "numa_node": 0}


def iface(name, speed=100_000, mtu=1500, virtual=False, device=True, operstate="up", link="ether"):
    return {"name": name, "operstate": operstate, "mtu": mtu, "speed_mbps": speed, "link_type": link,
            "is_virtual": virtual, "has_device": device, "driver": None, "pci_bus_id": None, "numa_node": None}


def test_rdma_port_down_everywhere_is_critical():
    found, _ = run("rdma-port-state", network__rdma_ports=[port("mlx5_0", state="DOWN")])
    assert found[0].severity.value == "critical"
    assert found[0].evidence == "mlx5_0/1 (InfiniBand): state DOWN, phys_state Polling"


def test_rdma_port_down_beside_active_ones_and_slow_port_warn():
    found, _ = run("rdma-port-state", network__rdma_ports=[port("mlx5_0"), port("mlx5_1", rate=200.0),
                                                           port("mlx5_2", state="DOWN")])
    assert [(h.subject, h.severity.value) for h in found] == [("mlx5_2/1", "warning"), ("mlx5_1/1", "warning")]
    assert "200 Gb/s while other ports run 400 Gb/s" in found[1].evidence


def test_rdma_port_healthy_and_absent():
    assert run("rdma-port-state", network__rdma_ports=[port("mlx5_0"), port("mlx5_1")])[1].status == "passed"
    assert run("rdma-port-state", network__rdma_ports=[])[1].status == "not-applicable"


def test_nvidia_peermem_missing():
    base = dict(network__rdma_ports=[port("mlx5_0")], gpu__count=8)
    found, _ = run("nvidia-peermem", kernel__modules=["mlx5_ib", "nvidia"], system__kernel_release="5.4.0-150-generic",
                   **base)
    assert found[0].severity.value == "critical" and "too old for DMA-BUF" in found[0].evidence
    assert found[0].fix_commands[0] == "modprobe nvidia-peermem"
    found, _ = run("nvidia-peermem", kernel__modules=["nvidia"], system__kernel_release="6.8.0-45-generic", **base)
    assert found[0].severity.value == "warning"
    assert run("nvidia-peermem", kernel__modules=["nvidia", "nvidia_peermem"], **base)[1].status == "passed"
    assert run("nvidia-peermem", network__rdma_ports=[])[1].status == "not-applicable"
    assert run("nvidia-peermem", kernel__modules=Unavailable("/proc/modules: absent"), **base)[1].status == "not-checked"


def test_mtu_jumbo():
    found, _ = run("mtu-jumbo", network__interfaces=[iface("ens1f0np0"), iface("eno1", speed=1000)])
    assert [h.evidence for h in found] == ["ens1f0np0: MTU 1500 at 100 Gb/s"]
    assert run("mtu-jumbo", network__interfaces=[iface("ens1f0np0", mtu=9000)])[1].status == "passed"
    # IPoIB is not Ethernet; a down NIC is not carrying anything.
    assert run("mtu-jumbo", network__interfaces=[iface("ib0", mtu=2044, link="infiniband"),
                                                 iface("ens2", operstate="down")])[1].status == "not-applicable"


def test_nic_speed_selected():
    slow = [iface("eno1", speed=10_000), iface("docker0", speed=10_000, virtual=True, device=False)]
    found, _ = run("nic-speed-selected", gpu__count=8, network__interfaces=slow, network__rdma_ports=[])
    assert found[0].severity.value == "info" and found[0].evidence.startswith("fastest NIC eno1 runs at 10 Gb/s")
    found, _ = run("nic-speed-selected", gpu__count=8, network__interfaces=slow, env={"WORLD_SIZE": "32"})
    assert found[0].severity.value == "warning"
    assert run("nic-speed-selected", gpu__count=8, network__interfaces=slow,
               network__rdma_ports=[port("mlx5_0")])[1].status == "passed"
    assert run("nic-speed-selected", gpu__count=8, network__interfaces=slow + [iface("ens1")])[1].status == "passed"
    assert run("nic-speed-selected", gpu__count=1)[1].status == "not-applicable"
    assert run("nic-speed-selected", gpu__count=8, network__interfaces=[iface("eth0", speed=None)])[1].status == "not-checked"


DEFAULT_TCP = dict(network__rmem_max=212992, network__wmem_max=212992, network__tcp_rmem=[4096, 131072, 6291456],
                   network__tcp_wmem=[4096, 16384, 4194304])


def test_tcp_stack_tuning_defaults_on_100g():
    found, _ = run("tcp-stack-tuning", network__interfaces=[iface("ens1f0np0")], **DEFAULT_TCP)
    assert found[0].severity.value == "warning"
    assert "net.core.rmem_max=212992" in found[0].evidence and "11.9 MiB" in found[0].evidence
    assert "sysctl -w net.core.rmem_max=33554432" in found[0].fix_commands
    assert "sysctl -w 'net.ipv4.tcp_rmem=4096 131072 33554432'" in found[0].fix_commands
    found, _ = run("tcp-stack-tuning", network__interfaces=[iface("ens1f0np0")], network__rdma_ports=[port("mlx5_0")],
                   **DEFAULT_TCP)
    assert found[0].severity.value == "info"


def test_tcp_stack_tuning_quiet_when_tuned_or_slow():
    tuned = dict(network__rmem_max=1 << 27, network__wmem_max=1 << 27, network__tcp_rmem=[4096, 87380, 1 << 27],
                 network__tcp_wmem=[4096, 65536, 1 << 27])
    assert run("tcp-stack-tuning", network__interfaces=[iface("ens1f0np0")], **tuned)[1].status == "passed"
    assert run("tcp-stack-tuning", network__interfaces=[iface("eno1", speed=1000)],
               **DEFAULT_TCP)[1].status == "not-applicable"
    _, res = run("tcp-stack-tuning", network__interfaces=[iface("ens1f0np0")],
                 network__rmem_max=Unavailable("permission denied"))
    assert res.status == "not-checked"


def test_ip_local_port_range():
    found, _ = run("ip-local-port-range", network__ip_local_port_range=[50000, 51000])
    assert found[0].evidence == "ip_local_port_range = 50000 51000 (1001 ports)"
    assert found[0].fix_commands[0] == "sysctl -w 'net.ipv4.ip_local_port_range=32768 60999'"
    assert run("ip-local-port-range", network__ip_local_port_range=[32768, 60999])[1].status == "passed"
    assert run("ip-local-port-range", network__ip_local_port_range=[1024, 65535])[1].status == "passed"
    assert run("ip-local-port-range")[1].status == "not-checked"
