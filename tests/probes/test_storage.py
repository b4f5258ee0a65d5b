import pytest
from fakes import FakeHost
from hypothesis import given
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.probes.collector import Collector, run_probes
from perfstack.probes.mounts import parse_mountinfo
from perfstack.probes.storage import (
    parse_link_speed,
    parse_scheduler,
    storage,
)

# A GPU server: root on NVMe, a dataset disk, /home on LVM over a SATA disk, an NFS share.
MOUNTINFO = """\
22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
24 28 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=263856148k,nr_inodes=65964037,mode=755,inode64
28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
29 24 0:25 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw,size=263921472k,inode64
31 28 259:1 / /boot/efi rw,relatime shared:30 - vfat /dev/nvme0n1p1 rw,fmask=0077,dmask=0077
33 28 259:3 / /data rw,noatime shared:31 - xfs /dev/nvme1n1 rw,attr2,inode64,logbufs=8,logbsize=32k,noquota
35 28 253:0 / /home rw shared:32 - ext4 /dev/mapper/vg0-home rw
41 28 9:0 / /raid rw,relatime shared:41 - xfs /dev/md0 rw,attr2,inode64,sunit=1024,swidth=2048
40 28 0:52 / /mnt/shared\\040data rw,relatime shared:40 - nfs4 nas01:/export/data rw,vers=4.2,rsize=524288,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600
"""


def server() -> FakeHost:
    files = {"/proc/self/mountinfo": MOUNTINFO}
    for name, dev, parts, rota, sched, ra, wbt in (
            ("nvme0n1", "259:0", {"nvme0n1p1": "259:1", "nvme0n1p2": "259:2"}, "0", "[none] mq-deadline kyber bfq", "128", "2000"),
            ("nvme1n1", "259:3", {}, "0", "none [mq-deadline] kyber bfq", "4096", "0"),
            ("sda", "8:0", {"sda1": "8:1", "sda2": "8:2"}, "1", "mq-deadline kyber [bfq] none", "128", "75000"),
            ("dm-0", "253:0", {}, "1", "none", "128", None),
            ("loop0", "7:0", {}, "0", "[none] mq-deadline", "128", "2000"),
            ("md0", "9:0", {}, "0", "none", "8192", None),
            ("nvme2n1", "259:4", {}, "0", "[none] mq-deadline", "128", "2000")):
        files[f"/sys/block/{name}/dev"] = dev + "\n"
        for part, number in parts.items():
            files[f"/sys/block/{name}/{part}/dev"] = number + "\n"
        q = f"/sys/block/{name}/queue"
        files.update({f"{q}/rotational": rota + "\n", f"{q}/scheduler": sched + "\n", f"{q}/read_ahead_kb": ra + "\n"})
        if wbt is not None:
            files[f"{q}/wbt_lat_usec"] = wbt + "\n"
    d = "/sys/class/nvme/nvme0/device"
    files.update({f"{d}/current_link_speed": "8.0 GT/s PCIe\n", f"{d}/max_link_speed": "16.0 GT/s PCIe\n",
                  f"{d}/current_link_width": "4\n", f"{d}/max_link_width": "4\n"})
    return FakeHost(files=files, dirs={"/sys/block/dm-0/slaves": ["sda2"], "/sys/block/md0/slaves": ["nvme2n1"], "/sys/class/nvme": ["nvme0", "nvme1"]})


def test_mounts_devices_and_links():
    f = run_probes(server(), [storage])
    mounts = {m["mountpoint"]: m for m in f["storage.mounts"].value}
    assert "/proc" not in mounts and "/dev" not in mounts  # kernel pseudo filesystems dropped
    assert mounts["/data"]["options"][:2] == ["rw", "noatime"] and "logbsize=32k" in mounts["/data"]["options"]
    assert mounts["/mnt/shared data"]["source"] == "nas01:/export/data"
    assert "rsize=524288" in mounts["/mnt/shared data"]["options"]
    devices = {d["name"]: d for d in f["storage.block_devices"].value}
    assert set(devices) == {"nvme0n1", "nvme1n1", "nvme2n1", "sda", "md0"}  # loop and dm devices skipped
    assert devices["md0"]["kind"] == "md" and devices["nvme2n1"]["mountpoints"] == ["/raid"]  # RAID member
    assert devices["nvme0n1"] == {"name": "nvme0n1", "kind": "nvme", "rotational": False, "scheduler": "none",
                                  "read_ahead_kb": 128, "wbt_lat_usec": 2000, "mountpoints": ["/", "/boot/efi"]}
    assert devices["nvme1n1"]["scheduler"] == "mq-deadline" and devices["nvme1n1"]["mountpoints"] == ["/data"]
    assert devices["sda"]["mountpoints"] == ["/home"]  # through LVM: dm-0's slave is sda2
    assert devices["sda"]["kind"] == "scsi" and devices["sda"]["rotational"] is True
    # nvme1 has no PCIe link attributes (NVMe over fabrics): left out.
    assert f["storage.nvme_links"].value == [{"controller": "nvme0", "current_gts": 8.0, "max_gts": 16.0,
                                              "current_width": 4, "max_width": 4}]


def test_without_mount_table_mountpoints_are_unknown():
    host = server()
    del host.files["/proc/self/mountinfo"]
    f = run_probes(host, [storage])
    assert not f["storage.mounts"].available and "absent" in f["storage.mounts"].reason
    assert all(d["mountpoints"] is None for d in f["storage.block_devices"].value)


def test_garbage_mountinfo_live_is_not_available_with_reason():
    host = server()
    host.files["/proc/self/mountinfo"] = "rootfs / rootfs rw 0 0\n"  # /proc/mounts format, not mountinfo
    f = run_probes(host, [storage])
    assert "is not a mountinfo table (line 1" in f["storage.mounts"].reason
    assert f["storage.block_devices"].available


def test_garbage_in_bundle_is_an_input_error_naming_the_file():
    host = server()
    host.kind = "bundle"
    host.files["/sys/block/nvme0n1/queue/scheduler"] = "none mq-deadline\n"
    with pytest.raises(InputError, match="bundle file sys/block/nvme0n1/queue/scheduler is missing the"):
        run_probes(host, [storage])


def test_parsers():
    assert parse_scheduler("[none] mq-deadline kyber bfq\n") == "none" and parse_scheduler("none\n") == "none"
    assert parse_link_speed("2.5 GT/s PCIe\n") == 2.5 and parse_link_speed("Unknown\n") is None
    with pytest.raises(ValueError):
        parse_link_speed("fast")


@given(st.text())
def test_parsers_return_or_raise(text):
    for parse in (parse_mountinfo, parse_scheduler, parse_link_speed):
        try:
            parse(text)
        except ValueError:
            pass


@given(st.text())
def test_bundle_probe_raises_only_input_errors(text):
    host = server()
    host.kind = "bundle"
    for path in ("/proc/self/mountinfo", "/sys/block/sda/queue/scheduler", "/sys/class/nvme/nvme0/device/max_link_speed"):
        host.files[path] = text
    try:
        storage(Collector(host))
    except InputError:
        pass
