"""Fix commands built from arguments: the only place where a value becomes shell text.

Rules pass values read from the machine or a bundle (a mount point, a device name, a GPU index)
to ``sh`` as separate arguments instead of formatting them into a string; ``line`` quotes each
one. A path argument is an ``Abs``: checked absolute, and written after ``--``. A bundle is written by someone else and the script may be run as root, so a value that
quoting cannot keep on one inert line (a newline or any other control character) is refused
with ``UnsafeValue``: the finding keeps its evidence and says to do the fix by hand.

Plain strings in a rule's commands are shell written in perfstack's own source (loops over
/sys with no outside value in them); they pass through, checked only for control characters.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Sequence, Union

# C0 controls, DEL and the C1 controls: a newline ends the line (and a '#' comment), the rest can
# hide text from whoever reviews the script in a terminal.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class UnsafeValue(ValueError):
    """A value that cannot be written into a script as one inert argument."""


def visible(text: str) -> str:
    """``text`` with every control character written as an escape, for comments and messages."""
    return CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


def quote(value: object) -> str:
    text = str(value)
    if CONTROL.search(text):
        raise UnsafeValue(f"the value '{visible(text)}' holds a control character")
    return shlex.quote(text)


@dataclass(frozen=True)
class Under:
    """A path made of a fixed directory, one name read from outside, and a fixed rest:
    ``Under("/sys/block", name, "queue/scheduler")``. The name is checked when the line is written:
    it must be one plain path component, so that a bundle cannot aim a write elsewhere."""

    base: str
    name: object
    rest: str = ""

    def __str__(self) -> str:
        text = str(self.name)
        if not text or "/" in text or text in (".", "..") or CONTROL.search(text):
            raise UnsafeValue(f"'{visible(text)}' is not a plain file name")
        return "/".join(p for p in (self.base.rstrip("/"), text, self.rest) if p)


@dataclass(frozen=True)
class Abs:
    """A path argument: ``sh("mount", "-o", "remount,noatime", Abs(mountpoint))``. It must be absolute
    (a mount point of ``--all`` or ``-a`` read from a bundle would otherwise be an option), and the line
    puts ``--`` before the first one, so that no path is ever parsed as an option."""

    path: object

    def __str__(self) -> str:
        text = str(self.path)
        if not text.startswith("/") or CONTROL.search(text):
            raise UnsafeValue(f"'{visible(text)}' is not an absolute path")
        return text


@dataclass(frozen=True)
class Step:
    argv: tuple[object, ...]
    into: object = None  # file that receives stdout (a str or an Under)
    append: bool = False


@dataclass(frozen=True)
class Command:
    """One script line: simple commands joined by '&&', each an argv with an optional output file."""

    steps: tuple[Step, ...]

    def then(self, other: "Command") -> "Command":
        return Command(self.steps + other.steps)

    def line(self) -> str:
        parts = []
        for s in self.steps:
            argv = list(s.argv)
            first = next((i for i, a in enumerate(argv) if isinstance(a, Abs)), None)
            if first is not None and (first == 0 or argv[first - 1] != "--"):
                argv.insert(first, "--")
            text = " ".join(quote(a) for a in argv)
            if s.into is not None:
                text += f" {'>>' if s.append else '>'} {quote(s.into if isinstance(s.into, Under) else Abs(s.into))}"
            parts.append(text)
        return " && ".join(parts)


def sh(*argv: object, into: object = None, append: bool = False) -> Command:
    """``sh("mount", "-o", "remount,noatime", Abs(mountpoint))``; ``into`` redirects stdout to a file.
    Arguments are turned into text only when the line is written (see Under)."""
    if not argv:
        raise ValueError("a command needs at least its name")
    return Command((Step(tuple(argv), into, append),))


def write(value: object, path: object) -> Command:
    """``echo VALUE > PATH``: set a sysfs or procfs knob. A value that echo could take for an
    option or an escape goes through printf instead."""
    text = str(value)
    if text.startswith("-") or "\\" in text:
        return sh("printf", "%s\\n", value, into=path)
    return sh("echo", value, into=path)


Commands = Sequence[Union[str, Command]]


def lines(commands: Commands) -> list[str]:
    """The script lines of a fix; raises UnsafeValue when any of them cannot be written safely."""
    out = []
    for c in commands:
        text = c.line() if isinstance(c, Command) else c
        if CONTROL.search(text):
            raise UnsafeValue(f"the command '{visible(text)}' holds a control character")
        out.append(text)
    return out
