"""A hand-built host for edge cases that are hard to record (hung commands, garbage files)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from perfstack.errors import InputError
from perfstack.host import HostKind, Unavailable
from perfstack.host import bundle as bundle_host
from perfstack.model import Fact, Facts


@dataclass
class FakeHost:
    """files: absolute path -> text (or an Unavailable to raise); dirs: path -> entries;
    cmds: argv tuple -> output (or Unavailable); env/nvml_data/pyinfo: None means unavailable."""

    files: dict[str, Any] = field(default_factory=dict)
    dirs: dict[str, list[str]] = field(default_factory=dict)
    cmds: dict[tuple[str, ...], Any] = field(default_factory=dict)
    env: dict[str, str] | None = field(default_factory=dict)
    nvml_data: dict[str, Any] | None = None
    pyinfo: dict[str, Any] | None = None
    kind: HostKind = "live"  # "bundle" answers as a recorded bundle does: a malformed file is bad input

    @property
    def python_source(self) -> str:
        return bundle_host.BundleHost.python_source if self.kind == "bundle" else "python -m perfstack.host.pyinfo"

    def bad_file(self, name: str, detail: str) -> InputError | None:
        return bundle_host.bad_file(name, detail) if self.kind == "bundle" else None

    def _answer(self, value: Any, what: str) -> Any:
        if value is None:
            raise Unavailable(f"{what}: absent")
        if isinstance(value, Unavailable):
            raise value
        return value

    def read_text(self, path: str) -> str:
        return self._answer(self.files.get(path), path)

    def listdir(self, path: str) -> list[str]:
        if path in self.dirs:
            return sorted(self.dirs[path])
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix):].split("/")[0] for p in self.files if p.startswith(prefix)}
        if not names:
            raise Unavailable(f"{path}: absent")
        return sorted(names)

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> str:
        return self._answer(self.cmds.get(tuple(argv)), " ".join(argv))

    def environ(self) -> dict[str, str]:
        return self._answer(self.env, "environment")

    def nvml(self) -> dict[str, Any]:
        return self._answer(self.nvml_data, "NVML")

    def python_info(self) -> dict[str, Any]:
        return self._answer(self.pyinfo, "python")


def facts(**values: Any) -> Facts:
    """Facts from keyword arguments; '__' in a name stands for '.', e.g. kernel__swappiness=60.
    Pass an Unavailable to make a fact missing."""
    f = Facts()
    for name, v in values.items():
        key = name.replace("__", ".")
        f.add(Fact.missing(key, v.reason) if isinstance(v, Unavailable) else Fact(key, v, f"test:{key}"))
    return f
