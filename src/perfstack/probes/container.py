"""Containers and cgroups: whether we run inside one, and the limits its cgroup puts on us.

Detection uses only marker files, cgroup paths, the root filesystem type and the environment.
/proc/1/environ is deliberately not read: it would carry PID 1's secrets into a bundle.
"""

from __future__ import annotations

import re
from typing import Any, Callable, TypeVar

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe
from perfstack.probes.memory import parse_int
from perfstack.probes.mounts import MOUNTINFO, read_mounts

T = TypeVar("T")

DETECTION_SOURCES = "/.dockerenv, /run/.containerenv, /proc/{1,self}/cgroup, /proc/self/mountinfo, environment"
KEEP_ENV = ("container", "KUBERNETES_SERVICE_HOST")  # read by _detect: a capture keeps their values
KEEP_MOUNT_OPTIONS = ("size",)  # /dev/shm's size, read by _mount_facts

CGROUP = "/sys/fs/cgroup"
# A v1 limit this large is the kernel's "unlimited" (PAGE_COUNTER_MAX pages, e.g. 9223372036854771712).
UNLIMITED = 1 << 60

CGROUP_KEYS = ("cgroup.version", "cgroup.path", "cgroup.memory_limit_bytes", "cgroup.memory_current_bytes",
               "cgroup.memory_working_set_bytes", "cgroup.memory_oom_kills", "cgroup.cpu_quota_cpus", "cgroup.cpu_stat",
               "cgroup.pids_max", "cgroup.pids_current", "cgroup.cpuset_cpus", "cgroup.cpuset_mems")

# Words in a cgroup path that name the runtime that made it, most specific first.
RUNTIME_PATHS = (("kubepods", "kubernetes"), ("libpod", "podman"), ("docker", "docker"),
                 ("cri-containerd", "containerd"), ("containerd", "containerd"), ("crio", "cri-o"),
                 ("lxc", "lxc"))


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/self/cgroup: 'ID:CONTROLLERS:PATH' lines -> {controller: path}; v2's line is '0::/path' ('')."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            raise Malformed(f"not a cgroup membership list (line {n}: {line[:60]!r})")
        for ctrl in parts[1].split(",") if parts[1] else [""]:
            out[ctrl.replace("name=", "")] = parts[2]
    if not out:
        raise Malformed("empty")
    return out


def parse_limit(text: str) -> int | None:
    """memory.max / pids.max: 'max' or a number (None = unlimited); v1's huge numbers mean the same."""
    value = text.strip()
    if value == "max" or value == "-1":
        return None
    n = int(value)
    return None if n >= UNLIMITED else n


def parse_keyed(text: str) -> dict[str, int]:
    """Flat keyed files: memory.events, cpu.stat, memory.oom_control ('name value' lines)."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) != 2:
            if words:
                raise Malformed(f"not a 'key value' table: {line[:60]!r}")
            continue
        out[words[0]] = int(words[1])
    return out


def parse_cpu_max(text: str) -> float | None:
    """cpu.max: 'QUOTA PERIOD' in µs, QUOTA 'max' when unlimited -> the CPUs' worth it allows."""
    quota, period = text.split()
    return None if quota == "max" else int(quota) / int(period)


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; empty means none (or, at the root, 'all')."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first or last - first > 1 << 16:
            raise Malformed(f"not a CPU list: {part[:30]!r}")
        cpus.extend(range(first, last + 1))
    return cpus


def parse_size(option: str) -> int:
    """tmpfs 'size=65536k' -> bytes."""
    m = re.fullmatch(r"size=(\d+)([kmgt]?)", option.lower())
    if not m:
        raise Malformed(f"not a size option: {option[:30]!r}")
    return int(m.group(1)) << (10 * " kmgt".index(m.group(2) or " "))  # times 1024 per step of the unit


def _dirs(root: str, path: str) -> list[str]:
    """The cgroup directory of a path and its ancestors below root, deepest first: a limit set
    on any ancestor (a systemd slice, a pod) binds the process too."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return [f"{root}/{'/'.join(parts[:i])}" for i in range(len(parts), 0, -1)] + [root]


def _tightest(c: Collector, key: str, dirs: list[str], name: str, read: Callable[[str], Any]) -> str | None:
    """Put the smallest limit found on the path (None = unlimited); return the dir that set it,
    or the deepest readable one when none does."""
    found: list[tuple[Any, str]] = []
    reason = ""
    for d in dirs:
        try:
            found.append((read(d), d))
        except Unavailable as e:
            reason = reason or e.reason
    if not found:
        c.missing(key, reason, f"{dirs[0]}/{name}")
        return None
    limited = [(v, d) for v, d in found if v is not None]
    value, where = min(limited, key=lambda vd: vd[0]) if limited else (None, found[0][1])
    c.put(key, value, f"{where}/{name}")
    return where


def _file_limit(c: Collector, name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    return lambda d: c.parsed(f"{d}/{name}", parse)


def _v1_quota(c: Collector) -> Callable[[str], float | None]:
    def read(d: str) -> float | None:
        quota = c.parsed(f"{d}/cpu.cfs_quota_us", parse_int)
        period = c.parsed(f"{d}/cpu.cfs_period_us", parse_int)
        return quota / period if quota > 0 and period > 0 else None  # quota -1: unlimited
    return read


def _first(c: Collector, key: str, paths: list[str], parse: Callable[[str], T]) -> T | None:
    """Record the first readable of several candidate files (the cgroup, then its ancestors)."""
    reason = ""
    for path in paths:
        try:
            value = c.parsed(path, parse)
        except Unavailable as e:
            reason = reason or e.reason
            continue
        c.put(key, value, path)
        return value
    c.missing(key, reason, paths[0])
    return None


def _cpu_stat(c: Collector, path: str, throttled_key: str, scale: int) -> None:
    try:
        stat = c.parsed(path, parse_keyed)
    except Unavailable as e:
        c.missing("cgroup.cpu_stat", e.reason, path)
        return
    c.put("cgroup.cpu_stat", {"nr_periods": stat.get("nr_periods", 0), "nr_throttled": stat.get("nr_throttled", 0),
                              "throttled_usec": stat.get(throttled_key, 0) // scale}, path)


def _usage(c: Collector, current: str, stat: str, inactive: str) -> None:
    """Usage counts page cache; the working set (usage minus inactive file pages) is what the
    kubelet and docker stats compare with the limit, since inactive cache is reclaimed first."""
    used = c.file("cgroup.memory_current_bytes", current, parse_int)
    try:
        cache = c.parsed(stat, parse_keyed).get(inactive)
    except Unavailable as e:
        c.missing("cgroup.memory_working_set_bytes", e.reason, stat)
        return
    if used is not None and cache is not None:
        c.put("cgroup.memory_working_set_bytes", max(used - cache, 0), stat)
    else:
        c.missing("cgroup.memory_working_set_bytes", f"no usage or no {inactive} in {stat}", stat)


def _oom_kills(c: Collector, path: str) -> None:
    try:
        kills = c.parsed(path, parse_keyed).get("oom_kill")
    except Unavailable as e:
        c.missing("cgroup.memory_oom_kills", e.reason, path)
        return
    if kills is None:  # v1's memory.oom_control gained the counter in kernel 4.13
        c.missing("cgroup.memory_oom_kills", f"{path} has no oom_kill counter", path)
    else:
        c.put("cgroup.memory_oom_kills", kills, path)


def _detect(c: Collector, mounts: list[dict[str, Any]] | None) -> None:
    evidence: list[str] = []
    runtime: str | None = None
    env = c.env() or {}
    if c.text("/.dockerenv") is not None:
        evidence.append("/.dockerenv exists")
        runtime = "docker"
    if c.text("/run/.containerenv") is not None:
        evidence.append("/run/.containerenv exists")
        runtime = "podman"
    for path in ("/proc/1/cgroup", "/proc/self/cgroup"):
        text = c.text(path) or ""
        for word, name in RUNTIME_PATHS:
            if word in text:
                evidence.append(f"{path} names {word}")
                runtime = runtime or name
                break
    if env.get("KUBERNETES_SERVICE_HOST"):
        evidence.append("KUBERNETES_SERVICE_HOST is set")
        runtime = "kubernetes"  # the orchestrator decides the limits; say it over the engine
    if env.get("container"):
        evidence.append(f"container={env['container']} in the environment")
        runtime = runtime or env["container"]
    roots = [m for m in mounts or [] if m["mountpoint"] == "/"]
    if roots and roots[-1]["fstype"] == "overlay":
        evidence.append("the root filesystem is overlay")
        runtime = runtime or "unknown"
    for key, value in (("in_container", bool(evidence)), ("runtime", runtime), ("evidence", evidence)):
        c.put(f"container.{key}", value, DETECTION_SOURCES)


def _mount_facts(c: Collector, mounts: list[dict[str, Any]] | None, reason: str, src: str) -> None:
    if mounts is None:
        c.missing_all(["container.shm_size_bytes", "container.root_fstype"], reason, src)
        return
    shm = [m for m in mounts if m["mountpoint"] == "/dev/shm"]
    sizes = [o for o in shm[-1]["options"] if o.startswith("size=")] if shm else []
    if sizes:  # the last mount on a path is the one processes see
        c.put("container.shm_size_bytes", parse_size(sizes[0]), src)
    else:
        c.missing("container.shm_size_bytes", "no tmpfs with a size is mounted on /dev/shm", src)
    roots = [m for m in mounts if m["mountpoint"] == "/"]
    if roots:
        c.put("container.root_fstype", roots[-1]["fstype"], src)
    else:
        c.missing("container.root_fstype", "no '/' entry in the mount table", src)


def _cgroup_v2(c: Collector, path: str) -> None:
    dirs = _dirs(CGROUP, path)
    at = _tightest(c, "cgroup.memory_limit_bytes", dirs, "memory.max", _file_limit(c, "memory.max", parse_limit))
    # Usage and OOM kills are read where the limit bites; memory.events counts the whole subtree.
    at = at or dirs[0]
    _usage(c, f"{at}/memory.current", f"{at}/memory.stat", "inactive_file")
    _oom_kills(c, f"{at}/memory.events")
    at = _tightest(c, "cgroup.cpu_quota_cpus", dirs, "cpu.max", _file_limit(c, "cpu.max", parse_cpu_max))
    _cpu_stat(c, f"{at or dirs[0]}/cpu.stat", "throttled_usec", 1)
    at = _tightest(c, "cgroup.pids_max", dirs, "pids.max", _file_limit(c, "pids.max", parse_limit))
    c.file("cgroup.pids_current", f"{at or dirs[0]}/pids.current", parse_int)
    _first(c, "cgroup.cpuset_cpus", [f"{d}/cpuset.cpus.effective" for d in dirs], parse_cpu_list)
    _first(c, "cgroup.cpuset_mems", [f"{d}/cpuset.mems.effective" for d in dirs], parse_cpu_list)


def _cgroup_v1(c: Collector, groups: dict[str, str]) -> None:
    mem = _dirs(f"{CGROUP}/memory", groups.get("memory", "/"))
    mem_at = _tightest(c, "cgroup.memory_limit_bytes", mem, "memory.limit_in_bytes",
                       _file_limit(c, "memory.limit_in_bytes", parse_limit)) or mem[0]
    _usage(c, f"{mem_at}/memory.usage_in_bytes", f"{mem_at}/memory.stat", "total_inactive_file")
    _oom_kills(c, f"{mem_at}/memory.oom_control")
    cpu = _dirs(f"{CGROUP}/cpu", groups.get("cpu", "/"))
    cpu_at = _tightest(c, "cgroup.cpu_quota_cpus", cpu, "cpu.cfs_quota_us", _v1_quota(c))
    _cpu_stat(c, f"{cpu_at or cpu[0]}/cpu.stat", "throttled_time", 1000)  # v1 counts nanoseconds
    pids = _dirs(f"{CGROUP}/pids", groups.get("pids", "/"))
    pids_at = _tightest(c, "cgroup.pids_max", pids, "pids.max", _file_limit(c, "pids.max", parse_limit))
    c.file("cgroup.pids_current", f"{pids_at or pids[0]}/pids.current", parse_int)
    cpuset = _dirs(f"{CGROUP}/cpuset", groups.get("cpuset", "/"))
    _first(c, "cgroup.cpuset_cpus", [f"{d}/cpuset.effective_cpus" for d in cpuset], parse_cpu_list)
    _first(c, "cgroup.cpuset_mems", [f"{d}/cpuset.effective_mems" for d in cpuset], parse_cpu_list)


def _device_nodes(c: Collector, key: str, path: str, keep: Callable[[str], bool], absent_ok: bool) -> None:
    try:
        names = c.host.listdir(path)
    except Unavailable as e:
        # An absent /dev/infiniband is an answer (no RDMA devices were passed in), not a failure.
        if absent_ok and "absent" in e.reason:
            c.put(key, [], path)
        else:
            c.missing(key, e.reason, path)
        return
    c.put(key, [n for n in names if keep(n)], path)


@probe
def container(c: Collector) -> None:
    """Sources: /.dockerenv, /run/.containerenv, /proc/{1,self}/cgroup, /proc/self/mountinfo, the environment;
    /sys/fs/cgroup/<path>/{memory.max,memory.current,memory.events,cpu.max,cpu.stat,pids.max,
    cpuset.*.effective} (v2) or /sys/fs/cgroup/{memory,cpu,pids,cpuset}/<path>/... (v1); /dev, /dev/infiniband.
    Shell: cat /proc/self/cgroup; cat /sys/fs/cgroup/memory.max; df -h /dev/shm"""
    try:
        mounts: list[dict[str, Any]] | None
        mounts, mount_src = read_mounts(c)
        reason = ""
    except Unavailable as e:
        mounts, reason, mount_src = None, e.reason, MOUNTINFO
    try:
        groups: dict[str, str] | None = c.parsed("/proc/self/cgroup", parse_proc_cgroup)
    except Unavailable as e:
        groups = None
        c.missing_all(CGROUP_KEYS, e.reason, "/proc/self/cgroup")
    _detect(c, mounts)
    _mount_facts(c, mounts, reason, mount_src)
    _device_nodes(c, "container.nvidia_device_nodes", "/dev", lambda n: bool(re.fullmatch(r"nvidia(\d+|ctl)", n)),
                  absent_ok=False)
    _device_nodes(c, "container.infiniband_device_nodes", "/dev/infiniband", lambda n: n.startswith("uverbs"),
                  absent_ok=True)
    if groups is None:
        return
    # Pure v2 lists only '0::/path'; hybrid hosts also mount v2 but keep the controllers on v1.
    v2 = set(groups) == {""}
    c.put("cgroup.version", 2 if v2 else 1, "/proc/self/cgroup")
    c.put("cgroup.path", groups[""] if v2 else groups.get("memory", groups.get("", "/")), "/proc/self/cgroup")
    if v2:
        _cgroup_v2(c, groups[""])
    else:
        _cgroup_v1(c, groups)
