"""The one seam to the machine.

Only this package reads files, lists directories, runs commands, reads the environment or
talks to NVML. ``LiveHost`` does it on the real machine; ``BundleHost`` answers the same calls
from a recorded bundle directory; ``RecordingHost`` wraps a live host and writes a bundle.
Every call that cannot be answered raises ``Unavailable`` with a reason a user can read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, Sequence

if TYPE_CHECKING:
    from perfstack.errors import InputError


# The most any single read takes in, live or from a bundle: /proc and /sys files are small, and a
# file beyond this (a bundle's sparse 2 GiB cpuinfo, a path that is not a small file) is not data.
MAX_READ = 8 << 20


class Unavailable(Exception):
    """The machine could not answer: the file is absent, permission was denied, a command
    timed out. Probes turn this into a fact that is "not available (reason)"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


HostKind = Literal["live", "bundle"]  # what answers: the machine itself, or a bundle recorded on one


class Host(Protocol):
    kind: HostKind  # for the record and for messages; probes ask the members below, never branch on it

    @property
    def python_source(self) -> str:
        """Where python_info's answer comes from, as the facts' source names it."""
        ...

    def bad_file(self, name: str, detail: str) -> InputError | None:
        """What an answer that is not what perfstack expects means on this host. From a recorded bundle
        the file is bad input: the InputError to raise (exit 2, naming the bundle file, with the
        re-capture hint). On a live machine None: the caller records the reading as not available."""
        ...

    def read_text(self, path: str) -> str: ...

    def listdir(self, path: str) -> list[str]: ...

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> str: ...

    def environ(self) -> dict[str, str]: ...

    def nvml(self) -> dict[str, Any]: ...

    def python_info(self) -> dict[str, Any]: ...


# Commands whose output has a fixed name in a bundle's cmd/ directory. Any other command is
# stored under the argv joined by '-', with leading dashes dropped, and a .txt suffix.
CMD_FILES: dict[tuple[str, ...], str] = {
    ("nvidia-smi", "-q", "-x"): "nvidia-smi-q-x.xml",
    ("nvidia-smi", "topo", "-m"): "nvidia-smi-topo-m.txt",
    ("dmesg",): "dmesg.txt",
    ("lspci", "-vvv"): "lspci-vvv.txt",
}


def cmd_file(argv: Sequence[str]) -> str:
    known = CMD_FILES.get(tuple(argv))
    if known:
        return known
    slug = "-".join(a.lstrip("-").replace("/", "_") for a in argv if a.lstrip("-"))
    return f"{slug}.txt"
