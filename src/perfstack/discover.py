"""Find the modules of a registry package, so a new module is never silently left out.

Probes, checks and benchmarks register themselves with a decorator when their module is imported.
Importing every submodule of the package (helpers included: they only define functions) is what
makes a new module count the moment it exists, with no hand-kept list to forget it in.
"""

from __future__ import annotations

import importlib
import pkgutil


def import_submodules(package: str) -> list[str]:
    """Import every public submodule of ``package`` (names starting with ``_`` are private helpers);
    returns their names, sorted."""
    pkg = importlib.import_module(package)
    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return names
