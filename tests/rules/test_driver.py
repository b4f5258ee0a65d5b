import json
from pathlib import Path

import pytest
from fakes import FakeHost, facts

from perfstack.host import Unavailable
from perfstack.model import Facts
from perfstack.probes.collector import run_probes
from perfstack.probes.gpu import gpu as gpu_probe
from perfstack.rules import CHECKS, load, run_check

load()
RAW = Path(__file__).parents[1] / "fixtures" / "raw" / "h100"
SMI = ("nvidia-smi", "-q", "-x")


def recorded(xml: str = "smi.xml", nvml: bool = True) -> Facts:
    host = FakeHost(cmds={SMI: (RAW / xml).read_text()},
                    nvml_data=json.loads((RAW / "nvml.json").read_text()) if nvml else None)
    return run_probes(host, [gpu_probe])


HEALTHY = recorded()["gpu.list"].value[0]  # the project's H100, idle


def gpu(**changes):
    return dict(HEALTHY, **changes)


def gpus(*gs, **other):
    return facts(gpu__count=len(gs), gpu__list=list(gs), **other)


def run(check_id, f):
    found, res = run_check(CHECKS[check_id], f)
    return found, res


GPU_CHECKS = ["gpu-persistence-mode", "gpu-ecc-errors", "ecc-mode", "gpu-clock-throttle", "gpu-power-cap",
              "gpu-temperature", "clock-lock", "mig-enabled", "gpu-sharing", "fabric-manager"]


@pytest.mark.parametrize("check_id", GPU_CHECKS)
def test_gpu_checks_not_applicable_without_driver(check_id):
    _, res = run(check_id, facts(gpu__count=Unavailable("nvidia-smi: command not found; NVML could not start")))
    assert res.status == "not-applicable"
    assert res.reason == "no NVIDIA driver/GPU found: nvidia-smi: command not found; NVML could not start"
    _, res = run(check_id, facts(gpu__count=0, gpu__list=[]))
    assert (res.status, res.reason) == ("not-applicable", "no NVIDIA GPU")


@pytest.mark.parametrize("check_id", GPU_CHECKS)
def test_gpu_checks_not_checked_when_the_list_is_missing(check_id):
    _, res = run(check_id, facts(gpu__count=1, gpu__list=Unavailable("probe failed")))
    assert res.status == "not-checked" and "probe failed" in res.reason


@pytest.mark.parametrize("xml", ["smi.xml", "smi_load.xml"])
def test_the_recorded_h100_is_healthy(xml):
    f = recorded(xml, nvml=False)
    for check_id in GPU_CHECKS:
        found, res = run(check_id, f)
        assert check_id == "gpu-clock-throttle" or not found, (check_id, found)


def test_persistence_off_warns_with_the_daemon_fix():
    found, res = run("gpu-persistence-mode", gpus(gpu(persistence_mode=False)))
    assert found[0].evidence == "GPU 0 (NVIDIA H100 80GB HBM3): persistence mode Disabled"
    assert found[0].severity.value == "warning" and found[0].subject == "gpu0" and found[0].host_action
    assert "nvidia-persistenced" in found[0].fix_commands[0]
    assert run("gpu-persistence-mode", gpus(gpu()))[1].status == "passed"
    assert run("gpu-persistence-mode", gpus(gpu(persistence_mode=None)))[1].status == "not-checked"


def xid(code, count=1, bus="0000:00:06.0", message=""):
    return {"code": code, "bus_id": bus, "count": count, "message": message}


def test_fatal_xid_is_critical_with_count_and_meaning():
    f = gpus(gpu(), kernel_log__xid=[xid(79, 2), xid(13)], kernel_log__oldest_s=0.0)
    (hit,) = run("gpu-xid-errors", f)[0]
    assert hit.severity.value == "critical" and hit.subject == "gpu0"
    assert "3 Xid event(s)" in hit.evidence and "Xid 79 ×2: GPU fell off the PCIe bus" in hit.evidence
    assert "Xid 13 ×1" in hit.evidence


def test_application_xid_is_a_warning_and_unknown_codes_keep_their_text():
    f = gpus(gpu(), kernel_log__xid=[xid(31), xid(999, message="Something new")], kernel_log__oldest_s=3600.0)
    (hit,) = run("gpu-xid-errors", f)[0]
    assert hit.severity.value == "warning" and "Something new" in hit.evidence
    assert "kept from 3600 s after boot" in hit.evidence


def test_fallen_off_bus_without_xid_line_counts_as_79_for_a_lost_gpu():
    f = facts(gpu__count=Unavailable("NVML: GPU is lost"), kernel_log__xid=[],
              kernel_log__fallen_off_bus=["0000:3b:00.0"])
    (hit,) = run("gpu-xid-errors", f)[0]
    assert hit.severity.value == "critical" and hit.subject == "0000:3b:00.0" and "Xid 79" in hit.evidence


def test_xid_not_applicable_without_gpu_says_why():
    _, res = run("gpu-xid-errors", facts(kernel_log__xid=[], gpu__count=Unavailable("NVML could not start: x")))
    assert (res.status, res.reason) == ("not-applicable", "no NVIDIA driver/GPU found: NVML could not start: x")


def test_xid_quiet_when_clean_and_not_checked_without_root():
    assert run("gpu-xid-errors", gpus(gpu(), kernel_log__xid=[]))[1].status == "passed"
    _, res = run("gpu-xid-errors", gpus(gpu(), kernel_log__xid=Unavailable("dmesg: ... needs root")))
    assert res.status == "not-checked" and "needs root" in res.reason


def test_ecc_errors():
    (hit,) = run("gpu-ecc-errors", gpus(gpu(ecc_volatile_uncorrected=2)))[0]
    assert hit.severity.value == "critical" and "2 uncorrectable ECC errors since the driver loaded" in hit.evidence
    (hit,) = run("gpu-ecc-errors", gpus(gpu(remap_pending=True)))[0]
    assert hit.severity.value == "critical" and "pending a GPU reset" in hit.evidence
    (hit,) = run("gpu-ecc-errors", gpus(gpu(remap_failure=True)))[0]
    assert "FAILED" in hit.evidence
    (hit,) = run("gpu-ecc-errors", gpus(gpu(ecc_aggregate_uncorrected=1)))[0]
    assert hit.severity.value == "warning" and "lifetime" in hit.evidence
    (hit,) = run("gpu-ecc-errors", gpus(gpu(ecc_volatile_corrected=5000)))[0]
    assert hit.severity.value == "warning"
    assert run("gpu-ecc-errors", gpus(gpu(ecc_volatile_corrected=10)))[1].status == "passed"
    none = {k: None for k in ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "remap_failure",
                              "remap_pending", "retired_pending", "ecc_volatile_corrected")}
    assert run("gpu-ecc-errors", gpus(gpu(**none)))[1].status == "not-checked"


def test_ecc_mode():
    (hit,) = run("ecc-mode", gpus(gpu(ecc_current=False, ecc_pending=False)))[0]
    assert hit.severity.value == "warning" and hit.fix_commands == ["nvidia-smi -i 0 -e 1"]
    (hit,) = run("ecc-mode", gpus(gpu(ecc_current=True, ecc_pending=False)))[0]
    assert hit.severity.value == "info"
    assert run("ecc-mode", gpus(gpu()))[1].status == "passed"
    assert run("ecc-mode", gpus(gpu(ecc_current=None)))[1].status == "not-checked"


def test_clock_throttle_severities():
    hw = gpu(clocks_event_reasons=["hw_slowdown", "hw_thermal_slowdown"], utilization_gpu=99, sm_clock_mhz=900)
    (hit,) = run("gpu-clock-throttle", gpus(hw))[0]
    assert hit.severity.value == "critical" and "HW slowdown, HW thermal slowdown" in hit.evidence
    assert "SM clock 900 of 1980 MHz" in hit.evidence
    (hit,) = run("gpu-clock-throttle", gpus(gpu(clocks_event_reasons=["sw_thermal_slowdown"])))[0]
    assert hit.severity.value == "warning"
    capped = gpu(clocks_event_reasons=["sw_power_cap"], utilization_gpu=100, power_limit_w=500.0, power_max_w=700.0)
    (hit,) = run("gpu-clock-throttle", gpus(capped))[0]
    assert hit.severity.value == "warning" and hit.fix_commands == ["nvidia-smi -i 0 -pl 700"]
    assert run("gpu-clock-throttle", gpus(gpu(clocks_event_reasons=["sw_power_cap"], utilization_gpu=0)))[0] == []
    assert run("gpu-clock-throttle", gpus(gpu(clocks_event_reasons=["gpu_idle"])))[1].status == "passed"
    assert run("gpu-clock-throttle", gpus(gpu(clocks_event_reasons=None)))[1].status == "not-checked"


def test_clock_throttle_at_full_board_power_is_info_on_the_recorded_busy_h100():
    (hit,) = run("gpu-clock-throttle", recorded("smi_load.xml", nvml=False))[0]
    assert hit.severity.value == "info" and "SW power cap" in hit.evidence and "1425 of 1980" in hit.evidence


def test_power_cap():
    (hit,) = run("gpu-power-cap", gpus(gpu(power_limit_w=500.0)))[0]
    assert hit.evidence == "GPU 0 (NVIDIA H100 80GB HBM3): enforced power limit 500 W, default 700 W"
    assert hit.fix_commands == ["nvidia-smi -i 0 -pl 700"]
    assert run("gpu-power-cap", gpus(gpu()))[1].status == "passed"
    assert run("gpu-power-cap", gpus(gpu(power_limit_w=None)))[1].status == "not-checked"


def test_temperature_near_slowdown():
    (hit,) = run("gpu-temperature", gpus(gpu(temperature_c=86, temp_slowdown_c=89)))[0]
    assert "86 °C, slowdown at 89 °C" in hit.evidence
    assert run("gpu-temperature", gpus(gpu(temperature_c=80, temp_slowdown_c=89)))[1].status == "passed"
    assert len(run("gpu-temperature", gpus(gpu(temperature_c=85, temp_slowdown_c=None)))[0]) == 1
    assert run("gpu-temperature", gpus(gpu(temperature_c=None)))[1].status == "not-checked"


def test_clock_lock():
    (hit,) = run("clock-lock", gpus(gpu(app_clock_mhz=1410)))[0]
    assert "1410 MHz, default 1980 MHz" in hit.evidence and hit.fix_commands == ["nvidia-smi -i 0 -rac"]
    held = gpu(clocks_event_reasons=["applications_clocks_setting"], utilization_gpu=90, sm_clock_mhz=1200)
    assert len(run("clock-lock", gpus(held))[0]) == 1
    assert run("clock-lock", gpus(gpu()))[1].status == "passed"
    blank = gpu(app_clock_mhz=None, clocks_event_reasons=None)
    assert run("clock-lock", gpus(blank))[1].status == "not-checked"


def test_mig():
    (hit,) = run("mig-enabled", gpus(gpu(mig_current=True, mig_pending=True)))[0]
    assert hit.severity.value == "warning" and hit.evidence.endswith("MIG Enabled")
    (hit,) = run("mig-enabled", gpus(gpu(mig_current=False, mig_pending=True)))[0]
    assert hit.severity.value == "info" and "at the next GPU reset" in hit.evidence
    assert run("mig-enabled", gpus(gpu()))[1].status == "passed"
    assert run("mig-enabled", gpus(gpu(mig_current=None)))[1].status == "not-checked"


def test_gpu_sharing():
    (hit,) = run("gpu-sharing", gpus(gpu(compute_processes=3, mps=False)))[0]
    assert hit.severity.value == "warning" and "3 compute processes" in hit.evidence
    assert run("gpu-sharing", gpus(gpu(compute_processes=3, mps=True)))[1].status == "passed"
    (hit,) = run("gpu-sharing", gpus(gpu(compute_mode="Prohibited")))[0]
    assert hit.severity.value == "critical"
    assert run("gpu-sharing", gpus(gpu(compute_processes=1)))[1].status == "passed"


def test_fabric_manager():
    (hit,) = run("fabric-manager", gpus(gpu(fabric_state="In Progress", fabric_status="N/A")))[0]
    assert hit.severity.value == "critical" and "nvidia-fabricmanager" in hit.fix_commands[0]
    assert run("fabric-manager", gpus(gpu(fabric_state="Completed", fabric_status="Success")))[1].status == "passed"
    assert run("fabric-manager", gpus(gpu()))[1].status == "not-applicable"
    _, res = run("fabric-manager", gpus(gpu(), pcie__nvswitches=["0000:07:00.0"]))
    assert res.status == "not-checked"


MODULES = ["nvidia", "nvidia_uvm", "nvidia_modeset"]


def test_nvidia_modules():
    f = facts(kernel__modules=["ext4"], pcie__nvidia_gpus=["0000:00:06.0"],
              gpu__count=Unavailable("NVML could not start: Driver Not Loaded"))
    (hit,) = run("nvidia-modules", f)[0]
    assert hit.severity.value == "critical" and hit.fix_commands == ["modprobe nvidia"]
    f = facts(kernel__modules=["nvidia"], pcie__nvidia_gpus=["0000:00:06.0"], gpu__count=1)
    (hit,) = run("nvidia-modules", f)[0]
    assert hit.severity.value == "warning" and "nvidia_uvm" in hit.evidence
    f = facts(kernel__modules=MODULES, pcie__nvidia_gpus=["0000:00:06.0"], gpu__count=1)
    assert run("nvidia-modules", f)[1].status == "passed"
    assert run("nvidia-modules", facts(kernel__modules=[], pcie__nvidia_gpus=[], gpu__count=0))[1].status \
        == "not-applicable"
    _, res = run("nvidia-modules", facts(kernel__modules=Unavailable("absent"), pcie__nvidia_gpus=["x"], gpu__count=1))
    assert res.status == "not-checked"


def test_driver_library_mismatch_is_critical():
    f = facts(kernel__modules=MODULES, pcie__nvidia_gpus=["0000:00:06.0"],
              gpu__count=Unavailable("nvidia-smi -q -x: exit 18: Failed to initialize NVML: Driver/library "
                                     "version mismatch; NVML could not start: Driver/library version mismatch"))
    (hit,) = run("nvidia-modules", f)[0]
    assert hit.severity.value == "critical" and "versions differ" in hit.evidence and "reboot" in hit.fix


def test_gpu_enumeration():
    f = facts(pcie__nvidia_gpus=["0000:00:06.0", "0000:00:07.0"], gpu__count=1, gpu__list=[gpu()])
    (hit,) = run("gpu-enumeration", f)[0]
    assert hit.severity.value == "critical" and "not seen: 0000:00:07.0" in hit.evidence
    f = facts(pcie__nvidia_gpus=["0000:00:06.0", "0000:00:07.0"], gpu__count=1, gpu__list=[gpu()],
              container__in_container=True)
    assert run("gpu-enumeration", f)[0][0].severity.value == "info"
    f = facts(pcie__nvidia_gpus=["0000:00:06.0"], gpu__count=Unavailable("nvidia-smi -q -x: timed out after 45 s"))
    (hit,) = run("gpu-enumeration", f)[0]
    assert "the driver answered nothing: nvidia-smi -q -x: timed out" in hit.evidence
    lost = gpu(index=1, nvml_error="GPU is lost", pci_bus_id="0000:00:07.0")
    f = facts(pcie__nvidia_gpus=["0000:00:06.0", "0000:00:07.0"], gpu__count=2, gpu__list=[gpu(), lost])
    assert "NVML cannot open it: GPU is lost" in run("gpu-enumeration", f)[0][0].evidence
    assert run("gpu-enumeration", facts(pcie__nvidia_gpus=["0000:00:06.0"], gpu__count=1,
                                        gpu__list=[gpu()]))[1].status == "passed"
    assert run("gpu-enumeration", facts(pcie__nvidia_gpus=[], gpu__count=0))[1].status == "not-applicable"
    assert run("gpu-enumeration", facts(pcie__nvidia_gpus=Unavailable("no sysfs")))[1].status == "not-checked"


def test_host_oom_kills():
    kill = {"pid": 4321, "process": "python3", "cgroup": False}
    (hit,) = run("host-oom-kills", facts(kernel_log__oom_kills=[kill]))[0]
    assert hit.severity.value == "critical" and "python3 (pid 4321)" in hit.evidence
    other = {"pid": 1, "process": "postgres", "cgroup": True}
    assert run("host-oom-kills", facts(kernel_log__oom_kills=[other]))[0][0].severity.value == "warning"
    assert run("host-oom-kills", facts(kernel_log__oom_kills=[]))[1].status == "passed"
    assert run("host-oom-kills", facts(kernel_log__oom_kills=Unavailable("needs root")))[1].status == "not-checked"
