"""The command-line entry point, kept light: for the commands that audit the live machine it starts
the Python probe's child (which imports torch, the slowest thing the doctor waits for) before the
rest of perfstack and rich are imported, so that the two overlap."""

from __future__ import annotations

import sys

LIVE_COMMANDS = ("doctor", "capture", "bench")


def reads_live_machine(argv: list[str]) -> bool:
    """``perfstack doctor`` / ``capture`` / ``bench`` without ``--bundle``, and not asking for help."""
    words = [a for a in argv if not a.startswith("-")]
    return bool(words) and words[0] in LIVE_COMMANDS and not any(
        a == "--bundle" or a.startswith("--bundle=") or a in ("-h", "--help") for a in argv)


def entry() -> None:
    if reads_live_machine(sys.argv[1:]):
        from perfstack.host.live import start_python_probe_early

        start_python_probe_early()
    from perfstack.cli.main import main

    raise SystemExit(main())
