"""How probes turn host reads into facts.

A probe is a function ``(c: Collector) -> None`` registered with ``@probe``. It reads only
through ``c`` (and so only through the host seam) and records facts with ``c.put`` and
``c.missing``. Parse failures of a recorded bundle are the user's bad input and stop with a
clear error naming the file; on a live machine they become "not available" facts.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence, TypeVar

from perfstack.errors import InputError
from perfstack.host import Host, Unavailable, cmd_file
from perfstack.model import Fact, Facts

T = TypeVar("T")
Probe = Callable[["Collector"], None]
PROBES: list[Probe] = []


def probe(fn: Probe) -> Probe:
    # A probe's name is its id: a probe that breaks is recorded as the fact ``probe.<name>``.
    if any(p.__name__ == fn.__name__ for p in PROBES):
        raise ValueError(f"probe {fn.__name__} registered twice")
    PROBES.append(fn)
    return fn


class Malformed(ValueError):
    """A parser's complaint, phrased to follow "<file> is": e.g. "not valid XML (line 12)"."""


class Collector:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.facts = Facts()
        self._env: dict[str, str] | None = None
        self.env_missing = ""  # why env() is None: the host's reason

    # -- recording -------------------------------------------------------------------------
    def put(self, key: str, value: Any, source: str) -> None:
        self.facts.add(Fact(key, value, source))

    def missing(self, key: str, reason: str, source: str = "") -> None:
        self.facts.add(Fact.missing(key, reason, source))

    def missing_all(self, keys: Iterable[str], reason: str, source: str = "") -> None:
        for k in keys:
            self.missing(k, reason, source)

    # -- reading ---------------------------------------------------------------------------
    def text(self, path: str) -> str | None:
        """The file's text, or None when it cannot be read (use ``parsed`` to learn why)."""
        try:
            return self.host.read_text(path)
        except Unavailable:
            return None

    def listdir(self, path: str) -> list[str]:
        try:
            return self.host.listdir(path)
        except Unavailable:
            return []

    def parsed(self, path: str, parse: Callable[[str], T]) -> T:
        """Read and parse a file; raises Unavailable (live) or InputError (bundle) on failure."""
        return self._parse(lambda: self.host.read_text(path), parse, path)

    def first(self, paths: Sequence[str], parse: Callable[[str], T]) -> tuple[T, str]:
        """The first of several equivalent files that can be read: (parsed value, its path).
        Hand-made bundles often hold only one of them (/proc/mounts but no mountinfo). A bundle file
        that does not parse is still bad input (InputError), not a reason to look elsewhere."""
        reasons = []
        for path in paths:
            try:
                return self.parsed(path, parse), path
            except Unavailable as e:
                reasons.append(e.reason)
        raise Unavailable("; ".join(reasons) or "no file to read")

    def command(self, argv: Sequence[str], parse: Callable[[str], T], timeout: float = 10.0) -> T:
        return self._parse(lambda: self.host.run(argv, timeout), parse, f"cmd/{cmd_file(argv)}", " ".join(argv))

    def file(self, key: str, path: str, parse: Callable[[str], Any] = str.strip) -> Any:
        """Read one file into one fact; returns the value or None."""
        try:
            value = self.parsed(path, parse)
        except Unavailable as e:
            self.missing(key, e.reason, path)
            return None
        self.put(key, value, path)
        return value

    def file_first(self, key: str, paths: Sequence[str], parse: Callable[[str], Any] = str.strip) -> Any:
        """``file`` over the first readable of several equivalent files; the fact names the one read."""
        try:
            value, path = self.first(paths, parse)
        except Unavailable as e:
            self.missing(key, e.reason, paths[0])
            return None
        self.put(key, value, path)
        return value

    def _parse(self, read: Callable[[], str], parse: Callable[[str], T], rel: str, label: str | None = None) -> T:
        text = read()
        try:
            return parse(text)
        except Exception as e:  # parsers are pure functions of text: any exception means bad input
            detail = str(e) if isinstance(e, Malformed) else f"not in the expected format ({type(e).__name__}: {e})"
            refused = self.host.bad_file(rel.lstrip("/"), detail)
            if refused is not None:
                raise refused from None
            raise Unavailable(f"{label or rel} is {detail}") from None

    def env(self) -> dict[str, str] | None:
        if self._env is None:
            try:
                self._env = self.host.environ()
            except Unavailable as e:
                self._env, self.env_missing = None, e.reason
        return self._env


def run_probes(host: Host, probes: Sequence[Probe] = ()) -> Facts:
    """Run every probe; a probe that breaks costs only its own facts, recorded as an error."""
    c = Collector(host)
    for p in probes or PROBES:
        try:
            p(c)
        except InputError:
            raise
        except Exception as e:
            c.missing(f"probe.{p.__name__}", f"probe failed: {type(e).__name__}: {e}")
    return c.facts
