"""Files perfstack writes for the user (-o, --html, --fix-script, saved Runs): one rule for all.

``check`` runs before the work, so that a typo in a path costs a second, not a finished audit; it
refuses what cannot end well (a missing folder, a directory, a device such as /dev/full, a
dangling symlink, a file or folder without write permission). ``write`` replaces the file in one
step: the text goes to a temporary file beside it that is renamed over the target, so a full disk
or an interruption leaves the previous file as it was, never a truncated one.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from perfstack.errors import OutputError

CANNOT = "cannot write {path}: {why}"


def check(path: str | os.PathLike[str]) -> None:
    """Raise OutputError when ``path`` cannot take a file written by ``write``."""
    p = Path(path)
    if str(path) == "":
        raise OutputError("an empty output file name", hint="give a file name")
    target = _target(p)
    try:
        st = target.stat()
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(CANNOT.format(path=path, why=e.strerror or e)) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(CANNOT.format(path=path, why="it is a directory"), hint="give a file name")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(CANNOT.format(path=path, why="it is not a regular file"),
                              hint="give the name of a file to create or replace")
        if not os.access(target, os.W_OK):
            raise OutputError(CANNOT.format(path=path, why="permission denied"), hint="give a file you can write")
    folder = target.parent
    if not folder.is_dir():
        raise OutputError(CANNOT.format(path=path, why=f"folder {folder} does not exist"),
                          hint=f"create it first (mkdir -p {folder}) or give another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(CANNOT.format(path=path, why=f"no permission to create files in {folder}"),
                          hint="give a path in a folder you can write")


def check_new_dir(path: str | os.PathLike[str]) -> None:
    """Raise OutputError unless ``path`` can become a new directory (``capture DIR``): absent or an
    empty directory, in an existing folder this user can create it in. A missing folder above it is
    refused, as ``check`` refuses one for a file: a typo in a path should not make a tree of folders."""
    p = Path(path)
    if str(path) == "":
        raise OutputError("an empty directory name", hint="give a directory for the bundle")
    if p.is_symlink() and not p.exists():
        raise OutputError(CANNOT.format(path=path, why=f"it is a dangling symlink (to {os.readlink(p)})"),
                          hint="remove the link or give another directory")
    if p.exists():
        if not p.is_dir():
            raise OutputError(CANNOT.format(path=path, why="it exists and is not a directory"),
                              hint="give a new directory for the bundle")
        try:
            with os.scandir(p) as entries:
                empty = next(entries, None) is None
        except OSError as e:
            raise OutputError(CANNOT.format(path=path, why=e.strerror or e)) from None
        if not empty:
            raise OutputError(CANNOT.format(path=path, why="it is a directory that is not empty"),
                              hint="give a new directory for the bundle")
    folder = Path(os.path.abspath(p)).parent
    if not folder.exists():
        raise OutputError(CANNOT.format(path=path, why=f"folder {folder} does not exist"),
                          hint=f"create it first (mkdir -p {folder}) or give another path")
    if not folder.is_dir():
        raise OutputError(CANNOT.format(path=path, why=f"{folder} is not a directory"))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(CANNOT.format(path=path, why=f"no permission to create files in {folder}"),
                          hint="give a path in a folder you can write")


def check_all(*paths: str | os.PathLike[str] | None) -> None:
    """``check`` each given path, and refuse two outputs that name the same file."""
    seen: dict[str, str] = {}
    for path in paths:
        if path is None:
            continue
        check(path)
        key = os.path.normcase(os.path.abspath(_target(Path(path))))
        if key in seen:
            raise OutputError(f"two outputs name the same file: {seen[key]} and {path}",
                              hint="give each output its own file")
        seen[key] = str(path)


def write(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically; on failure the old file is untouched."""
    target = _target(Path(path))
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except OSError:
        mode = None
    try:
        # 0o666 less the umask, as open() would create it; an existing file keeps its permissions
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise OutputError(CANNOT.format(path=path, why=e.strerror or e)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise OutputError(CANNOT.format(path=path, why=e.strerror or e), hint="the previous file, if any, "
                              "is unchanged") from None
        raise


def _target(p: Path) -> Path:
    """The file a write lands in: a symlink's target (the link stays), refused when it dangles."""
    if p.is_symlink():
        real = Path(os.path.realpath(p))
        if not real.exists():
            raise OutputError(CANNOT.format(path=p, why=f"it is a dangling symlink (to {os.readlink(p)})"),
                              hint="remove the link or give another file name")
        return real
    return p
