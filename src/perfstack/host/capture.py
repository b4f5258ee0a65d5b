"""Record what the probes read from the live machine into a bundle, redacted.

``RecordingHost`` wraps a live host: every answer passes through unchanged and is also kept,
along with the reason for every read that failed. ``write`` then redacts serials, UUIDs,
hostnames and secret-looking environment variables and lays the bundle out as BundleHost
expects. Bundles get attached to bug reports, so redaction errs on the side of removing.

What is kept is decided by what the checks read, not by what looks secret (``Keep``): the values of
the environment variables, kernel command-line parameters and mount options the probes and rules
read (each list kept beside the code that reads it, gathered by the capture command); every other
one is written by its name only, its value ``<not-kept>``. Value patterns (redact.text) remain a
second net over everything that is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from perfstack import redact
from perfstack.errors import InputError, UsageError
from perfstack.host import Host, HostKind, Unavailable, cmd_file

UUID = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
XML_SECRET_TAGS = re.compile(r"<(serial|board_id|gpu_module_id|module_id)>([^<]*)</\1>")
HOSTNAME_FILES = ("/proc/sys/kernel/hostname", "/etc/hostname")
REDACTED = "REDACTED"
NOT_KEPT = redact.NOT_KEPT
MOUNT_FILES = {"proc/self/mountinfo": (5, -1), "proc/self/mounts": (3,), "proc/mounts": (3,), "etc/mtab": (3,)}
CMDLINE_FILE = "proc/cmdline"

T = TypeVar("T")


@dataclass(frozen=True)
class Keep:
    """The values a capture keeps; everything else is written as its name with the value NOT_KEPT."""

    env_prefixes: tuple[str, ...] = ()
    env_names: frozenset[str] = frozenset()
    cmdline: frozenset[str] = frozenset()  # kernel command-line parameters (iommu, intel_iommu, ...)
    mount_options: frozenset[str] = frozenset()  # options with a value (size, rsize, ...)

    def env(self, name: str) -> bool:
        return name in self.env_names or name.startswith(self.env_prefixes)


def _options(text: str, keep: frozenset[str]) -> str:
    """A comma-separated option list with the value of every option not in ``keep`` left out."""
    return ",".join(o if "=" not in o or o.split("=", 1)[0] in keep else f"{o.split('=', 1)[0]}={NOT_KEPT}"
                    for o in text.split(","))


@dataclass
class RecordingHost:
    inner: Host
    files: dict[str, str] = field(default_factory=dict)  # bundle-relative path -> text
    listings: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] | None = None
    nvml_answers: dict[str, Any] | None = None
    pyinfo: dict[str, Any] | None = None
    kind: HostKind = "live"

    @property
    def python_source(self) -> str:
        return self.inner.python_source

    def bad_file(self, name: str, detail: str) -> InputError | None:
        return self.inner.bad_file(name, detail)

    def _keep(self, rel: str, fn: Callable[[], T]) -> T:
        try:
            value = fn()
        except Unavailable as e:
            self.failed[rel] = e.reason
            raise
        return value

    def start(self, commands: Any) -> None:
        start = getattr(self.inner, "start", None)
        if start is not None:
            start(commands)

    def read_text(self, path: str) -> str:
        text = self._keep(path.lstrip("/"), lambda: self.inner.read_text(path))
        self.files[path.lstrip("/")] = text
        return text

    def listdir(self, path: str) -> list[str]:
        names = self._keep(path.lstrip("/"), lambda: self.inner.listdir(path))
        self.listings[path.lstrip("/")] = names
        return names

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> str:
        rel = f"cmd/{cmd_file(argv)}"
        out = self._keep(rel, lambda: self.inner.run(argv, timeout))
        self.files[rel] = out
        return out

    def environ(self) -> dict[str, str]:
        self.env = self._keep("env.json", self.inner.environ)
        return self.env

    def nvml(self) -> dict[str, Any]:
        try:
            self.nvml_answers = self.inner.nvml()
        except Unavailable as e:
            self.nvml_answers = {"error": e.reason}
            raise
        return self.nvml_answers

    def python_info(self) -> dict[str, Any]:
        self.pyinfo = self._keep("python.json", self.inner.python_info)
        return self.pyinfo


class Redactor:
    """Replaces every identifying string found while capturing, consistently across files."""

    def __init__(self, rec: RecordingHost, keep: Keep | None = None) -> None:
        self.keep = keep  # None: every value is kept (and scrubbed)
        self.literal: dict[str, str] = {}
        for path in HOSTNAME_FILES:
            name = rec.files.get(path.lstrip("/"), "").strip()
            if name:
                self.literal[name] = "redacted-host"
                self.literal.setdefault(name.split(".")[0], "redacted-host")
        if rec.env and rec.env.get("HOSTNAME"):
            self.literal.setdefault(rec.env["HOSTNAME"], "redacted-host")
        for gpu in (rec.nvml_answers or {}).get("gpus", []):
            serial = gpu.get("serial")
            if isinstance(serial, str) and len(serial) >= 4:
                self.literal[serial] = REDACTED
        self.uuids: dict[str, str] = {}
        self.count = 0

    def _uuid(self, m: re.Match[str]) -> str:
        full = m.group(0)
        if full not in self.uuids:
            n = len(self.uuids)
            self.uuids[full] = f"{m.group(1)}-00000000-0000-0000-0000-{n:012d}"
        return self.uuids[full]

    def text(self, s: str) -> str:
        before = s
        s = XML_SECRET_TAGS.sub(lambda m: f"<{m.group(1)}>{REDACTED}</{m.group(1)}>", s)
        s = UUID.sub(self._uuid, s)
        s = redact.text(s)  # credentials by value: URL userinfo, token shapes, key=value secrets
        for secret, repl in sorted(self.literal.items(), key=lambda kv: -len(kv[0])):
            # Short hostnames like "gpu1" would mangle unrelated text; only whole words.
            s = re.sub(rf"(?<![\w.-]){re.escape(secret)}(?![\w.-])", repl, s)
        self.count += s != before
        return s

    def env(self, env: dict[str, str]) -> dict[str, str]:
        def one(k: str, v: str) -> str:
            if self.keep is not None and not self.keep.env(k):
                return NOT_KEPT
            return REDACTED if redact.secret_name(k) else self.text(v)
        return {k: one(k, v) for k, v in sorted(env.items())}

    def file(self, rel: str, text: str) -> str:
        """A captured file as written: scrubbed (first, while a value that holds spaces, '--api-key KEY' or a
        PEM block, is still whole), then the values the checks do not read left out of the mount table and
        the kernel command line."""
        text = self.text(text)
        if self.keep is not None and rel in MOUNT_FILES:
            text = "\n".join(self._mount_line(line, MOUNT_FILES[rel]) for line in text.split("\n"))
        elif self.keep is not None and rel == CMDLINE_FILE:
            keep = self.keep.cmdline
            text = " ".join(w if "=" not in w or w.split("=", 1)[0] in keep else f"{w.split('=', 1)[0]}={NOT_KEPT}"
                            for w in text.split(" "))
        return text

    def _mount_line(self, line: str, fields: tuple[int, ...]) -> str:
        parts = line.split(" ")
        for i in fields:
            if len(parts) > (i if i >= 0 else -i - 1) + 1:
                parts[i] = _options(parts[i], self.keep.mount_options if self.keep else frozenset())
        return " ".join(parts)

    def json(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (REDACTED if k == "serial" and isinstance(v, str) else self.json(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value


def host_id(rec: RecordingHost) -> str:
    """A stable id for the machine that reveals nothing about it (for fleet views)."""
    seed = "".join(rec.files.get(p.lstrip("/"), "") for p in HOSTNAME_FILES)
    seed += (rec.env or {}).get("HOSTNAME", "")
    return hashlib.sha256(seed.encode()).hexdigest()[:12]


def write(rec: RecordingHost, out: str | Path, meta: dict[str, Any], keep: Keep | None = None) -> dict[str, int]:
    """Write the bundle; refuse to write into a non-empty directory (we never overwrite).

    The files go to a hidden sibling directory that is renamed to ``out`` only once every file is
    written, so an interrupted capture (Ctrl-C, a full disk) leaves no directory that looks like a
    bundle; it is removed on the way out. meta.json says ``complete: true`` as well, and lists every
    file of the bundle with its size and sha256 (``manifest``), for bundles that were copied or
    unpacked half-way: the doctor refuses one that says false or lacks a listed file (host.bundle)."""
    root = Path(out)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise UsageError(f"{out} exists and is not an empty directory", hint="give a new directory for the bundle")
    red = Redactor(rec, keep)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.partial-", dir=root.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # as mkdir would make it; mkdtemp makes it private
        counts = _write_files(rec, red, tmp, dict(meta, host_id=host_id(rec)))
        # rename(2) replaces an empty directory in one step; a non-empty one makes it fail.
        os.rename(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return counts


def _write_files(rec: RecordingHost, red: Redactor, root: Path, meta: dict[str, Any]) -> dict[str, int]:
    manifest: dict[str, dict[str, Any]] = {}

    def put(rel: str, text: str) -> None:
        # The manifest is of the bytes as written: redacted, exactly what the doctor will read.
        data = text.encode("utf-8")
        (root / rel).write_bytes(data)
        manifest[rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def dump(name: str, obj: Any) -> None:
        put(name, json.dumps(obj, indent=1, sort_keys=True) + "\n")

    dump("meta.json", dict(meta, complete=False))
    for rel, text in rec.files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        put(rel, red.file(rel, text))
    if rec.env is not None:
        dump("env.json", red.env(rec.env))
    if rec.nvml_answers is not None:
        dump("nvml.json", red.json(rec.nvml_answers))
    if rec.pyinfo is not None:
        dump("python.json", red.json(rec.pyinfo))
    if rec.listings:
        # Git keeps no empty directories, so listings live in a file rather than as mkdirs.
        dump("listdir.json", {k: v for k, v in sorted(rec.listings.items())})
    if rec.failed:
        dump("unavailable.json", {k: red.text(v) for k, v in sorted(rec.failed.items())})
    # Written last, so it can list every other file: its relative path, size and sha256 (hashing the
    # ~100 files of a capture, a few hundred KB, takes about a millisecond). The doctor checks it
    # before auditing, so a copy that lost or cut short some files is not audited as if whole.
    del manifest["meta.json"]
    dump("meta.json", dict(meta, complete=True, manifest=dict(sorted(manifest.items()))))
    return {"files": len(rec.files), "unavailable": len(rec.failed), "redacted_files": red.count,
            "gpu_uuids": len(red.uuids)}
