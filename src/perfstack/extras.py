"""How to install one of perfstack's optional extras, said in a way that works where this perfstack came from.

Installed from a package index, ``pip install 'perfstack[loadtest]'`` is right. Installed from a checkout (an
editable install of the source tree, which is how perfstack is used before it is published), no index
carries it, and the command that works names the checkout: ``pip install -e '/path/to/perfstack[loadtest]'``.
"""

from __future__ import annotations

import shlex
from pathlib import Path


def checkout() -> Path | None:
    """The source tree this perfstack runs from (src layout: <root>/src/perfstack), or None."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "src" / "perfstack").is_dir() else None


def install_hint(extra: str) -> str:
    root = checkout()
    if root is None:
        return f"pip install 'perfstack[{extra}]'"
    return f"pip install -e {shlex.quote(f'{root}[{extra}]')}"
