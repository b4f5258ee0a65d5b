"""perfstack capture DIR: record what the doctor reads into a portable, redacted bundle."""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from typing import Sequence
from datetime import datetime, timezone

from rich.console import Console

from perfstack import __version__, outfile
from perfstack.host import capture as recorder
from perfstack.host.live import LiveHost
from perfstack.probes import collect


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("capture", parents=[common], help="record this machine into a bundle directory",
                       description="Record everything the doctor reads into DIR, redacted: the values of the "
                                   "environment variables, kernel parameters and mount options the checks read are "
                                   "kept, every other one by its name only; serials, UUIDs, hostnames and anything "
                                   "that looks like a credential are removed. Audit it anywhere with "
                                   "'perfstack doctor --bundle DIR'.")
    p.add_argument("dir", metavar="DIR", help="a new or empty directory, in a folder that exists")
    p.add_argument("--keep-env", action="append", default=[], metavar="NAME",
                   help="also keep the value of this environment variable (repeatable; its value is still "
                        "scrubbed of anything that looks like a credential)")
    p.set_defaults(func=run)


def keep(extra_env: Sequence[str] = ()) -> recorder.Keep:
    """What a capture keeps the values of: what the probes and rules read, each list kept beside the code
    that reads it, and the variables the user names."""
    from perfstack.probes import container, environment, python_env
    from perfstack.rules import kernel, storage
    return recorder.Keep(env_prefixes=environment.KEEP_ENV,
                         env_names=frozenset(container.KEEP_ENV + python_env.KEEP_ENV + tuple(extra_env)),
                         cmdline=frozenset(kernel.KEEP_CMDLINE),
                         mount_options=frozenset(container.KEEP_MOUNT_OPTIONS + storage.KEEP_MOUNT_OPTIONS))


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    outfile.check_new_dir(args.dir)  # before reading the machine, by the rule every output follows
    rec = recorder.RecordingHost(LiveHost())
    with err.status("reading the machine…") if err.is_terminal and not args.quiet else nullcontext():
        collect(rec)
    meta = {"tool_version": __version__, "captured": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    stats = recorder.write(rec, args.dir, meta, keep(args.keep_env))
    out.print(f"wrote bundle {args.dir}: {stats['files']} files, {stats['unavailable']} reads not available, "
              f"{stats['redacted_files']} files redacted, {stats['gpu_uuids']} GPU UUIDs replaced", markup=False)
    out.print(f"audit it with: perfstack doctor --bundle {args.dir}", markup=False)
    return 0

