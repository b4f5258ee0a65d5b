"""Storage: how fast data and checkpoints can move between disks and the GPUs' host buffers."""

from __future__ import annotations

from typing import Any

from perfstack.model import Facts, NotApplicable
from perfstack.rules.common import SYSTEM_MOUNT, gpu_count
from perfstack.rules.registry import Hit, Hits, SeverityName, check
from perfstack.rules.shell import Abs, Under, sh, write
from perfstack.sources import BOOK, KERNEL_ARTICLE

LAYER = "storage"
ATIME_FS = ("ext4", "ext3", "xfs", "btrfs", "f2fs", "nfs", "nfs4")
NFS_MIN_IO = 1 << 20
KEEP_MOUNT_OPTIONS = ("rsize", "wsize")  # read by nfs-mount-options: a capture keeps their values
UDEV_RULE = "/etc/udev/rules.d/60-perfstack-storage.rules"


def _data_mounts(d: dict[str, Any]) -> list[str]:
    return [m for m in d.get("mountpoints") or [] if not SYSTEM_MOUNT.match(m)]


def _data_devices(f: Facts) -> list[dict[str, Any]]:
    """Disks that hold a data filesystem (not /boot, not a container runtime's bind mounts of
    /etc or driver libraries); every disk when the mount table is unknown."""
    return [d for d in f.need("storage.block_devices") if d.get("mountpoints") is None or _data_mounts(d)]


def _where(d: dict[str, Any]) -> str:
    mounts = _data_mounts(d)
    return f" (mounted at {', '.join(mounts)})" if mounts else ""


@check("io-scheduler", LAYER, "warning", "I/O scheduler adds overhead on a flash device",
       doc="Reads the bracketed entry of /sys/block/<dev>/queue/scheduler for NVMe and other non-rotational "
           "disks (loop, ram, zram and device-mapper devices are skipped). NVMe: bfq or cfq is a warning, "
           "mq-deadline is info (acceptable; none is cheaper); kyber and none pass. bfq/cfq on a SATA/SAS SSD "
           "is info.",
       why="bfq and the legacy cfq spend CPU per request ordering I/O for spinning disks; NVMe drives with "
           "deep hardware queues reach full throughput and the steadiest latency with none (or mq-deadline).",
       fix="echo none > /sys/block/<dev>/queue/scheduler; persist with a udev rule: "
           "ACTION==\"add|change\", KERNEL==\"nvme[0-9]*n[0-9]*\", ATTR{queue/scheduler}=\"none\"",
       refs=f"Book ch. 5 (storage tuning) and appendix; {KERNEL_ARTICLE} (Summary & prioritization: NVMe-mq none)")
def io_scheduler(f: Facts) -> Hits:
    for d in f.need("storage.block_devices"):
        sched, name = d.get("scheduler"), d["name"]
        nvme = d.get("kind") == "nvme"
        if sched is None or not (nvme or d.get("rotational") is False):
            continue
        severity: SeverityName
        if sched in ("bfq", "cfq"):
            severity = "warning" if nvme else "info"
        elif sched == "mq-deadline" and nvme:
            severity = "info"
        else:
            continue
        commands = [write("none", Under("/sys/block", name, "queue/scheduler"))]
        if nvme:
            commands.append(write('ACTION=="add|change", KERNEL=="nvme[0-9]*n[0-9]*", ATTR{queue/scheduler}="none"',
                                  UDEV_RULE))
        yield Hit(f"{name}: scheduler [{sched}]{_where(d)}", severity=severity, subject=name, commands=commands,
                  host_action=True)


@check("read-ahead", LAYER, "info", "Small read-ahead on a data disk",
       doc="Reads /sys/block/<dev>/queue/read_ahead_kb for disks that hold a data filesystem (not /boot); "
           "fires (info) at 128 KiB or less.",
       why="A larger read-ahead keeps sequential reads of large dataset shards pipelined with fewer "
           f"requests; the book {BOOK} suggests a few MB for streaming training data. Random small-file reads gain "
           "nothing, hence info.",
       fix="echo 4096 > /sys/block/<dev>/queue/read_ahead_kb (or blockdev --setra 8192 /dev/<dev>); persist "
           "with a udev rule",
       refs="Book ch. 5 and appendix")
def read_ahead(f: Facts) -> Hits:
    for d in _data_devices(f):
        ra = d.get("read_ahead_kb")
        if ra is not None and ra <= 128:
            yield Hit(f"{d['name']}: read_ahead_kb = {ra}{_where(d)}", subject=d["name"], host_action=True,
                      commands=[write(4096, Under("/sys/block", d["name"], "queue/read_ahead_kb"))])


@check("rotational-data", LAYER, "warning", "Filesystems on spinning disks",
       doc="Reads /sys/block/<dev>/queue/rotational for disks holding filesystems. Warning when every such "
           "disk spins (no local flash to stage data on); info otherwise. Virtual disks (virtio, Xen) are "
           "skipped: their flag says nothing about the medium.",
       why="A hard disk streams a few hundred MB/s and seeks in milliseconds; loaders reading shuffled "
           "samples from it starve GPUs that each want hundreds of MB/s.",
       fix="Keep datasets, offload folders and checkpoints on local NVMe or a parallel filesystem; stage from "
           "object storage to NVMe first (s5cmd, aws s3 cp).",
       refs="Book ch. 5 and appendix")
def rotational_data(f: Facts) -> Hits:
    disks = [d for d in _data_devices(f) if d.get("kind") not in ("virtio", "mmc")]
    spinning = [d for d in disks if d.get("rotational")]
    flash = [d for d in disks if d.get("rotational") is False]
    for d in spinning:
        yield Hit(f"{d['name']} is a rotational disk{_where(d)}", subject=d["name"],
                  severity="info" if flash else "warning")


@check("mount-noatime", LAYER, "info", "Filesystem updates access times on every read",
       doc="Reads the options of ext4, xfs, btrfs, f2fs and NFS mounts in /proc/self/mountinfo; fires (info) "
           "when none of noatime, relatime or lazytime is set, i.e. strictatime. relatime, the default, passes.",
       why="With strictatime every read of a sample file writes its inode back: metadata writes that compete "
           f"with the data reads. The book {BOOK} recommends noatime for data filesystems.",
       fix="mount -o remount,noatime <mountpoint>, and add noatime to its /etc/fstab entry",
       refs="Book ch. 5 and appendix")
def mount_noatime(f: Facts) -> Hits:
    for m in f.need("storage.mounts"):
        if m["fstype"] in ATIME_FS and not {"noatime", "relatime", "lazytime"} & set(m["options"]):
            yield Hit(f"{m['mountpoint']} ({m['fstype']}) is mounted with strict atime", subject=m["mountpoint"],
                      host_action=True, commands=[sh("mount", "-o", "remount,noatime", Abs(m["mountpoint"]))])


@check("nfs-mount-options", LAYER, "warning", "NFS mount with small read/write sizes",
       doc="Reads rsize and wsize of nfs/nfs4 mounts in /proc/self/mountinfo; fires when either is below "
           "1 MiB (1048576), the Linux client's maximum.",
       why="Small transfer sizes multiply the round trips per sample and per checkpoint; parallel readers of "
           "a shared dataset feel it first.",
       fix="Mount with rsize=1048576,wsize=1048576,noatime (plus actimeo=60 for read-mostly datasets); the "
           "server may cap the size it grants",
       refs="Book ch. 5")
def nfs_mount_options(f: Facts) -> Hits:
    for m in f.need("storage.mounts"):
        if not m["fstype"].startswith("nfs"):
            continue
        opts = dict(o.split("=", 1) for o in m["options"] if "=" in o)
        small = {k: int(opts[k]) for k in ("rsize", "wsize") if opts.get(k, "").isdigit() and int(opts[k]) < NFS_MIN_IO}
        if small:
            sizes = ", ".join(f"{k}={v}" for k, v in small.items())
            yield Hit(f"{m['mountpoint']} from {m['source']}: {sizes}", subject=m["mountpoint"], host_action=True)


@check("wbt-latency", LAYER, "info", "Write-back throttling on an NVMe data disk",
       doc="Reads /sys/block/<dev>/queue/wbt_lat_usec for NVMe disks holding filesystems; fires (info) when "
           "it is non-zero.",
       why="Block-layer write-back throttling holds back buffered writes to protect read latency; during a "
           "checkpoint burst that can slow the write. Whether it matters depends on the workload, hence info.",
       fix="echo 0 > /sys/block/<dev>/queue/wbt_lat_usec",
       refs=f"{KERNEL_ARTICLE} (The invisible bottleneck: blk-wbt off)")
def wbt_latency(f: Facts) -> Hits:
    for d in _data_devices(f):
        if d.get("kind") == "nvme" and d.get("wbt_lat_usec"):
            yield Hit(f"{d['name']}: wbt_lat_usec = {d['wbt_lat_usec']}{_where(d)}", subject=d["name"],
                      host_action=True, commands=[write(0, Under("/sys/block", d["name"], "queue/wbt_lat_usec"))])


@check("nvme-link", LAYER, "warning", "NVMe drive on a degraded PCIe link",
       doc="Compares /sys/class/nvme/<ctrl>/device/current_link_{speed,width} with max_link_{speed,width}; "
           "fires when either is below the drive's maximum.",
       why="A Gen4 x4 drive delivers about 7 GB/s; trained down to x2 or Gen3 it halves, and a dataset "
           "stream that fed the GPUs no longer does.",
       fix="Reseat the drive, check the slot's lane count and bifurcation in the BIOS; stripe several drives "
           "(RAID0) when one cannot feed the GPUs",
       refs="Book ch. 5")
def nvme_link(f: Facts) -> Hits:
    links = f.need("storage.nvme_links")
    if not links:
        raise NotApplicable("no PCIe NVMe drive")
    for link in links:
        cur_s, max_s, cur_w, max_w = (link.get(k) for k in ("current_gts", "max_gts", "current_width", "max_width"))
        slow = cur_s is not None and max_s is not None and cur_s < max_s
        narrow = cur_w is not None and max_w is not None and cur_w < max_w
        if slow or narrow:
            yield Hit(f"{link['controller']}: link {_link(cur_s, cur_w)} of {_link(max_s, max_w)}",
                      subject=link["controller"], host_action=True)


def _link(speed: float | None, width: int | None) -> str:
    return f"{'?' if speed is None else f'{speed:g}'} GT/s x{'?' if width is None else width}"


@check("gds-available", LAYER, "info", "GPUDirect Storage not loaded",
       doc="On a GPU host with NVMe drives or NFS mounts, fires (info) when the nvidia_fs module is not in "
           "/proc/modules. Only readers that use cuFile (e.g. kvikio, some checkpoint loaders) gain.",
       why="GDS lets NVMe or RDMA storage DMA straight into GPU memory, skipping the host bounce buffer: "
           "10-20% typical, up to +30% reported on H100, and the CPU is freed.",
       fix="Install the nvidia-gds package matching the driver (the GPU Operator can load nvidia-fs), then "
           "read through cuFile with O_DIRECT-aligned buffers",
       refs="Book ch. 5 (GPUDirect Storage)")
def gds_available(f: Facts) -> Hits:
    if not gpu_count(f):
        raise NotApplicable("no NVIDIA GPU")
    nvme = [d["name"] for d in f.need("storage.block_devices") if d.get("kind") == "nvme"]
    nfs = [m["mountpoint"] for m in f.value("storage.mounts") or [] if m["fstype"].startswith("nfs")]
    if not nvme and not nfs:
        raise NotApplicable("no NVMe drive or NFS mount")
    if "nvidia_fs" not in f.need("kernel.modules"):
        yield Hit(f"nvidia_fs not loaded; GDS-capable storage: {', '.join(nvme + nfs)}", host_action=True)
