"""The audited process: its resource limits, where it may run, and whether it has been swapped.

On a live machine the audited process is perfstack itself, so its limits are those its shell
or launcher hands every child; in a bundle they are those of the process that captured it.
"""

from __future__ import annotations

from typing import Any, Union

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe
from perfstack.probes.cpu import parse_cpulist

# /proc/<pid>/limits row names -> the RLIMIT_* names users know from ulimit and limits.conf.
LIMIT_NAMES = {
    "Max cpu time": "cpu", "Max file size": "fsize", "Max data size": "data", "Max stack size": "stack",
    "Max core file size": "core", "Max resident set": "rss", "Max processes": "nproc",
    "Max open files": "nofile", "Max locked memory": "memlock", "Max address space": "as",
    "Max file locks": "locks", "Max pending signals": "sigpending", "Max msgqueue size": "msgqueue",
    "Max nice priority": "nice", "Max realtime priority": "rtprio", "Max realtime timeout": "rttime",
}
Limit = Union[int, str]  # a number, or "unlimited"


def _limit_value(token: str) -> Limit:
    return "unlimited" if token == "unlimited" else int(token)


def parse_limits(text: str) -> dict[str, dict[str, Any]]:
    """/proc/<pid>/limits: a 'Limit  Soft Limit  Hard Limit  Units' header, then rows like
    'Max locked memory         8388608              8388608              bytes'. The name runs
    up to the first number or 'unlimited'; units may be blank (nice, rtprio).
    -> {'memlock': {'soft': 8388608, 'hard': 8388608, 'units': 'bytes'}, ...}"""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("Limit"):
        raise Malformed("missing the 'Limit  Soft Limit  Hard Limit  Units' header")
    out: dict[str, dict[str, Any]] = {}
    for line in lines[1:]:
        words = line.split()
        if not words:
            continue
        at = next((i for i, w in enumerate(words) if w == "unlimited" or w.isdigit()), None)
        if not at or len(words) < at + 2:
            raise Malformed(f"a row has no soft and hard value: {line.strip()[:60]!r}")
        name = " ".join(words[:at])
        key = LIMIT_NAMES.get(name, name.lower().replace(" ", "_"))
        out[key] = {"soft": _limit_value(words[at]), "hard": _limit_value(words[at + 1]),
                    "units": " ".join(words[at + 2:])}
    return out


def parse_kib(value: str) -> int:
    """A status size: '1624 kB' -> 1624."""
    number, _, unit = value.partition(" ")
    if unit.strip() not in ("", "kB"):
        raise Malformed(f"not a kB size: {value[:40]!r}")
    return int(number)


# /proc/<pid>/status lines this module reads -> (fact key, parser of the value).
STATUS_FIELDS = {
    "Cpus_allowed_list": ("proc.cpus_allowed", parse_cpulist),  # the CPUs it may run on
    "Mems_allowed_list": ("proc.mems_allowed", parse_cpulist),  # the NUMA nodes it may allocate from
    "VmSwap": ("proc.vm_swap_bytes", lambda v: parse_kib(v) * 1024),  # its pages now in swap
}


def parse_status(text: str) -> dict[str, Any]:
    """/proc/<pid>/status: 'Name:<TAB>value' lines -> {fact key: parsed value} for STATUS_FIELDS present."""
    lines = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    if "Pid" not in lines:
        raise Malformed("missing the Pid line")
    return {key: parse(lines[name].strip()) for name, (key, parse) in STATUS_FIELDS.items() if name in lines}


@probe
def limits(c: Collector) -> None:
    """Source: /proc/self/limits (limits.<rlimit>: {'soft', 'hard', 'units'}; 'unlimited' or a number).
    Shell: ulimit -a; prlimit --pid $$"""
    src = "/proc/self/limits"
    try:
        rows = c.parsed(src, parse_limits)
    except Unavailable as e:
        c.missing_all((f"limits.{k}" for k in LIMIT_NAMES.values()), e.reason, src)
        return
    for key in LIMIT_NAMES.values():
        if key in rows:
            c.put(f"limits.{key}", rows[key], src)
        else:
            c.missing(f"limits.{key}", f"no row for {key} in {src}", src)


@probe
def process(c: Collector) -> None:
    """Source: /proc/self/status (Cpus_allowed_list, Mems_allowed_list, VmSwap).
    Shell: grep -E 'allowed_list|VmSwap' /proc/self/status"""
    src = "/proc/self/status"
    try:
        values = c.parsed(src, parse_status)
    except Unavailable as e:
        c.missing_all((key for key, _ in STATUS_FIELDS.values()), e.reason, src)
        return
    for name, (key, _) in STATUS_FIELDS.items():
        if key in values:
            c.put(key, values[key], src)
        else:
            c.missing(key, f"no {name} line in {src}", src)
