from pathlib import Path

import pytest
from fakes import FakeHost
from hypothesis import given, settings
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.host import Unavailable
from perfstack.probes.collector import Malformed, run_probes
from perfstack.probes.kernel_log import KEYS, kernel_log, parse_dmesg

DMESG = (Path(__file__).parents[1] / "fixtures" / "raw" / "h100" / "dmesg.txt").read_text()
# Line formats as the driver and kernel print them (NVIDIA Xid catalog examples; kernel AER/OOM).
FAULTS = """\
[ 1936.510073] NVRM: GPU at PCI:0000:01:00: GPU-00000000-0000-0000-0000-000000000000
[ 1936.510087] NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
[ 1936.510157] NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.
[ 2001.000000] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
[ 2002.000000] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
[ 2003.000000] NVRM: Xid (PCI:0000:10:1c): 13, pid=2390, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1)
[ 2100.000000] pcieport 0000:00:01.1: AER: Corrected error received: 0000:01:00.0
[ 2100.000001] nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)
[ 2100.000002] nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00000001/0000e000
[ 2101.000000] nvidia 0000:01:00.0: PCIe Bus Error: severity=Uncorrectable (Non-Fatal), type=Transaction Layer, (Requester ID)
[ 2200.000000] Out of memory: Killed process 4321 (python3) total-vm:123456kB, anon-rss:1234kB, file-rss:0kB
[ 2201.000000] Memory cgroup out of memory: Killed process 4322 (pt_data_worker) total-vm:1kB, anon-rss:1kB
[ 2300.000000] NVRM: GPU 0000:02:00.0: RmInitAdapter failed! (0x22:0x56:667)
[ 2301.000000] NVRM: API mismatch: the client has the version 580.95.05, but this kernel module has the version 570.86.10.
"""


def test_recorded_h100_log_has_no_faults_and_starts_at_boot():
    log = parse_dmesg(DMESG)
    assert log["xid"] == [] and log["aer"] == [] and log["oom_kills"] == [] and log["fallen_off_bus"] == []
    assert log["oldest_s"] == 0.0


def test_faults_are_parsed_and_grouped():
    log = parse_dmesg(FAULTS)
    assert log["xid"] == [
        {"code": 79, "bus_id": "0000:01:00.0", "message": "GPU has fallen off the bus", "count": 1},
        {"code": 63, "bus_id": "0000:10:1c.0", "count": 2,
         "message": "Row Remapper: New row marked for remapping, reset gpu to activate"},
        {"code": 13, "bus_id": "0000:10:1c.0", "count": 1, "message": "Graphics SM Warp Exception on (GPC 0, TPC 1)"}]
    assert log["fallen_off_bus"] == ["0000:01:00.0"]
    assert [(e["severity"], e["count"]) for e in log["aer"]] == [("corrected", 1), ("uncorrected-nonfatal", 1)]
    assert log["oom_kills"] == [{"pid": 4321, "process": "python3", "cgroup": False},
                                {"pid": 4322, "process": "pt_data_worker", "cgroup": True}]
    kinds = {e["kind"]: e for e in log["nvrm_errors"]}
    assert kinds["init-failed"]["bus_id"] == "0000:02:00.0"
    assert "570.86.10" in kinds["api-mismatch"]["message"]
    assert log["oldest_s"] == 1936.510073


def test_syslog_and_human_timestamps_are_kernel_log_too():
    log = parse_dmesg("Nov 22 05:49:57 gpu1 kernel: NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error\n"
                      "[Sun Nov 22 05:49:57 2026] NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error\n")
    assert log["xid"][0]["code"] == 48 and log["xid"][0]["count"] == 2 and log["oldest_s"] is None


def test_not_a_kernel_log_is_malformed():
    with pytest.raises(Malformed, match="not kernel log output"):
        parse_dmesg("dmesg: read kernel buffer failed: Operation not permitted\n")


def test_probe_puts_every_key():
    f = run_probes(FakeHost(cmds={("dmesg",): FAULTS}), [kernel_log])
    assert {k for k in f} == set(KEYS)
    assert f["kernel_log.xid"].source == "dmesg" and len(f["kernel_log.xid"].value) == 3


def test_dmesg_without_root_is_not_checked_with_the_reason():
    denied = Unavailable("dmesg: exit 1: dmesg: read kernel buffer failed: Operation not permitted")
    f = run_probes(FakeHost(cmds={("dmesg",): denied}), [kernel_log])
    for key in KEYS:
        assert not f[key].available and "needs root" in f[key].reason and "not permitted" in f[key].reason


def test_garbage_live_is_unavailable_and_in_a_bundle_names_the_file():
    f = run_probes(FakeHost(cmds={("dmesg",): "<html>error page</html>"}), [kernel_log])
    assert "dmesg is not kernel log output" in f["kernel_log.xid"].reason
    with pytest.raises(InputError, match="bundle file cmd/dmesg.txt is not kernel log output"):
        run_probes(FakeHost(cmds={("dmesg",): "<html>error page</html>"}, kind="bundle"), [kernel_log])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FAULTS.splitlines() + DMESG.splitlines()[:20]) | st.text(max_size=80), max_size=30))
def test_parser_returns_lists_or_raises_malformed(lines):
    try:
        log = parse_dmesg("\n".join(lines))
    except Malformed:
        return
    assert all(isinstance(log[k], list) for k in ("xid", "aer", "oom_kills", "fallen_off_bus", "nvrm_errors"))


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_through_the_collector_a_bundle_only_raises_input_errors(text):
    try:
        f = run_probes(FakeHost(cmds={("dmesg",): text}, kind="bundle"), [kernel_log])
    except InputError:
        return
    assert "probe.kernel_log" not in f
