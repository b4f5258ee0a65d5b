"""The CPUs that feed the GPUs: model, core counts, ISA, frequency governor, idle states, SMT,
NUMA layout, and how long tasks stall waiting for CPU, memory or I/O (pressure stall information)."""

from __future__ import annotations

import re
from typing import Any, Iterable

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe
from perfstack.probes.memory import parse_int, parse_meminfo

CPU_DIR = "/sys/devices/system/cpu"
NODE_DIR = "/sys/devices/system/node"
MAX_CPU_ID = 65535  # far above the kernel's NR_CPUS limit (8192); a larger id means garbage
# Extensions that pick code paths in PyTorch CPU kernels, oneDNN, CPU offload and llama.cpp.
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile",
             "amx_bf16", "amx_int8", "asimd", "asimddp", "sve", "sve2", "bf16", "i8mm")
# lscpu's names for the Arm server cores GPU hosts use (implementer 0x41 = Arm Ltd.).
ARM_PARTS = {("0x41", "0xd0c"): "Neoverse-N1", ("0x41", "0xd40"): "Neoverse-V1",
             ("0x41", "0xd4f"): "Neoverse-V2"}


def parse_cpulist(text: str) -> list[int]:
    """The kernel's CPU/node list format: '0-3,8-11' -> [0, 1, 2, 3, 8, 9, 10, 11]; '' -> []."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if not 0 <= a <= b <= MAX_CPU_ID:
            raise Malformed(f"not a CPU list: {text.strip()[:60]!r}")
        out.extend(range(a, b + 1))
    return sorted(set(out))


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of parse_cpulist, for evidence: [0, 1, 2, 5] -> '0-2,5'."""
    runs: list[list[int]] = []
    for n in sorted(set(cpus)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def parse_distances(text: str) -> list[int]:
    """nodeN/distance: the SLIT row, '10 21' (10 = local; 21 = 2.1x the local latency)."""
    row = [int(x) for x in text.split()]
    if not row:
        raise Malformed("empty")
    return row


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """/proc/cpuinfo: one 'key : value' block per logical CPU. x86 gives 'model name', 'flags' and
    'physical id'/'core id' (so physical cores can be counted); arm64 gives 'CPU implementer',
    'CPU part' and 'Features', and no core ids (physical is then None)."""
    blocks: list[dict[str, str]] = []
    for chunk in re.split(r"\n\s*\n", text):
        block = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                block[key.strip()] = value.strip()
        if "processor" in block:
            blocks.append(block)
    if not blocks:
        raise Malformed("missing 'processor' entries")
    first = blocks[0]
    cores = {(b["physical id"], b["core id"]) for b in blocks if "physical id" in b and "core id" in b}
    if "flags" in first:
        arch, flags = "x86_64", first["flags"].split()
    elif "Features" in first:
        arch, flags = "aarch64", first["Features"].split()
    else:
        arch, flags = None, []
    model = first.get("model name")
    if model is None and "CPU part" in first:
        ids = (first.get("CPU implementer", "?"), first["CPU part"])
        model = ARM_PARTS.get(ids, f"Arm implementer {ids[0]} part {ids[1]}")
    return {"logical": len(blocks), "physical": len(cores) or None, "model": model,
            "vendor": first.get("vendor_id"), "arch": arch, "isa": [f for f in ISA_FLAGS if f in flags],
            # x86 guests see the 'hypervisor' CPUID bit; on arm64 it is not visible here.
            "virtualized": ("hypervisor" in flags) if arch == "x86_64" else None}


def parse_psi(text: str) -> dict[str, dict[str, float]]:
    """/proc/pressure/<resource>: 'some avg10=0.20 avg60=0.10 avg300=0.18 total=2483387' and a 'full'
    line. avgN are the percent of wall time some (or all) tasks stalled; total is in microseconds."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind in ("some", "full"):
            out[kind] = {k: float(v) for k, v in (item.split("=", 1) for item in rest.split())}
    if "avg60" not in out.get("some", {}):
        raise Malformed("missing the 'some avg10=... avg60=...' line")
    return out


def _cpus(c: Collector) -> list[str]:
    return sorted((n for n in c.listdir(CPU_DIR) if re.fullmatch(r"cpu\d+", n)), key=lambda n: int(n[3:]))


def _cpuinfo(c: Collector) -> None:
    keys = ("cpu.logical_count", "cpu.physical_cores", "cpu.model", "cpu.vendor", "cpu.arch", "cpu.isa",
            "cpu.virtualized")
    src = "/proc/cpuinfo"
    try:
        info = c.parsed(src, parse_cpuinfo)
    except Unavailable as e:
        c.missing_all(keys, e.reason, src)
        return
    c.put("cpu.logical_count", info["logical"], src)
    physical = info["physical"]
    smt = c.facts.get("cpu.smt")
    if physical is None and smt is not None and smt.available and not smt.value["active"]:
        physical = info["logical"]  # no SMT: every logical CPU is a core (arm64 gives no core ids)
    if physical is None:
        c.missing("cpu.physical_cores", "/proc/cpuinfo has no core ids and SMT state is unknown", src)
    else:
        c.put("cpu.physical_cores", physical, src)
    for key in ("model", "vendor", "arch"):
        if info[key] is None:
            c.missing(f"cpu.{key}", f"no {key} in /proc/cpuinfo", src)
        else:
            c.put(f"cpu.{key}", info[key], src)
    c.put("cpu.isa", info["isa"], src)
    c.put("cpu.virtualized", info["virtualized"], src)


def _governors(c: Collector, cpus: list[str]) -> None:
    """The governor of every CPU, grouped: {'powersave': '0-63', 'performance': '64-127'}."""
    src = f"{CPU_DIR}/cpu*/cpufreq/scaling_governor"
    by_gov: dict[str, list[int]] = {}
    for name in cpus:
        try:
            gov = c.parsed(f"{CPU_DIR}/{name}/cpufreq/scaling_governor", str.strip)
        except Unavailable as e:
            if by_gov:  # an offline CPU has no cpufreq directory
                continue
            # The first CPU tells: without cpufreq there, there is none (and no point in 255 more misses).
            c.missing_all(("cpu.governors", "cpu.scaling_driver"),
                          f"cpufreq not exposed (VM or container?): {e.reason}", src)
            return
        by_gov.setdefault(gov, []).append(int(name[3:]))
    if not by_gov:
        c.missing_all(("cpu.governors", "cpu.scaling_driver"), f"{CPU_DIR} lists no CPUs", src)
        return
    c.put("cpu.governors", {g: format_cpulist(ids) for g, ids in sorted(by_gov.items())}, src)
    c.file("cpu.scaling_driver", f"{CPU_DIR}/{cpus[0]}/cpufreq/scaling_driver")


def _idle_states(c: Collector, cpu: str) -> None:
    """cpuidle states of one CPU (the kernel applies one driver to all): name, exit latency, disabled."""
    driver = c.file("cpu.idle_driver", f"{CPU_DIR}/cpuidle/current_driver")
    base = f"{CPU_DIR}/{cpu}/cpuidle"
    names = sorted((s for s in c.listdir(base) if re.fullmatch(r"state\d+", s)), key=lambda s: int(s[5:]))
    if not names:
        if driver == "none":  # no cpuidle driver: the OS only halts, it has no deeper state to choose
            c.put("cpu.idle_states", [], f"{CPU_DIR}/cpuidle/current_driver")
        else:
            c.missing("cpu.idle_states", f"{base} absent or empty (cpuidle not exposed)", base)
        return
    states = []
    try:
        for s in names:
            states.append({"name": c.parsed(f"{base}/{s}/name", str.strip),
                           "latency_us": c.parsed(f"{base}/{s}/latency", parse_int),
                           "disabled": c.parsed(f"{base}/{s}/disable", parse_int) != 0})
    except Unavailable as e:
        c.missing("cpu.idle_states", e.reason, base)
        return
    c.put("cpu.idle_states", states, base)


def _smt(c: Collector) -> None:
    src = f"{CPU_DIR}/smt"
    try:
        active = c.parsed(f"{src}/active", parse_int)
        control = c.parsed(f"{src}/control", str.strip)
    except Unavailable as e:
        c.missing("cpu.smt", e.reason, src)
        return
    c.put("cpu.smt", {"active": active == 1, "control": control}, src)


@probe
def cpu(c: Collector) -> None:
    """Sources: /proc/cpuinfo, /sys/devices/system/cpu/{smt/*,cpuidle/current_driver},
    /sys/devices/system/cpu/cpu*/cpufreq/{scaling_governor,scaling_driver}, cpuN/cpuidle/state*/.
    Shell: lscpu; cpupower frequency-info; cpupower idle-info"""
    _smt(c)
    _cpuinfo(c)
    cpus = _cpus(c)
    _governors(c, cpus)
    if cpus:
        _idle_states(c, cpus[0])
    else:
        c.missing("cpu.idle_states", f"{CPU_DIR} lists no CPUs", CPU_DIR)


@probe
def numa(c: Collector) -> None:
    """Sources: /sys/devices/system/node/node*/{cpulist,meminfo,distance}. Shell: numactl --hardware"""
    names = sorted((n for n in c.listdir(NODE_DIR) if re.fullmatch(r"node\d+", n)), key=lambda n: int(n[4:]))
    if not names:
        c.missing("numa.nodes", f"{NODE_DIR} absent or lists no nodes (kernel built without NUMA?)", NODE_DIR)
        return
    nodes = []
    try:
        for name in names:
            d = f"{NODE_DIR}/{name}"
            nodes.append({"id": int(name[4:]),
                          "cpus": c.parsed(f"{d}/cpulist", parse_cpulist),  # empty for memory-only nodes
                          "mem_total_kib": c.parsed(f"{d}/meminfo", parse_meminfo)["MemTotal"],
                          "distances": c.parsed(f"{d}/distance", parse_distances)})
    except Unavailable as e:
        c.missing("numa.nodes", e.reason, NODE_DIR)
        return
    c.put("numa.nodes", nodes, NODE_DIR)


@probe
def pressure(c: Collector) -> None:
    """Sources: /proc/pressure/{cpu,memory,io} (kernel 4.20+, absent or EOPNOTSUPP when booted psi=0).
    Shell: cat /proc/pressure/memory"""
    for resource in ("cpu", "memory", "io"):
        c.file(f"psi.{resource}", f"/proc/pressure/{resource}", parse_psi)
