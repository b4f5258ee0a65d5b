"""perfstack: audit, measure, profile and estimate the AI compute stack."""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # ``perfstack.profile(...)`` without importing torch-facing code until it is used.
    if name == "profile":
        import importlib
        return importlib.import_module("perfstack.profile")
    raise AttributeError(f"module 'perfstack' has no attribute {name!r}")
