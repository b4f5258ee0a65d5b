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
                                             complete (false while capture is still writing),
                                             manifest ({path: {size, sha256}} of every other file)

Every read is bounded (host.MAX_READ) and stays inside DIR: a bundle comes from someone else.

The manifest is checked when the bundle is opened (``Manifest``). A listed file that is missing, or
cut short (shorter than captured and no longer ending at a line end, or emptied), means the copy is
partial (scp interrupted, a truncated tarball): the bundle is refused, naming the files, unless the
caller accepts a partial bundle on purpose; then those files read as not available ("... missing
in this partial bundle"), never as the shorter text a cut copy holds. A listed file that is whole but differs (another size or hash) was edited after capture:
that is allowed, because bundles are edited by hand on purpose (a user redacting further before
sharing it), and it is said in the report's header rather than refused. Files not listed (added by
hand) are read as any other. A bundle without a manifest (older, or built by hand) is audited as it
is, and the header says that its completeness was not checked.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from perfstack import jsonload
from perfstack.errors import InputError
from perfstack.host import MAX_READ, HostKind, Unavailable, cmd_file

RECAPTURE = "re-capture with 'perfstack capture DIR' on the GPU host, or fix the file by hand"
# What a bundle is made of. 'perfstack capture' writes most of them, a hand-built bundle at least one.
ENTRIES = ("meta.json", "proc", "sys", "etc", "cmd", "env.json", "nvml.json", "python.json", "listdir.json",
           "unavailable.json")


PARTIAL_FLAG = "--partial-bundle"
SHA256 = re.compile(r"[0-9a-f]{64}")
HASH_BUDGET = 256 << 20  # bytes hashed at most while checking one manifest (a real bundle is well under 1 MiB)


def _names(paths: list[str], n: int = 3) -> str:
    # One line whatever the names hold; other control characters are spelled out where it is shown.
    shown = ", ".join(p.replace("\n", "\\n").replace("\r", "\\r") for p in paths[:n])
    return f"({shown}{', ...' if len(paths) > n else ''})"


def _valid_entry(want: Any) -> bool:
    return (isinstance(want, dict) and type(want.get("size")) is int and want["size"] >= 0
            and isinstance(want.get("sha256"), str) and SHA256.fullmatch(want["sha256"]) is not None)


@dataclass
class Manifest:
    """What a bundle's files are against what its capture wrote (meta.json's ``manifest``)."""

    listed: int = 0
    missing: list[str] = field(default_factory=list)  # absent: the copy is partial
    cut_short: list[str] = field(default_factory=list)  # a copy interrupted inside them
    edited: list[str] = field(default_factory=list)  # whole but not as captured: changed by hand

    @property
    def lost(self) -> list[str]:
        return self.missing + self.cut_short

    @classmethod
    def check(cls, host: "BundleHost", entries: Any) -> "Manifest":
        where = host.origin("meta.json")
        if not isinstance(entries, dict):
            raise InputError(f"{where}: 'manifest' must be an object of path: {{size, sha256}}", hint=RECAPTURE)
        m = cls(listed=len(entries))
        budget = HASH_BUDGET
        for rel, want in entries.items():
            if not _valid_entry(want):
                raise InputError(f"{where}: the manifest entry of {rel!r} must be "
                                 '{"size": bytes, "sha256": hex digest}', hint=RECAPTURE)
            try:
                p = host._file(rel)
                size = p.stat().st_size if p.is_file() else None
            except Unavailable:
                raise InputError(f"{where}: the manifest lists {rel!r}, outside the bundle", hint=RECAPTURE) from None
            except (OSError, ValueError):  # unreadable, or a name no file can have (a NUL)
                size = None
            if size is None:
                m.missing.append(rel)
            elif size == want["size"]:
                # Beyond what is ever read (MAX_READ) or the budget, the size has to do.
                if size <= min(MAX_READ, budget):
                    budget -= size
                    if _sha256(p) != want["sha256"]:
                        m.edited.append(rel)
            elif size < want["size"] and _cut_short(p, size):
                m.cut_short.append(rel)
            else:
                m.edited.append(rel)
        return m

    def _lost_text(self) -> str:
        parts = [f"{len(names)} {'is' if len(names) == 1 else 'are'} {what} {_names(names)}"
                 for names, what in ((self.missing, "missing"), (self.cut_short, "cut short")) if names]
        return ", ".join(parts)

    def _edited_text(self) -> str:
        n = len(self.edited)
        return f"{n} {'was' if n == 1 else 'were'} edited since {_names(self.edited)}"

    def refusal(self, root: Path) -> InputError:
        edited = f"; {self._edited_text()}" if self.edited else ""
        return InputError(f"bundle {root} is incomplete: of the {self.listed} files its capture wrote, "
                          f"{self._lost_text()}{edited}: copy it again",
                          hint=f"or audit what is there with {PARTIAL_FLAG} (findings that need a missing file "
                               "say so)")

    def summary(self) -> str:
        """One line for the report's header."""
        if not self.lost and not self.edited:
            return f"all {self.listed} files as captured (manifest checked)"
        parts = []
        if self.lost:
            parts.append(f"{self._lost_text()}: read as not available ({PARTIAL_FLAG})")
        if self.edited:
            parts.append(f"{self._edited_text()}: read as {'it is' if len(self.edited) == 1 else 'they are'} now")
        return f"of the {self.listed} files captured, " + "; ".join(parts)


def _sha256(p: Path) -> str | None:
    h = hashlib.sha256()
    try:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _cut_short(p: Path, size: int) -> bool:
    """A file shorter than captured is cut short (a copy interrupted in it) when it is empty or no
    longer ends at a line end: every file perfstack captures does, and an editor keeps it so. A
    shorter file that ends a line is taken as edited (a user removed lines)."""
    if size == 0:
        return True
    try:
        with open(p, "rb") as f:
            f.seek(size - 1)
            return f.read(1) != b"\n"
    except OSError:
        return True


def bad_file(name: str, detail: str) -> InputError:
    """A bundle file that is not what 'perfstack capture' writes: bad input, named, with the way out."""
    return InputError(f"bundle file {name} is {detail}", hint=RECAPTURE)


class BundleHost:
    kind: HostKind = "bundle"
    python_source = "python.json"

    def bad_file(self, name: str, detail: str) -> InputError | None:
        return bad_file(name, detail)

    def __init__(self, root: str | Path, partial: bool = False) -> None:
        """``partial``: audit a bundle some of whose captured files are missing or cut short (they read
        as missing from this partial bundle) instead of refusing it."""
        self.root = Path(root)
        if not self.root.exists():
            raise InputError(f"bundle {root} does not exist", hint="give the directory 'perfstack capture DIR' wrote")
        if not self.root.is_dir():
            raise InputError(f"bundle {root} is a file, not a directory",
                             hint="a bundle is the directory 'perfstack capture DIR' wrote (unpack it first if archived)")
        self._lost: dict[str, str] = {}  # captured files this copy lost or holds cut short: how (partial=True)
        meta = self._json("meta.json", {}, expect=dict)
        if meta.get("complete") is False:
            raise InputError(f"bundle {root} is incomplete: its capture was interrupted before every file was written",
                             hint="capture it again with 'perfstack capture DIR'")
        self.manifest: Manifest | None = None
        if "manifest" in meta:
            self.manifest = Manifest.check(self, meta["manifest"])
            if self.manifest.lost and not partial:
                raise self.manifest.refusal(self.root)
            self._lost = {rel.lstrip("/"): how for names, how in ((self.manifest.missing, "missing"),
                                                                   (self.manifest.cut_short, "cut short"))
                          for rel in names}
        self._failed: dict[str, str] = self._json("unavailable.json", {}, expect=dict)
        self._listings: dict[str, list[str]] = self._json("listdir.json", {}, expect=dict)
        # their shapes, checked here once: a listing of "abc" would be three entries a, b, c
        self._shape("unavailable.json", self._failed, lambda v: isinstance(v, str), "a string (why the read failed)")
        self._shape("listdir.json", self._listings, lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                    "a list of entry names")

    @property
    def integrity(self) -> str:
        """How complete the bundle is, in one line for the report's header."""
        if self.manifest is None:
            return "no manifest (an older or hand-built bundle): completeness not checked"
        return self.manifest.summary()

    @classmethod
    def given(cls, root: str | Path, partial: bool = False) -> "BundleHost":
        """The bundle a user named (doctor --bundle DIR). A directory that holds nothing a bundle has
        (a wrong path, an archive not yet unpacked) is refused: audited, it would read as a machine
        where nothing could be read, with exit 0. An empty bundle stays readable through the
        constructor, for tests and hand-built bundles."""
        host = cls(root, partial)
        if not any((host.root / name).exists() or (host.root / name).is_symlink() for name in ENTRIES):
            raise InputError(f"{root} is not a bundle: it holds none of meta.json, env.json, proc/, sys/, cmd/",
                             hint="give the directory 'perfstack capture DIR' wrote (unpack it first if archived)")
        return host

    def origin(self, rel: str) -> str:
        return f"bundle file {rel.lstrip('/')}"

    def _missing(self, rel: str) -> Unavailable:
        rel = rel.lstrip("/")
        if rel in self._lost:
            return Unavailable(f"{rel} {self._lost[rel]} in this partial bundle (the capture wrote it)")
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
        if not p.is_file() or path.lstrip("/") in self._lost:
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
        data: dict[str, Any] | None = self._json("nvml.json", None, expect=dict)
        if data is None:
            raise self._missing("nvml.json")
        if "error" in data:
            raise Unavailable(f"{data['error']} (at capture)")
        return data

    def python_info(self) -> dict[str, Any]:
        data: dict[str, Any] | None = self._json("python.json", None, expect=dict)
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
        if not p.is_file() or rel in self._lost:
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
