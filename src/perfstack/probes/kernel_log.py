"""The kernel ring buffer: NVIDIA Xid faults, GPUs that fell off the bus, PCIe AER errors, OOM kills.

dmesg is the hardware layer's error channel: the driver reports GPU faults there as numbered Xid
events. Reading it needs root on most distributions (kernel.dmesg_restrict=1), and it is a ring
buffer: old lines are gone on a busy or long-running host, so "none found" means "none kept".
"""

from __future__ import annotations

import re
from typing import Any

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe
from perfstack.probes.gpu import norm_bus_id

DMESG = ("dmesg",)
KEYS = ("kernel_log.xid", "kernel_log.fallen_off_bus", "kernel_log.aer", "kernel_log.oom_kills",
        "kernel_log.nvrm_errors", "kernel_log.oldest_s")
BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
# "[   12.345678] msg" (dmesg), "<3>[ 12.3] msg" (dmesg -r), "[Sun Nov 22 05:49:57 2026] msg" (dmesg -T),
# "Nov 22 05:49:57 host kernel: msg" (syslog, journalctl -k), "2026-11-22T05:49:57..." (ISO).
LOG_LINE = re.compile(r"^\s*(?:<\d+>)?\[\s*(\d+\.\d+)\]|^\s*\[\w{3} \w{3} +\d+ |^\w{3} +\d+ \d\d:\d\d:\d\d |"
                      r"^\d{4}-\d\d-\d\dT\d\d:\d\d")
XID = re.compile(r"NVRM: Xid \(([^)]*)\):\s*(\d+)(?:,\s*(.*))?")
FALLEN = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?({BDF}):? (?:GPU )?has fallen off the bus")
AER = re.compile(rf"\S+ ({BDF}): (?:AER: )?PCIe Bus Error: severity=([^,]+), type=([^,]+)")
OOM = re.compile(r"(Memory cgroup out of memory|Out of memory)[^:]*: Kill(?:ed)? process (\d+) \(([^)]*)\)")
INIT_FAILED = re.compile(rf"NVRM: (?:GPU )?(?:PCI:)?({BDF})?:? ?RmInitAdapter failed")
API_MISMATCH = re.compile(r"NVRM: API mismatch: (.*)")


def _severity(text: str) -> str:
    t = text.lower()
    if "non-fatal" in t:
        return "uncorrected-nonfatal"
    if "fatal" in t:
        return "uncorrected-fatal"
    return "corrected"


def _bump(table: dict[tuple[Any, ...], dict[str, Any]], key: tuple[Any, ...], row: dict[str, Any]) -> None:
    if key in table:
        table[key]["count"] += 1
    else:
        table[key] = dict(row, count=1)


def _message(rest: str | None) -> str:
    """The Xid's free text without pid/name fields (they identify users, not faults)."""
    text = re.sub(r"\b(pid|name)=[^,]*,\s*", "", rest or "").strip().rstrip(".")
    return text[:160]


def parse_dmesg(text: str) -> dict[str, Any]:
    """dmesg output -> the events perfstack checks, aggregated by (kind, device)."""
    lines = text.splitlines()
    sample = [ln for ln in lines if ln.strip()][:50]
    if sample and not any(LOG_LINE.search(ln) for ln in sample):
        raise Malformed(f"not kernel log output (first line: {sample[0].strip()[:60]!r})")
    xid: dict[tuple[Any, ...], dict[str, Any]] = {}
    aer: dict[tuple[Any, ...], dict[str, Any]] = {}
    fallen: list[str] = []
    ooms: list[dict[str, Any]] = []
    nvrm: dict[tuple[Any, ...], dict[str, Any]] = {}
    oldest = None
    for ln in lines:
        ts = LOG_LINE.match(ln)
        if oldest is None and ts and ts.group(1):
            oldest = float(ts.group(1))
        if m := XID.search(ln):
            bus = norm_bus_id(m.group(1))
            _bump(xid, (int(m.group(2)), bus), {"code": int(m.group(2)), "bus_id": bus,
                                                "message": _message(m.group(3))})
        elif m := FALLEN.search(ln):
            bus = norm_bus_id(m.group(1))
            if bus and bus not in fallen:
                fallen.append(bus)
        elif m := AER.search(ln):
            sev = _severity(m.group(2))
            _bump(aer, (norm_bus_id(m.group(1)), sev, m.group(3).strip()),
                  {"bus_id": norm_bus_id(m.group(1)), "severity": sev, "type": m.group(3).strip()})
        elif m := OOM.search(ln):
            ooms.append({"pid": int(m.group(2)), "process": m.group(3), "cgroup": m.group(1).startswith("Memory")})
        elif m := INIT_FAILED.search(ln):
            _bump(nvrm, ("init-failed", norm_bus_id(m.group(1))), {"kind": "init-failed",
                                                                   "bus_id": norm_bus_id(m.group(1)), "message": ""})
        elif m := API_MISMATCH.search(ln):
            _bump(nvrm, ("api-mismatch", None), {"kind": "api-mismatch", "bus_id": None,
                                                 "message": m.group(1).strip()[:200]})
    return {"xid": list(xid.values()), "fallen_off_bus": fallen, "aer": list(aer.values()), "oom_kills": ooms,
            "nvrm_errors": list(nvrm.values()), "oldest_s": oldest}


@probe
def kernel_log(c: Collector) -> None:
    """Source: dmesg (cmd/dmesg.txt in a bundle). Shell: dmesg | grep -E 'NVRM: Xid|AER|Killed process'"""
    try:
        log = c.command(DMESG, parse_dmesg)
    except Unavailable as e:
        reason = e.reason
        if "not permitted" in reason or "permission denied" in reason.lower():
            reason += " (reading the kernel log needs root, or sysctl kernel.dmesg_restrict=0)"
        c.missing_all(KEYS, reason, "dmesg")
        return
    for key in KEYS:
        c.put(key, log[key.split(".", 1)[1]], "dmesg")
