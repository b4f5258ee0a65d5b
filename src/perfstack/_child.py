"""What the two children that run a user's script share (the profile's bootstrap and the trial's arm): run
the script or module as ``python script.py`` would, and end as it would. Standard library only: each
child is run by file path and loads this file by path, so that nothing of perfstack is imported into the
user's process."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from typing import Any, Optional


def run(cfg: dict[str, Any], done: type[BaseException], ours: tuple[str, ...]) -> tuple[int, Optional[BaseException]]:
    """Run ``cfg``'s script (or module) as ``__main__`` with its arguments; (exit code, the exception that
    ended it, if any). ``done`` (raised by the child itself once it has what it needs) ends it with 0;
    ``sys.exit("message")`` prints the message, as Python does; a traceback shows the script's frames only
    (not those of ``ours``, this module or runpy)."""
    try:
        if "module" in cfg:
            sys.argv = [cfg["module"], *cfg["args"]]
            sys.path[0] = os.getcwd()
            runpy.run_module(cfg["module"], run_name="__main__", alter_sys=True)
        else:
            script = cfg["script"]
            sys.argv = [script, *cfg["args"]]
            sys.path[0] = os.path.dirname(os.path.abspath(script))  # what 'python script.py' does
            runpy.run_path(script, run_name="__main__")
    except done:
        return 0, None
    except SystemExit as e:
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
        return (e.code if isinstance(e.code, int) else 0 if e.code is None else 1), None
    except BaseException as e:
        print_user_traceback(e, ours)
        return (130 if isinstance(e, KeyboardInterrupt) else 1), e
    return 0, None


def print_user_traceback(e: BaseException, ours: tuple[str, ...]) -> None:
    """The traceback Python would print for the script, without the children's and runpy's frames."""
    skip = {os.path.abspath(p) for p in (*ours, __file__, runpy.__file__)}
    tb = e.__traceback__
    while tb is not None and (os.path.abspath(tb.tb_frame.f_code.co_filename) in skip
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen")):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)
