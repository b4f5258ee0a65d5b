import pytest
from fakes import FakeHost
from hypothesis import given
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, run_probes
from perfstack.probes.network import (
    network,
    parse_ib_rate,
    parse_ib_state,
    parse_ints,
    parse_speed,
    parse_uevent,
)

NET = "/sys/class/net"
IB = "/sys/class/infiniband"


def nic(files, name, *, type_="1", operstate="up", mtu="1500", speed="-1", uevent=None, numa=None):
    files.update({f"{NET}/{name}/type": type_ + "\n", f"{NET}/{name}/operstate": operstate + "\n",
                  f"{NET}/{name}/mtu": mtu + "\n"})
    # A down link answers EINVAL to a read of speed.
    files[f"{NET}/{name}/speed"] = speed + "\n" if operstate != "down" else Unavailable("Invalid argument")
    if uevent:
        files[f"{NET}/{name}/device/uevent"] = uevent
    if numa is not None:
        files[f"{NET}/{name}/device/numa_node"] = numa + "\n"


def gpu_node() -> FakeHost:
    files = {}
    nic(files, "lo", type_="772", operstate="unknown", mtu="65536")
    nic(files, "eno1", speed="1000", uevent="DRIVER=igb\nPCI_CLASS=20000\nPCI_SLOT_NAME=0000:02:00.0\n", numa="0")
    nic(files, "ens1f0np0", speed="100000", uevent="DRIVER=mlx5_core\nPCI_SLOT_NAME=0000:17:00.0\n", numa="1")
    nic(files, "ibp24s0", type_="32", mtu="2044", speed="400000", uevent="DRIVER=mlx5_core\nPCI_SLOT_NAME=0000:18:00.0\n",
        numa="-1")
    nic(files, "eno2", operstate="down", uevent="DRIVER=igb\nPCI_SLOT_NAME=0000:02:00.1\n", numa="0")
    nic(files, "docker0", operstate="down")
    nic(files, "veth1a2b3c", speed="10000")
    for dev, state, phys, rate in (("mlx5_0", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)"),
                                   ("mlx5_1", "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)")):
        p = f"{IB}/{dev}/ports/1"
        files.update({f"{p}/state": state + "\n", f"{p}/phys_state": phys + "\n", f"{p}/rate": rate + "\n",
                      f"{p}/link_layer": "InfiniBand\n", f"{IB}/{dev}/device/numa_node": "1\n"})
    files.update({"/proc/sys/net/core/rmem_max": "212992\n", "/proc/sys/net/core/wmem_max": "212992\n",
                  "/proc/sys/net/ipv4/tcp_rmem": "4096\t131072\t6291456\n",
                  "/proc/sys/net/ipv4/tcp_wmem": "4096\t16384\t4194304\n",
                  "/proc/sys/net/ipv4/ip_local_port_range": "32768\t60999\n",
                  "/proc/sys/net/ipv4/tcp_congestion_control": "cubic\n"})
    return FakeHost(files=files)


def test_interfaces_rdma_and_sysctls():
    f = run_probes(gpu_node(), [network])
    ifaces = {i["name"]: i for i in f["network.interfaces"].value}
    assert ifaces["ens1f0np0"] == {"name": "ens1f0np0", "operstate": "up", "mtu": 1500, "speed_mbps": 100000,
                                   "link_type": "ether", "is_virtual": False, "has_device": True,
                                   "driver": "mlx5_core", "pci_bus_id": "0000:17:00.0", "numa_node": 1}
    assert ifaces["lo"]["is_virtual"] and ifaces["lo"]["link_type"] == "loopback" and ifaces["lo"]["speed_mbps"] is None
    assert ifaces["docker0"]["is_virtual"] and ifaces["veth1a2b3c"]["is_virtual"]
    assert not ifaces["veth1a2b3c"]["has_device"]
    assert ifaces["eno2"]["speed_mbps"] is None and ifaces["eno2"]["operstate"] == "down"
    assert ifaces["ibp24s0"]["link_type"] == "infiniband" and ifaces["ibp24s0"]["numa_node"] is None
    ports = f["network.rdma_ports"].value
    assert ports[0] == {"device": "mlx5_0", "port": "1", "state": "ACTIVE", "phys_state": "LinkUp",
                        "rate_gbps": 400.0, "link_layer": "InfiniBand", "numa_node": 1}
    assert ports[1]["state"] == "DOWN" and ports[1]["phys_state"] == "Disabled"
    assert f["network.rmem_max"].value == 212992
    assert f["network.tcp_rmem"].value == [4096, 131072, 6291456]
    assert f["network.ip_local_port_range"].value == [32768, 60999]
    assert f["network.tcp_congestion_control"].value == "cubic"


def test_no_infiniband_is_an_empty_list_and_no_net_is_missing():
    f = run_probes(FakeHost(), [network])
    assert f["network.rdma_ports"].value == []
    assert not f["network.interfaces"].available
    assert "absent" in f["network.rmem_max"].reason


def test_garbage_live_is_not_available_with_reason():
    host = gpu_node()
    host.files["/proc/sys/net/ipv4/ip_local_port_range"] = "wide\n"
    f = run_probes(host, [network])
    assert "not in the expected format" in f["network.ip_local_port_range"].reason


def test_garbage_in_bundle_is_an_input_error_naming_the_file():
    host = gpu_node()
    host.kind = "bundle"
    host.files[f"{IB}/mlx5_0/ports/1/rate"] = "fast\n"
    with pytest.raises(InputError, match="bundle file sys/class/infiniband/mlx5_0/ports/1/rate is not a 'N Gb/sec'"):
        run_probes(host, [network])


def test_parsers():
    assert parse_speed("-1\n") is None and parse_speed("4294967295\n") is None and parse_speed("25000\n") == 25000
    assert parse_ib_state("4: ACTIVE\n") == "ACTIVE"
    assert parse_ib_rate("2.5 Gb/sec (1X SDR)\n") == 2.5
    assert parse_uevent("DRIVER=virtio_net\nMODALIAS=virtio:d00000001v00001AF4\n")["DRIVER"] == "virtio_net"
    with pytest.raises(ValueError):
        parse_ints("  \n")


@given(st.text())
def test_parsers_return_or_raise(text):
    for parse in (parse_speed, parse_ib_state, parse_ib_rate, parse_ints, parse_uevent):
        try:
            parse(text)
        except ValueError:
            pass


@given(st.text())
def test_bundle_probe_raises_only_input_errors(text):
    host = gpu_node()
    host.kind = "bundle"
    for path in (f"{NET}/eno1/speed", f"{NET}/eno1/device/uevent", f"{IB}/mlx5_0/ports/1/state",
                 "/proc/sys/net/ipv4/tcp_rmem"):
        host.files[path] = text
    try:
        network(Collector(host))
    except InputError:
        pass
