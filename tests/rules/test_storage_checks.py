from fakes import facts

from perfstack.host import Unavailable
from perfstack.rules import CHECKS, load, run_check

load()


def run(check_id, **values):
    return run_check(CHECKS[check_id], facts(**values))


def disk(name, kind="nvme", rotational=False, scheduler="none", read_ahead_kb=4096, wbt_lat_usec=0,
         mountpoints=("/data",)):
    return {"name": name, "kind": kind, "rotational": rotational, "scheduler": scheduler,
            "read_ahead_kb": read_ahead_kb, "wbt_lat_usec": wbt_lat_usec,
            "mountpoints": list(mountpoints) if mountpoints is not None else None}


def test_io_scheduler_bfq_on_nvme_warns_with_fix():
    found, res = run("io-scheduler", storage__block_devices=[disk("nvme0n1", scheduler="bfq")])
    assert res.status == "found" and found[0].severity.value == "warning"
    assert found[0].evidence == "nvme0n1: scheduler [bfq] (mounted at /data)" and found[0].subject == "nvme0n1"
    assert found[0].fix_commands[0] == "echo none > /sys/block/nvme0n1/queue/scheduler"
    assert 'ATTR{queue/scheduler}="none"' in found[0].fix_commands[1] and found[0].host_action


def test_io_scheduler_mq_deadline_is_info_and_sata_ssd_bfq_is_info():
    found, _ = run("io-scheduler", storage__block_devices=[disk("nvme0n1", scheduler="mq-deadline"),
                                                           disk("sda", kind="scsi", scheduler="bfq")])
    assert [(h.subject, h.severity.value) for h in found] == [("nvme0n1", "info"), ("sda", "info")]


def test_io_scheduler_quiet_for_none_and_for_spinning_disks():
    devices = [disk("nvme0n1"), disk("nvme1n1", scheduler="kyber"), disk("sdb", kind="scsi", rotational=True,
                                                                         scheduler="bfq")]
    assert run("io-scheduler", storage__block_devices=devices)[1].status == "passed"


def test_io_scheduler_not_checked_when_missing():
    _, res = run("io-scheduler", storage__block_devices=Unavailable("/sys/block not readable"))
    assert res.status == "not-checked" and "/sys/block" in res.reason


def test_read_ahead_on_data_disks_only():
    devices = [disk("nvme0n1", read_ahead_kb=128), disk("nvme1n1", read_ahead_kb=128, mountpoints=["/boot/efi"]),
               disk("nvme2n1", read_ahead_kb=128, mountpoints=None)]
    found, _ = run("read-ahead", storage__block_devices=devices)
    assert [h.subject for h in found] == ["nvme0n1", "nvme2n1"]  # /boot alone is not data; unknown use counts
    assert found[0].fix_commands == ["echo 4096 > /sys/block/nvme0n1/queue/read_ahead_kb"]
    assert run("read-ahead", storage__block_devices=[disk("nvme0n1")])[1].status == "passed"
    # Inside a container the host disk shows up only under the runtime's bind mounts: not data.
    binds = disk("nvme0n1", read_ahead_kb=128, mountpoints=["/etc/resolv.conf", "/usr/lib/libcuda.so.1"])
    assert run("read-ahead", storage__block_devices=[binds])[1].status == "passed"


def test_rotational_data_warns_without_flash_info_with_it_skips_virtio():
    hdd = disk("sda", kind="scsi", rotational=True)
    found, _ = run("rotational-data", storage__block_devices=[hdd])
    assert found[0].severity.value == "warning" and found[0].evidence == "sda is a rotational disk (mounted at /data)"
    found, _ = run("rotational-data", storage__block_devices=[hdd, disk("nvme0n1")])
    assert found[0].severity.value == "info"
    assert run("rotational-data", storage__block_devices=[disk("vda", kind="virtio", rotational=True)])[1].status == "passed"


def test_mount_noatime_only_for_strictatime():
    mounts = [{"mountpoint": "/data", "fstype": "xfs", "source": "/dev/nvme1n1", "options": ["rw", "attr2"], "dev": "1"},
              {"mountpoint": "/", "fstype": "ext4", "source": "/dev/nvme0n1p2", "options": ["rw", "relatime"], "dev": "2"},
              {"mountpoint": "/dev/shm", "fstype": "tmpfs", "source": "tmpfs", "options": ["rw"], "dev": "3"}]
    found, _ = run("mount-noatime", storage__mounts=mounts)
    assert [h.subject for h in found] == ["/data"]
    assert found[0].fix_commands == ["mount -o remount,noatime -- /data"]
    assert run("mount-noatime", storage__mounts=mounts[1:])[1].status == "passed"


def test_nfs_small_rsize_warns():
    nfs = {"mountpoint": "/mnt/data", "fstype": "nfs4", "source": "nas01:/export", "dev": "0:52",
           "options": ["rw", "relatime", "vers=4.2", "rsize=524288", "wsize=1048576"]}
    found, _ = run("nfs-mount-options", storage__mounts=[nfs])
    assert found[0].evidence == "/mnt/data from nas01:/export: rsize=524288"
    nfs["options"][3] = "rsize=1048576"
    assert run("nfs-mount-options", storage__mounts=[nfs])[1].status == "passed"


def test_wbt_latency_info_on_nvme():
    found, _ = run("wbt-latency", storage__block_devices=[disk("nvme0n1", wbt_lat_usec=2000),
                                                          disk("sda", kind="scsi", wbt_lat_usec=75000)])
    assert [h.subject for h in found] == ["nvme0n1"] and found[0].severity.value == "info"
    assert run("wbt-latency", storage__block_devices=[disk("nvme0n1")])[1].status == "passed"


def test_nvme_link_degraded():
    links = [{"controller": "nvme0", "current_gts": 8.0, "max_gts": 16.0, "current_width": 4, "max_width": 4},
             {"controller": "nvme1", "current_gts": 16.0, "max_gts": 16.0, "current_width": 4, "max_width": 4}]
    found, _ = run("nvme-link", storage__nvme_links=links)
    assert [h.evidence for h in found] == ["nvme0: link 8 GT/s x4 of 16 GT/s x4"]
    assert run("nvme-link", storage__nvme_links=links[1:])[1].status == "passed"
    assert run("nvme-link", storage__nvme_links=[])[1].status == "not-applicable"


def test_gds_available():
    base = dict(gpu__count=8, storage__block_devices=[disk("nvme0n1")])
    found, _ = run("gds-available", kernel__modules=["nvidia", "nvme"], **base)
    assert found[0].severity.value == "info" and "nvme0n1" in found[0].evidence
    assert run("gds-available", kernel__modules=["nvidia", "nvidia_fs"], **base)[1].status == "passed"
    assert run("gds-available", gpu__count=0)[1].status == "not-applicable"
    _, res = run("gds-available", gpu__count=Unavailable("nvidia-smi: command not found"))
    assert res.status == "not-applicable" and "nvidia-smi" in res.reason
