"""Hand-made bundles: where the preferred file is missing, the equivalent one is read instead, and
the fact names the file it came from."""

import json
import shutil
from pathlib import Path

import pytest
from fakes import FakeHost

from perfstack.cli.main import main
from perfstack.errors import InputError
from perfstack.host import Unavailable
from perfstack.probes import collector
from perfstack.probes.collector import Collector, run_probes
from perfstack.probes.container import container
from perfstack.probes.gpu import gpu, parse_driver_proc
from perfstack.probes.memory import memory
from perfstack.probes.mounts import parse_mounts, read_mounts
from perfstack.probes.storage import storage
from perfstack.probes.system import parse_kernel_release, system

BUNDLES = Path(__file__).parents[1] / "fixtures" / "bundles"

PROC_MOUNTS = """overlay / overlay rw,relatime,lowerdir=/var/lib/docker/l/A:/var/lib/docker/l/B 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0
/dev/nvme0n1p2 /data\\040set ext4 rw,relatime 0 0
"""


def test_proc_mounts_layout():
    mounts = parse_mounts(PROC_MOUNTS)
    assert [m["mountpoint"] for m in mounts] == ["/", "/proc", "/dev/shm", "/data set"]
    assert mounts[2]["options"][-1] == "size=65536k" and mounts[3]["source"] == "/dev/nvme0n1p2"
    for bad in ("", "just words\n", "a b\n", "src relative ext4 rw 0 0\n"):
        with pytest.raises(collector.Malformed):
            parse_mounts(bad)


def test_shm_size_and_root_from_proc_mounts_when_mountinfo_is_absent():
    f = run_probes(FakeHost(files={"/proc/mounts": PROC_MOUNTS}), [container])
    assert f["container.shm_size_bytes"].value == 64 << 20
    assert f["container.shm_size_bytes"].source == "/proc/mounts"
    assert f["container.root_fstype"].value == "overlay"


def test_mountinfo_still_preferred_when_both_exist():
    info = "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=1048576k\n"
    f = run_probes(FakeHost(files={"/proc/self/mountinfo": info, "/proc/mounts": PROC_MOUNTS}), [container])
    assert f["container.shm_size_bytes"].value == 1 << 30 and f["container.shm_size_bytes"].source.endswith("mountinfo")


def test_storage_maps_proc_mounts_to_disks_through_sysfs():
    host = FakeHost(files={"/proc/mounts": PROC_MOUNTS, "/sys/class/block/nvme0n1p2/dev": "259:2\n",
                           "/sys/block/nvme0n1/dev": "259:0\n", "/sys/block/nvme0n1/nvme0n1p2/dev": "259:2\n",
                           "/sys/block/nvme0n1/queue/rotational": "0\n"})
    f = run_probes(host, [storage])
    assert f["storage.mounts"].source == "/proc/mounts"
    disk = next(d for d in f["storage.block_devices"].value if d["name"] == "nvme0n1")
    assert disk["mountpoints"] == ["/data set"]


def test_no_mount_table_at_all_names_every_file_tried():
    f = run_probes(FakeHost(), [container])
    reason = f["container.shm_size_bytes"].reason
    assert all(p in reason for p in ("/proc/self/mountinfo", "/proc/mounts", "/etc/mtab"))
    with pytest.raises(Unavailable):
        read_mounts(Collector(FakeHost()))


def test_a_garbled_fallback_in_a_bundle_is_still_bad_input():
    with pytest.raises(InputError, match="proc/mounts"):
        run_probes(FakeHost(files={"/proc/mounts": "garbage\n"}, kind="bundle"), [container])


def test_system_fallbacks():
    host = FakeHost(files={"/etc/hostname": "node7\n", "/usr/lib/os-release": 'ID=ubuntu\nVERSION_ID="24.04"\n',
                           "/proc/version": "Linux version 6.8.0-45-generic (buildd@lcy02) (gcc 13.2) #45-Ubuntu SMP\n"})
    f = run_probes(host, [system])
    assert f["system.kernel_release"].value == "6.8.0-45-generic" and f["system.kernel_release"].source == "/proc/version"
    assert f["system.os_release"].value == {"ID": "ubuntu", "VERSION_ID": "24.04"}
    assert f["system.os_release"].source == "/usr/lib/os-release"
    assert f["system.host_id"].source == "/etc/hostname"
    assert parse_kernel_release("6.8.0\n") == "6.8.0"
    with pytest.raises(collector.Malformed):
        parse_kernel_release("two words")


def test_thp_from_the_redhat_directory():
    host = FakeHost(files={"/sys/kernel/mm/redhat_transparent_hugepage/enabled": "[always] madvise never\n"})
    f = run_probes(host, [memory])
    assert f["kernel.thp_enabled"].value == "always"
    assert f["kernel.thp_enabled"].source.startswith("/sys/kernel/mm/redhat_")


@pytest.mark.parametrize("text,version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:37:01 UTC 2025\n", "580.95.05"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  (dvs-builder@U16)\n",
     "570.133.20"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.54\nGCC version:  gcc version 12\n", "535.54")])
def test_driver_version_from_the_kernel_module(text, version):
    assert parse_driver_proc(text) == version
    f = run_probes(FakeHost(files={"/proc/driver/nvidia/version": text}), [gpu])
    assert f["driver.version"].value == version and f["driver.version"].source == "/proc/driver/nvidia/version"
    assert not f["gpu.count"].available


def test_driver_version_absent_everywhere_says_why():
    f = run_probes(FakeHost(), [gpu])
    assert not f["driver.version"].available and "/proc/driver/nvidia/version" in f["driver.version"].reason


def test_doctor_on_a_hand_made_bundle_with_proc_mounts_finds_a_small_shm(tmp_path, capsys):
    b = tmp_path / "b"
    shutil.copytree(BUNDLES / "cpu-only-container", b)
    (b / "proc" / "self" / "mountinfo").unlink()
    (b / "proc" / "mounts").write_text(PROC_MOUNTS)
    main(["doctor", "--bundle", str(b), "--json", "--fail-on", "never"])
    run = json.loads(capsys.readouterr().out)
    shm = [x for x in run["findings"] if x["id"] == "shm-size"]
    assert shm and shm[0]["severity"] == "critical"
