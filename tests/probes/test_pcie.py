from pathlib import Path

import pytest
from fakes import FakeHost
from hypothesis import given, settings
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.host import Unavailable
from perfstack.probes.collector import Malformed, run_probes
from perfstack.probes.pcie import parse_lspci, parse_topo, pcie

TOPO_1 = (Path(__file__).parents[1] / "fixtures" / "raw" / "h100" / "topo.txt").read_text()
LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NV#  = Connection traversing a bonded set of # NVLinks
"""
# HGX-style: four NVLink-connected GPUs and two NICs, as nvidia-smi prints it (tab-separated).
TOPO_NV = ("\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
           "GPU0\t X \tNV18\tNV18\tNV18\tPXB\tSYS\t0-47,96-143\t0\t\tN/A\n"
           "GPU1\tNV18\t X \tNV18\tNV18\tPXB\tSYS\t0-47,96-143\t0\t\tN/A\n"
           "GPU2\tNV18\tNV18\t X \tNV18\tSYS\tPXB\t48-95,144-191\t1\t\tN/A\n"
           "GPU3\tNV18\tNV18\tNV18\t X \tSYS\tPXB\t48-95,144-191\t1\t\tN/A\n"
           "NIC0\tPXB\tPXB\tSYS\tSYS\t X \tSYS\t\t\t\t\n"
           "NIC1\tSYS\tSYS\tPXB\tPXB\tSYS\t X \t\t\t\t\n" + LEGEND +
           "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n")
LSPCI_ROOT = """\
00:05.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]
\tSubsystem: Mellanox Technologies Device 0026
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\t\tDevCap:\tMaxPayload 512 bytes, PhantFunc 0, Latency L0s unlimited, L1 unlimited
\t\t\tExtTag+ AttnBtn- AttnInd- PwrInd- RBE+ FLReset+ SlotPowerLimit 0W
\t\tDevCtl:\tCorrErr- NonFatalErr- FatalErr- UnsupReq-
\t\t\tRlxdOrd+ ExtTag+ PhantFunc- AuxPwr- NoSnoop+ FLReset-
\t\t\tMaxPayload 256 bytes, MaxReadReq 4096 bytes
\t\tDevSta:\tCorrErr- NonFatalErr- FatalErr- UnsupReq- AuxPwr- TransPend-
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+
\t\tLnkSta:\tSpeed 32GT/s, Width x16

00:06.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tSubsystem: NVIDIA Corporation Device 16c1
\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B- DisINTx+
\tCapabilities: [78] Express (v2) Endpoint, MSI 00
\t\tDevCap:\tMaxPayload 256 bytes, PhantFunc 0, Latency L0s unlimited, L1 <64us
\t\t\tExtTag+ AttnBtn- AttnInd- PwrInd- RBE+ FLReset+ SlotPowerLimit 0W
\t\tDevCtl:\tCorrErr- NonFatalErr- FatalErr- UnsupReq-
\t\t\tRlxdOrd+ ExtTag+ PhantFunc- AuxPwr- NoSnoop+ FLReset-
\t\t\tMaxPayload 128 bytes, MaxReadReq 512 bytes
\t\tDevSta:\tCorrErr- NonFatalErr- FatalErr- UnsupReq- AuxPwr- TransPend-
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM L1, Exit Latency L1 <4us
\t\tLnkCtl:\tASPM L1 Enabled; RCB 64 bytes, Disabled- CommClk-
\t\tLnkSta:\tSpeed 32GT/s, Width x16
\tKernel driver in use: nvidia

00:07.0 SATA controller: Intel Corporation Device 1234
\tCapabilities: <access denied>
"""
LSPCI_USER = """\
0000:00:06.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tSubsystem: NVIDIA Corporation Device 16c1
\tCapabilities: <access denied>
\tKernel driver in use: nvidia
"""
PCI = "/sys/bus/pci/devices"
SYSFS = {f"{PCI}/0000:00:01.0/vendor": "0x1af4\n", f"{PCI}/0000:00:01.0/class": "0x018000\n",
         f"{PCI}/0000:00:06.0/vendor": "0x10de\n", f"{PCI}/0000:00:06.0/class": "0x030200\n",
         f"{PCI}/0000:07:00.0/vendor": "0x10de\n", f"{PCI}/0000:07:00.0/class": "0x068000\n",
         f"{PCI}/0000:08:00.1/vendor": "0x10de\n", f"{PCI}/0000:08:00.1/class": "0x040300\n",
         "/sys/module/pcie_aspm/parameters/policy": "[default] performance powersave powersupersave\n"}


def test_recorded_single_gpu_matrix_with_colour_codes():
    t = parse_topo(TOPO_1)
    assert t["devices"] == ["GPU0"] and t["links"] == {"GPU0": {}}
    assert t["cpu_affinity"] == {"GPU0": "0-15"} and t["numa_affinity"] == {"GPU0": "0"}


def test_nvlink_matrix_with_nics():
    t = parse_topo(TOPO_NV)
    assert t["devices"] == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"]
    assert t["links"]["GPU0"]["GPU3"] == "NV18" and t["links"]["GPU2"]["NIC0"] == "SYS"
    assert t["numa_affinity"]["GPU2"] == "1" and t["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}


def test_topo_malformed():
    with pytest.raises(Malformed, match="no GPU0 column"):
        parse_topo("Failed to initialize NVML\n")
    with pytest.raises(Malformed, match="bad row"):
        parse_topo("\tGPU0\tGPU1\nGPU0\t X \tfoo\n")


def test_lspci_reads_payload_and_aspm_for_gpus_and_nics_only():
    devs = parse_lspci(LSPCI_ROOT)
    assert [d["bus_id"] for d in devs] == ["0000:00:05.0", "0000:00:06.0"]
    nic, gpu = devs
    assert (gpu["max_payload_cap"], gpu["max_payload"], gpu["max_read_request"]) == (256, 128, 512)
    assert gpu["aspm"] == "L1 Enabled" and nic["aspm"] == "Disabled" and not gpu["access_denied"]
    assert nic["kind"] == "Ethernet controller"


def test_lspci_without_root_marks_access_denied():
    (gpu,) = parse_lspci(LSPCI_USER)
    assert gpu["access_denied"] and gpu["max_payload"] is None and gpu["aspm"] is None


def test_lspci_malformed():
    with pytest.raises(Malformed, match="not lspci -vvv output"):
        parse_lspci("lspci: Unable to load libkmod resources\nsomething else")


def test_probe_enumerates_nvidia_gpus_and_switches():
    host = FakeHost(files=SYSFS, cmds={("nvidia-smi", "topo", "-m"): TOPO_NV, ("lspci", "-vvv"): LSPCI_ROOT})
    f = run_probes(host, [pcie])
    assert f["pcie.nvidia_gpus"].value == ["0000:00:06.0"]  # the audio function 0x0403 is not a GPU
    assert f["pcie.nvswitches"].value == ["0000:07:00.0"]
    assert f["pcie.topology"].value["links"]["GPU1"]["GPU0"] == "NV18"
    assert len(f["pcie.lspci"].value) == 2 and f["pcie.aspm_policy"].value == "default"


def test_probe_missing_tools_are_reasons():
    host = FakeHost(cmds={("nvidia-smi", "topo", "-m"): Unavailable("nvidia-smi: command not found"),
                          ("lspci", "-vvv"): Unavailable("lspci: command not found")})
    f = run_probes(host, [pcie])
    assert f["pcie.topology"].reason == "nvidia-smi: command not found"
    assert f["pcie.lspci"].reason == "lspci: command not found"
    assert not f["pcie.nvidia_gpus"].available


def test_bad_topo_live_is_unavailable_and_in_a_bundle_names_the_file():
    cmds = {("nvidia-smi", "topo", "-m"): "garbage\n", ("lspci", "-vvv"): LSPCI_USER}
    f = run_probes(FakeHost(files=SYSFS, cmds=cmds), [pcie])
    assert "nvidia-smi topo -m is not nvidia-smi topo -m output" in f["pcie.topology"].reason
    with pytest.raises(InputError, match="bundle file cmd/nvidia-smi-topo-m.txt is not nvidia-smi topo"):
        run_probes(FakeHost(files=SYSFS, cmds=cmds, kind="bundle"), [pcie])


def test_bad_class_in_a_bundle_names_the_file():
    files = dict(SYSFS, **{f"{PCI}/0000:00:06.0/class": "three-d\n"})
    with pytest.raises(InputError, match="devices/0000:00:06.0/class"):
        run_probes(FakeHost(files=files, kind="bundle"), [pcie])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(TOPO_NV.splitlines()) | st.text(max_size=40), max_size=12))
def test_topo_parser_returns_a_matrix_or_raises_malformed(lines):
    try:
        t = parse_topo("\n".join(lines))
    except Malformed:
        return
    assert set(t["links"]) <= set(t["devices"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(LSPCI_ROOT.splitlines()) | st.text(max_size=40), max_size=30))
def test_lspci_parser_returns_devices_or_raises_malformed(lines):
    try:
        devs = parse_lspci("\n".join(lines))
    except Malformed:
        return
    assert all(isinstance(d["bus_id"], (str, type(None))) for d in devs)


@settings(max_examples=100, deadline=None)
@given(st.text(), st.text())
def test_through_the_collector_a_bundle_only_raises_input_errors(topo, lspci):
    host = FakeHost(cmds={("nvidia-smi", "topo", "-m"): topo, ("lspci", "-vvv"): lspci}, kind="bundle")
    try:
        f = run_probes(host, [pcie])
    except InputError:
        return
    assert "probe.pcie" not in f
