"""perfstack's entry point: parse, dispatch to one module per subcommand, map errors to exit codes."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import traceback
from typing import Any, Sequence

from rich.console import Console

from perfstack import __version__
from perfstack.cli import (
    bench,
    capture,
    diff,
    doctor,
    estimate,
    explain,
    fleet,
    loadtest,
    profile,
    report,
    try_,
)
from perfstack.errors import PerfstackError
from perfstack.report.inert import protect, visible

COMMANDS = (doctor, capture, bench, profile, try_, estimate, loadtest, fleet, report, diff, explain)

EPILOG = """exit codes: 0 done · 1 findings at or above --fail-on · 2 bad usage or input file ·
3 cannot run here · 4 internal error · 130 interrupted"""


def _common(p: argparse.ArgumentParser, suppress: bool) -> None:
    """The flags every command takes, before or after its name. The subcommands' copies default
    to SUPPRESS so that 'perfstack --debug report' is not undone by the subcommand's defaults."""
    d: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    p.add_argument("-q", "--quiet", action="store_true", help="findings and errors only, no progress", **d)
    p.add_argument("-v", "--verbose", action="count", help="more detail (-vv: every read)",
                   **(d or {"default": 0}))
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors", **d)
    p.add_argument("--no-color", action="store_true", help="plain text output", **d)


@functools.lru_cache(maxsize=1)
def build_parser() -> argparse.ArgumentParser:
    """The parser, built once per process: parsing leaves it as it was, and building it (eleven commands,
    each help text looked up through gettext) cost more than most commands' own work when main is
    called many times in one process (a program embedding perfstack, the test suite)."""
    common = argparse.ArgumentParser(add_help=False)
    _common(common, suppress=True)
    p = argparse.ArgumentParser(prog="perfstack", description="Find what costs your GPU machine its performance.",
                                epilog=EPILOG)
    _common(p, suppress=False)
    p.add_argument("--version", action="version", version=f"perfstack {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMANDS:
        mod.register(sub, common)
    return p


def _consoles(args: argparse.Namespace) -> tuple[Console, Console]:
    color = None if not args.no_color else False
    out = Console(no_color=color is False, highlight=False, soft_wrap=False)
    err = Console(stderr=True, no_color=color is False, highlight=False, quiet=args.quiet and not args.debug)
    protect(out, err)  # text from bundles, traces and Runs never reaches the terminal as control codes
    return out, err


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.WARNING, stream=sys.stderr,
                        format="perfstack: %(message)s")
    out, err = _consoles(args)
    try:
        return int(args.func(args, out, err))
    except PerfstackError as e:
        if args.debug:
            traceback.print_exc()
        print(f"perfstack: error: {visible(e.message)}", file=sys.stderr)
        if e.hint:
            print(f"hint: {visible(e.hint)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("perfstack: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except MemoryError:
        # the input files (loaded and named by jsonload) or what is made of them do not fit this process:
        # bad input for this machine, not a fault to report
        if args.debug:
            traceback.print_exc()
        print("perfstack: error: out of memory: the input is too large for the memory this process may use",
              file=sys.stderr)
        print("hint: run it on a machine with more memory, or give it a smaller input", file=sys.stderr)
        return 2
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        print(f"perfstack: internal error: {type(e).__name__}: {visible(str(e))}", file=sys.stderr)
        print("hint: rerun with --debug and report it with the traceback", file=sys.stderr)
        return 4


def entry() -> None:
    raise SystemExit(main())
