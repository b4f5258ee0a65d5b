import json

import pytest
from fakes import FakeHost

from perfstack.errors import UsageError
from perfstack.host import Unavailable
from perfstack.host.bundle import BundleHost
from perfstack.host.capture import RecordingHost, write
from perfstack.probes.collector import run_probes
from perfstack.probes.memory import memory
from perfstack.probes.system import system

UUID = "GPU-18d197ab-b950-16d9-b8cd-040fb3358d8b"


def live():
    return FakeHost(
        files={"/proc/sys/kernel/hostname": "dgx-prod-07\n", "/proc/sys/vm/swappiness": "60\n",
               "/proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 hostname=dgx-prod-07\n",
               "/sys/kernel/mm/transparent_hugepage/enabled": Unavailable("/sys/...: permission denied")},
        cmds={("nvidia-smi", "-q", "-x"): f"<nvidia_smi_log><gpu><serial>1752624021806</serial><uuid>{UUID}</uuid>"
                                          "</gpu></nvidia_smi_log>"},
        env={"HOSTNAME": "dgx-prod-07", "HF_TOKEN": "hf_abc", "AWS_SECRET_ACCESS_KEY": "x", "NCCL_DEBUG": "INFO",
             "WANDB_API_KEY": "k", "MY_PASSWORD": "p"},
        nvml_data={"driver_version": "580.1", "gpus": [{"index": 0, "uuid": UUID, "serial": "1752624021806"}]},
        pyinfo={"torch": "2.11.0"},
    )


def record(tmp_path):
    rec = RecordingHost(live())
    run_probes(rec, [system, memory])
    rec.run(["nvidia-smi", "-q", "-x"])
    rec.environ(), rec.nvml(), rec.python_info()
    stats = write(rec, tmp_path / "b", {"tool_version": "test"})
    return tmp_path / "b", stats


def test_bundle_replays_what_was_read(tmp_path):
    root, stats = record(tmp_path)
    assert stats["files"] == 4 and stats["unavailable"] >= 1
    facts = run_probes(BundleHost(root), [system, memory])
    assert facts["kernel.swappiness"].value == 60
    assert "permission denied" in facts["kernel.thp_enabled"].reason
    assert "(at capture)" in facts["kernel.thp_enabled"].reason


def test_redaction(tmp_path):
    root, _ = record(tmp_path)
    everything = "\n".join(p.read_text() for p in root.rglob("*") if p.is_file())
    for secret in ("dgx-prod-07", "1752624021806", UUID, "hf_abc"):
        assert secret not in everything
    env = json.loads((root / "env.json").read_text())
    assert env["HF_TOKEN"] == env["AWS_SECRET_ACCESS_KEY"] == env["WANDB_API_KEY"] == env["MY_PASSWORD"] == "REDACTED"
    assert env["NCCL_DEBUG"] == "INFO" and env["HOSTNAME"] == "redacted-host"
    xml = (root / "cmd/nvidia-smi-q-x.xml").read_text()
    nv = json.loads((root / "nvml.json").read_text())
    # The same GPU keeps the same stand-in UUID in every file.
    assert nv["gpus"][0]["uuid"] in xml and nv["gpus"][0]["serial"] == "REDACTED"
    assert json.loads((root / "meta.json").read_text())["host_id"]


def test_hostname_redaction_leaves_dotted_names_alone():
    from perfstack.host.capture import Redactor
    red = Redactor(RecordingHost(FakeHost(), files={"proc/sys/kernel/hostname": "vm\n"}))
    assert red.text("sysctl vm.swappiness on vm") == "sysctl vm.swappiness on redacted-host"


def test_refuses_to_overwrite(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep").write_text("x")
    with pytest.raises(UsageError, match="not an empty directory"):
        write(RecordingHost(FakeHost()), tmp_path / "b", {})


def test_empty_listing_survives_capture(tmp_path):
    rec = RecordingHost(FakeHost(dirs={"/sys/class/iommu": []}))
    assert rec.listdir("/sys/class/iommu") == []
    write(rec, tmp_path / "b", {})
    assert BundleHost(tmp_path / "b").listdir("/sys/class/iommu") == []
