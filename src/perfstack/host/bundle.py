"""A recorded machine: a bundle directory answering the same calls as the live host.

Layout (fixed; users and tests build and edit bundles by hand):

    DIR/proc/..., DIR/sys/..., DIR/etc/...   files at their absolute paths
    DIR/proc/self/{limits,status}            the audited process
    DIR/cmd/<name>                           command outputs (see host.CMD_FILES)
    DIR/env.json                             the audited environment, {name: value}
    DIR/python.json                          optional: Python/torch/CUDA/NCCL versions
    DIR/nvml.json                            optional: NVML answers
    DIR/unavailable.json                     optional: {path or cmd/<name>: reason} for reads
                                             that failed at capture time
    DIR/listdir.json                         optional: {dir: [entries]} as listed at capture;
                                             merged with what the directory holds
    DIR/meta.json                            optional: capture time, perfstack version, host id,
                                             complete (false while capture is still writing)

Every read is bounded (host.MAX_READ) and stays inside DIR: a bundle comes from someone else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from perfstack import jsonload
from perfstack.errors import InputError
from perfstack.host import MAX_READ, HostKind, Unavailable, cmd_file

RECAPTURE = "re-capture with 'perfstack capture DIR' on the GPU host, or fix the file by hand"
# What a bundle is made of. 'perfstack capture' writes most of them, a hand-built bundle at least one.
ENTRIES = ("meta.json", "proc", "sys", "etc", "cmd", "env.json", "nvml.json", "python.json", "listdir.json",
           "unavailable.json")


def bad_file(name: str, detail: str) -> InputError:
    """A bundle file that is not what 'perfstack capture' writes: bad input, named, with the way out."""
    return InputError(f"bundle file {name} is {detail}", hint=RECAPTURE)


class BundleHost:
    kind: HostKind = "bundle"
    python_source = "python.json"

    def bad_file(self, name: str, detail: str) -> InputError | None:
        return bad_file(name, detail)

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.exists():
            raise InputError(f"bundle {root} does not exist", hint="give the directory 'perfstack capture DIR' wrote")
        if not self.root.is_dir():
            raise InputError(f"bundle {root} is a file, not a directory",
                             hint="a bundle is the directory 'perfstack capture DIR' wrote (unpack it first if archived)")
        meta = self._json("meta.json", {}, expect=dict)
        if meta.get("complete") is False:
            raise InputError(f"bundle {root} is incomplete: its capture was interrupted before every file was written",
                             hint="capture it again with 'perfstack capture DIR'")
        self._failed: dict[str, str] = self._json("unavailable.json", {}, expect=dict)
        self._listings: dict[str, list[str]] = self._json("listdir.json", {}, expect=dict)
        # their shapes, checked here once: a listing of "abc" would be three entries a, b, c
        self._shape("unavailable.json", self._failed, lambda v: isinstance(v, str), "a string (why the read failed)")
        self._shape("listdir.json", self._listings, lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                    "a list of entry names")

    @classmethod
    def given(cls, root: str | Path) -> "BundleHost":
        """The bundle a user named (doctor --bundle DIR). A directory that holds nothing a bundle has
        (a wrong path, an archive not yet unpacked) is refused: audited, it would read as a machine
        where nothing could be read, with exit 0. An empty bundle stays readable through the
        constructor, for tests and hand-built bundles."""
        host = cls(root)
        if not any((host.root / name).exists() or (host.root / name).is_symlink() for name in ENTRIES):
            raise InputError(f"{root} is not a bundle: it holds none of meta.json, env.json, proc/, sys/, cmd/",
                             hint="give the directory 'perfstack capture DIR' wrote (unpack it first if archived)")
        return host

    def origin(self, rel: str) -> str:
        return f"bundle file {rel.lstrip('/')}"

    def _missing(self, rel: str) -> Unavailable:
        rel = rel.lstrip("/")
        reason = self._failed.get(rel)
        return Unavailable(f"{reason} (at capture)" if reason else f"{rel} not in bundle")

    def _file(self, rel: str) -> Path:
        p = (self.root / rel.lstrip("/")).resolve()
        # A hand-edited bundle must not be able to point reads outside itself.
        if self.root.resolve() not in p.parents and p != self.root.resolve():
            raise Unavailable(f"{rel} is outside the bundle")
        return p

    def read_text(self, path: str) -> str:
        p = self._file(path)
        if not p.is_file():
            raise self._missing(path)
        try:
            return self._bounded(p, path).decode("utf-8", errors="replace")
        except OSError as e:
            raise Unavailable(f"{self.origin(path)}: {e.strerror}") from None

    def _bounded(self, p: Path, rel: str) -> bytes:
        """The file's bytes, refused beyond MAX_READ (a sparse file is small on disk, huge when read)."""
        with open(p, "rb") as f:
            data = f.read(MAX_READ + 1)
        if len(data) > MAX_READ:
            raise Unavailable(f"{self.origin(rel)} is larger than {MAX_READ >> 20} MiB; not read")
        return data

    def listdir(self, path: str) -> list[str]:
        p = self._file(path)
        listed = self._listings.get(path.strip("/"))
        if not p.is_dir() and listed is None:
            raise self._missing(path)
        present = {x.name for x in p.iterdir()} if p.is_dir() else set()
        return sorted(present | set(listed or []))

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> str:
        return self.read_text(f"cmd/{cmd_file(argv)}")

    def environ(self) -> dict[str, str]:
        env = self._json("env.json", None, expect=dict)
        if env is None:
            raise self._missing("env.json")
        return {str(k): str(v) for k, v in env.items()}

    def nvml(self) -> dict[str, Any]:
        data = self._json("nvml.json", None, expect=dict)
        if data is None:
            raise self._missing("nvml.json")
        if "error" in data:
            raise Unavailable(f"{data['error']} (at capture)")
        return data

    def python_info(self) -> dict[str, Any]:
        data = self._json("python.json", None, expect=dict)
        if data is None:
            raise self._missing("python.json")
        return data

    def _shape(self, rel: str, data: dict[str, Any], ok: Callable[[Any], bool], must: str) -> None:
        for k, v in data.items():
            if not ok(v):
                raise InputError(f"{self.origin(rel)}: the value of {k!r} must be {must}", hint=RECAPTURE)

    def _json(self, rel: str, default: Any, expect: type) -> Any:
        try:
            p = self._file(rel)
        except Unavailable as e:
            raise InputError(f"{self.origin(rel)} points outside the bundle", hint=RECAPTURE) from e
        if not p.is_file():
            return default
        try:
            # bounded like every JSON from elsewhere: depth, digits, NaN (jsonload)
            data = jsonload.loads(self._bounded(p, rel).decode("utf-8"), self.origin(rel))
        except Unavailable as e:
            raise InputError(e.reason, hint=RECAPTURE) from None
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read {self.origin(rel)}: {e}", hint=RECAPTURE) from None
        except InputError as e:
            raise InputError(e.message, hint=RECAPTURE) from None
        if not isinstance(data, expect):
            raise InputError(f"{self.origin(rel)} is not a JSON {'object' if expect is dict else expect.__name__}",
                             hint=RECAPTURE)
        return data
