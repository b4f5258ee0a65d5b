"""perfstack capture DIR: record what the doctor reads into a portable, redacted bundle."""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from datetime import datetime, timezone

from rich.console import Console

from perfstack import __version__, outfile
from perfstack.host import capture as recorder
from perfstack.host.live import LiveHost
from perfstack.probes import collect


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("capture", parents=[common], help="record this machine into a bundle directory",
                       description="Record everything the doctor reads into DIR, redacted (serials, UUIDs, "
                                   "hostnames, secret-looking environment variables). Audit it anywhere "
                                   "with 'perfstack doctor --bundle DIR'.")
    p.add_argument("dir", metavar="DIR", help="a new or empty directory, in a folder that exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    outfile.check_new_dir(args.dir)  # before reading the machine, by the rule every output follows
    rec = recorder.RecordingHost(LiveHost())
    with err.status("reading the machine…") if err.is_terminal and not args.quiet else nullcontext():
        collect(rec)
    meta = {"tool_version": __version__, "captured": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    stats = recorder.write(rec, args.dir, meta)
    out.print(f"wrote bundle {args.dir}: {stats['files']} files, {stats['unavailable']} reads not available, "
              f"{stats['redacted_files']} files redacted, {stats['gpu_uuids']} GPU UUIDs replaced", markup=False)
    out.print(f"audit it with: perfstack doctor --bundle {args.dir}", markup=False)
    return 0

