"""Kernel / host OS checks."""

from __future__ import annotations

from perfstack.model import Facts
from perfstack.rules.registry import Hit, Hits, check

SYSCTL_FILE = "/etc/sysctl.d/99-perfstack.conf"


def sysctl_commands(name: str, value: object) -> list[str]:
    """Set now and persist; both steps are idempotent (the persist step replaces its own line)."""
    return [
        f"sysctl -w {name}={value}",
        f"touch {SYSCTL_FILE} && sed -i '/^{name}[ =]/d' {SYSCTL_FILE} && echo '{name}={value}' >> {SYSCTL_FILE}",
    ]


@check("swappiness", "kernel", "warning", "vm.swappiness above 10",
       doc="Reads /proc/sys/vm/swappiness and fires when it is above 10.",
       why="A swapped-out page of a buffer that feeds a GPU stalls the GPU on disk I/O; the book puts "
           "the slowdown at orders of magnitude. The book recommends 0; 10 is the common compromise on "
           "hosts short of RAM, where 0 can provoke the OOM killer.",
       fix="sysctl -w vm.swappiness=10 (or 0), persisted in /etc/sysctl.d/",
       refs="Book ch. 3 (OS tuning); appendix checklist")
def swappiness(f: Facts) -> Hits:
    v = f.need("kernel.swappiness")
    if v > 10:
        yield Hit(f"vm.swappiness = {v}", commands=sysctl_commands("vm.swappiness", 10), host_action=True)


@check("thp-mode", "kernel", "warning", "Transparent huge pages disabled",
       doc="Reads /sys/kernel/mm/transparent_hugepage/enabled (the bracketed value). Fires a warning for "
           "'never' (training and batch hosts lose THP's gain); reports 'always' with defrag 'always' as info, "
           "since compaction stalls hurt latency-critical serving.",
       why="2 MB pages cut page faults and TLB misses on large host buffers: about 3-5% throughput for "
           "training input pipelines. Synchronous compaction (defrag=always) causes unpredictable pauses.",
       fix="echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (or 'always' for training hosts); "
           "persist with transparent_hugepage=madvise on the kernel command line",
       refs="Book ch. 3; appendix checklist")
def thp_mode(f: Facts) -> Hits:
    mode = f.need("kernel.thp_enabled")
    if mode == "never":
        yield Hit("transparent_hugepage/enabled = [never]", host_action=True,
                  commands=["echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"])
    elif mode == "always" and f.value("kernel.thp_defrag") == "always":
        yield Hit("transparent_hugepage enabled = [always] with defrag = [always]: synchronous compaction "
                  "can stall allocations", severity="info", host_action=True,
                  fix="echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag",
                  commands=["echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag"])
