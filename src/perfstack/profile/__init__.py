"""perfstack profile: read torch.profiler traces (or run a script under the profiler: capture.py),
analyse them (trace.py → analyze.py) and rank findings by the time a fix would recover (rules.py).
``summary.profile_run(paths)`` is the entry point that returns a Run."""

import sys
import types
from typing import Any

from perfstack.profile.api import Profile, profile

__all__ = ["Profile", "profile"]


class _CallableModule(types.ModuleType):
    """Lets ``with perfstack.profile(steps=3) as p:`` work although perfstack.profile is also this
    package: importing any submodule rebinds the attribute to the package, so the package itself
    must be callable."""

    def __call__(self, *args: Any, **kwargs: Any) -> Profile:
        return profile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
