import json
import re
from pathlib import Path

import pytest
from fakes import FakeHost
from hypothesis import given, settings
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.host import Unavailable
from perfstack.probes.collector import Malformed, run_probes
from perfstack.probes.gpu import KEYS, gpu, norm_bus_id, parse_nvml, parse_smi_xml

RAW = Path(__file__).parents[1] / "fixtures" / "raw" / "h100"
SMI = ("nvidia-smi", "-q", "-x")
XML = (RAW / "smi.xml").read_text()
XML_LOAD = (RAW / "smi_load.xml").read_text()
NVML = json.loads((RAW / "nvml.json").read_text())
BUS = "/sys/bus/pci/devices/0000:00:06.0"
# Recorded on the same VM (tests/fixtures/raw/h100/pci_sysfs.txt).
SYSFS = {f"{BUS}/numa_node": "-1\n", f"{BUS}/current_link_speed": "32.0 GT/s PCIe\n",
         f"{BUS}/max_link_speed": "32.0 GT/s PCIe\n", f"{BUS}/current_link_width": "16\n",
         f"{BUS}/max_link_width": "16\n"}
NO_SMI = Unavailable("nvidia-smi: command not found")


def host(xml=XML, nvml=NVML, files=None, kind="live"):
    return FakeHost(cmds={SMI: xml}, nvml_data=nvml, files=dict(SYSFS if files is None else files), kind=kind)


def gpu0(f):
    return f["gpu.list"].value[0]


def test_h100_fixture_gives_the_shared_facts():
    f = run_probes(host(), [gpu])
    assert f["driver.version"].value == "580.159.04"
    assert f["driver.cuda_version"].value == "13.0"
    assert f["gpu.count"].value == 1
    assert f["gpu.summary"].value == "1× NVIDIA H100 80GB HBM3 · driver 580.159.04 · CUDA 13.0"
    g = gpu0(f)
    assert (g["index"], g["name"], g["pci_bus_id"]) == (0, "NVIDIA H100 80GB HBM3", "0000:00:06.0")
    assert g["compute_capability"] == "9.0" and g["memory_total_bytes"] == 81559 * 2**20
    assert g["numa_node"] is None  # sysfs says -1: unknown
    assert (g["sysfs_pcie_gen"], g["sysfs_pcie_width"]) == (5, 16)
    assert f["gpu.list"].source == "nvidia-smi -q -x; nvml"
    json.dumps(f["gpu.list"].value)  # JSON-able


def test_xml_alone_reads_health_fields_from_the_real_file():
    f = run_probes(host(xml=XML_LOAD, nvml=None), [gpu])
    g = gpu0(f)
    assert f["driver.cuda_version"].value == "13.0" and f["gpu.list"].source == "nvidia-smi -q -x"
    assert g["compute_capability"] is None
    assert g["persistence_mode"] is True and g["mig_current"] is False and g["ecc_current"] is True
    assert g["clocks_event_reasons"] == ["sw_power_cap"]
    assert (g["utilization_gpu"], g["sm_clock_mhz"], g["sm_clock_max_mhz"]) == (100, 1425, 1980)
    assert (g["power_limit_w"], g["power_default_w"], g["power_max_w"]) == (700.0, 700.0, 700.0)
    assert (g["pcie_gen"], g["pcie_gen_max"], g["pcie_gen_host_max"], g["pcie_width_max"]) == (5, 5, None, 16)
    assert g["ecc_volatile_uncorrected"] == 0 and g["remap_pending"] is False
    assert g["compute_processes"] == 1 and g["mps"] is False
    # R580 reports thresholds relative to T.Limit: 57 C + 30 headroom + 2 = NVML's 89 C slowdown.
    assert g["temp_slowdown_c"] == 89 == NVML["gpus"][0]["temp_slowdown_c"]


def test_nvml_alone_is_enough():
    f = run_probes(FakeHost(cmds={SMI: NO_SMI}, nvml_data=NVML, files=SYSFS), [gpu])
    g = gpu0(f)
    assert f["gpu.count"].value == 1 and f["gpu.list"].source == "nvml"
    assert g["clocks_event_reasons"] == ["gpu_idle"] and g["power_limit_w"] == 700.0
    assert g["fabric_state"] is None and g["mps"] is None  # XML-only fields exist, unknown


def test_nvml_wins_per_field_and_xml_fills_nvml_errors():
    nv = json.loads(json.dumps(NVML))
    nv["gpus"][0]["temperature_c"] = 61
    nv["gpus"][0]["persistence_mode"] = {"error": "Not Supported"}
    g = gpu0(run_probes(host(nvml=nv), [gpu]))
    assert g["temperature_c"] == 61
    assert g["persistence_mode"] is True  # from the XML


def test_nothing_to_ask_is_missing_with_both_reasons_not_zero():
    f = run_probes(FakeHost(cmds={SMI: NO_SMI}, nvml_data=None), [gpu])
    for key in KEYS:
        assert not f[key].available
        assert "nvidia-smi: command not found" in f[key].reason and "NVML" in f[key].reason


def test_driver_saying_no_devices_is_zero_gpus():
    none = Unavailable("nvidia-smi -q -x: exit 6: No devices were found")
    f = run_probes(FakeHost(cmds={SMI: none}, nvml_data=None), [gpu])
    assert f["gpu.count"].value == 0 and f["gpu.list"].value == []
    assert f["gpu.summary"].value == "no NVIDIA GPU"


def test_nvml_count_error_is_not_zero():
    f = run_probes(FakeHost(cmds={SMI: NO_SMI}, nvml_data={"driver_version": "580.1", "device_count": {
        "error": "Unknown Error"}, "gpus": []}), [gpu])
    assert not f["gpu.count"].available and "did not say" in f["gpu.count"].reason


def test_a_gpu_nvml_cannot_open_is_kept_with_its_error():
    nv = {"driver_version": "580.1", "cuda_driver_version": 13000, "device_count": 2,
          "gpus": [NVML["gpus"][0], {"index": 1, "error": "GPU is lost"}]}
    f = run_probes(host(nvml=nv), [gpu])
    assert f["gpu.count"].value == 2
    lost = f["gpu.list"].value[1]
    assert lost["index"] == 1 and lost["nvml_error"] == "GPU is lost" and lost["name"] is None


def test_older_driver_schema():
    xml = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>470.82.01</driver_version>
    <cuda_version>11.4</cuda_version><attached_gpus>1</attached_gpus><gpu id="00000000:3B:00.0">
    <product_name>Tesla V100-SXM2-32GB</product_name><persistence_mode>Disabled</persistence_mode>
    <pci><pci_bus_id>00000000:3B:00.0</pci_bus_id></pci>
    <clocks_throttle_reasons><clocks_throttle_reason_gpu_idle>Not Active</clocks_throttle_reason_gpu_idle>
    <clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown></clocks_throttle_reasons>
    <ecc_errors><volatile><single_bit><device_memory>3</device_memory><total>3</total></single_bit>
    <double_bit><device_memory>1</device_memory><total>1</total></double_bit></volatile></ecc_errors>
    <retired_pages><multiple_single_bit_retirement><retired_count>2</retired_count></multiple_single_bit_retirement>
    <double_bit_retirement><retired_count>1</retired_count></double_bit_retirement>
    <pending_retirement>Yes</pending_retirement></retired_pages>
    <temperature><gpu_temp>80 C</gpu_temp><gpu_temp_slow_threshold>84 C</gpu_temp_slow_threshold></temperature>
    <power_readings><power_draw>250.00 W</power_draw><enforced_power_limit>250.00 W</enforced_power_limit>
    <default_power_limit>300.00 W</default_power_limit></power_readings></gpu></nvidia_smi_log>"""
    g = parse_smi_xml(xml)["gpus"][0]
    assert g["pci_bus_id"] == "0000:3b:00.0" and g["persistence_mode"] is False
    assert g["clocks_event_reasons"] == ["hw_slowdown"]
    assert (g["ecc_volatile_corrected"], g["ecc_volatile_uncorrected"]) == (3, 1)
    assert g["retired_pages"] == 3 and g["retired_pending"] is True
    assert (g["temperature_c"], g["temp_slowdown_c"]) == (80, 84)
    assert (g["power_limit_w"], g["power_default_w"]) == (250.0, 300.0)


def test_truncated_xml_live_is_unavailable_with_the_line():
    f = run_probes(host(xml=XML[:3000], nvml=None), [gpu])
    assert not f["gpu.count"].available
    assert re.search(r"nvidia-smi -q -x is not valid XML \(line \d+\)", f["gpu.count"].reason)


def test_truncated_xml_live_falls_back_to_nvml():
    assert run_probes(host(xml=XML[:3000]), [gpu])["gpu.count"].value == 1


def test_truncated_xml_in_bundle_names_the_file():
    with pytest.raises(InputError, match=r"bundle file cmd/nvidia-smi-q-x.xml is not valid XML \(line \d+\)"):
        run_probes(host(xml=XML[:3000], kind="bundle"), [gpu])


def test_other_xml_is_rejected():
    with pytest.raises(Malformed, match="not nvidia-smi XML"):
        parse_smi_xml("<html><body/></html>")


def test_bad_nvml_json_in_bundle_names_the_file():
    with pytest.raises(InputError, match="bundle file nvml.json is not in the expected format"):
        run_probes(host(nvml={"gpus": "zero"}, kind="bundle"), [gpu])


def test_bad_sysfs_numa_in_bundle_is_an_input_error():
    files = dict(SYSFS, **{f"{BUS}/numa_node": "node zero"})
    with pytest.raises(InputError, match="devices/0000:00:06.0/numa_node"):
        run_probes(host(files=files, kind="bundle"), [gpu])


def test_numa_node_from_sysfs():
    g = gpu0(run_probes(host(files=dict(SYSFS, **{f"{BUS}/numa_node": "1\n"})), [gpu]))
    assert g["numa_node"] == 1


@pytest.mark.parametrize("raw,norm", [("00000000:19:00.0", "0000:19:00.0"), ("PCI:0000:10:1c", "0000:10:1c.0"),
                                      ("0000:3B:00.0", "0000:3b:00.0"), ("00010000:01:00.0", "10000:01:00.0"),
                                      ("nonsense", None), (None, None)])
def test_bus_id_normalisation(raw, norm):
    assert norm_bus_id(raw) == norm


def test_parse_nvml_cuda_version():
    assert parse_nvml({"cuda_driver_version": 12040, "gpus": []})["cuda_version"] == "12.4"


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_xml_parser_returns_a_dict_or_raises(text):
    try:
        out = parse_smi_xml(text)
    except Exception:
        return
    assert isinstance(out["gpus"], list)


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(), st.sampled_from([XML[:n] for n in range(0, len(XML), 997)])))
def test_through_the_collector_a_bundle_only_raises_input_errors(text):
    try:
        f = run_probes(host(xml=text, nvml=None, kind="bundle"), [gpu])
    except InputError:
        return
    assert "probe.gpu" not in f  # the probe did not crash


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
GPU_FIELDS = st.fixed_dictionaries({}, optional={k: JSON for k in NVML["gpus"][0]})


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={"driver_version": JSON, "cuda_driver_version": JSON,
                                           "device_count": JSON, "gpus": st.lists(GPU_FIELDS, max_size=3) | JSON}))
def test_any_nvml_answer_gives_facts_or_an_input_error(data):
    try:
        f = run_probes(host(nvml=data, kind="bundle"), [gpu])
    except InputError:
        return
    assert "probe.gpu" not in f
    json.dumps(f["gpu.list"].value)


def test_a_bundle_of_the_recorded_h100_reads_like_the_live_machine(tmp_path):
    from perfstack.host.bundle import BundleHost
    from perfstack.probes.kernel_log import kernel_log
    from perfstack.probes.pcie import pcie

    (tmp_path / "cmd").mkdir()
    (tmp_path / "cmd" / "nvidia-smi-q-x.xml").write_text(XML_LOAD)
    (tmp_path / "cmd" / "nvidia-smi-topo-m.txt").write_text((RAW / "topo.txt").read_text())
    (tmp_path / "cmd" / "dmesg.txt").write_text((RAW / "dmesg.txt").read_text())
    (tmp_path / "nvml.json").write_text(json.dumps(NVML))
    for path, text in dict(SYSFS, **{f"{BUS}/vendor": "0x10de\n", f"{BUS}/class": "0x030200\n"}).items():
        (tmp_path / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path.lstrip("/")).write_text(text)
    f = run_probes(BundleHost(tmp_path), [gpu, pcie, kernel_log])
    assert f["gpu.summary"].value == "1× NVIDIA H100 80GB HBM3 · driver 580.159.04 · CUDA 13.0"
    assert f["pcie.nvidia_gpus"].value == [gpu0(f)["pci_bus_id"]]
    assert f["pcie.topology"].value["cpu_affinity"] == {"GPU0": "0-15"}
    assert f["kernel_log.xid"].value == [] and "not in bundle" in f["pcie.lspci"].reason
