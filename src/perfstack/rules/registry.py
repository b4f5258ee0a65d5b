"""The check registry: each check is a pure function of facts, with its metadata.

    @check("swappiness", "kernel", "warning", "vm.swappiness above 10",
           doc="...what it reads and when it fires...", why="...impact...", fix="...")
    def swappiness(f: Facts) -> Hits:
        v = f.need("kernel.swappiness")          # NotChecked if unavailable
        if v > 10:
            yield Hit(f"vm.swappiness = {v}", commands=["sysctl -w vm.swappiness=10"])

A rule yields zero or more Hits; the engine turns each into a Finding with the check's id,
layer, title and docs, and cites the sources of the facts the rule read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Literal

from perfstack.checks import FAMILIES, Check, register
from perfstack.model import Facts
from perfstack.rules.shell import Commands


SeverityName = Literal["critical", "warning", "info"]  # Severity's values, as a rule writes them


@dataclass
class Hit:
    evidence: str  # what was observed, with values
    fix: str | None = None  # specific fix; defaults to the check's
    severity: SeverityName | None = None  # overrides the check's default severity
    # Idempotent fixes for --fix-script, built with rules.shell.sh from any value read from outside.
    commands: Commands = field(default_factory=list)
    subject: str = ""
    host_action: bool = False
    why: str | None = None


# What a rule returns: a rule is a generator that yields each Hit it finds (a bare `return` when it
# finds none). A Union with Hit or None would read as "or return one", which no rule does, and a
# generator cannot be typed as such a Union.
Hits = Iterator[Hit]
Rule = Callable[[Facts], Iterable[Hit]]


# The doctor's family of the one finding registry (perfstack.checks, which holds the record and the ladder).
CHECKS: dict[str, Check] = FAMILIES["doctor"]


def check(id: str, layer: str, severity: SeverityName, title: str, *, doc: str, why: str, fix: str,
          refs: str = "") -> Callable[[Rule], Rule]:
    return register("doctor", id, layer, title, severity=severity, doc=doc, why=why, fix=fix, refs=refs)
