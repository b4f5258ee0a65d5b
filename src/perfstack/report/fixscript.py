"""--fix-script: the findings' fixes as a shell script the user reviews. perfstack never runs it.

The script may be run as root, and its values came from the audited machine or a bundle someone
else recorded. The rules build every command from quoted arguments (rules/shell.py); here, as the
last door, no line may carry a control character (a newline would start a new command, even
from inside a '#' comment) and every comment shows such characters escaped.
"""

from __future__ import annotations

from perfstack.model import Run
from perfstack.rules.shell import CONTROL, visible

HEADER = 6  # lines before the first fix


def render_fix_script(run: Run) -> str:
    inside = run.facts.value("container.in_container") is True
    lines = [
        "#!/bin/sh",
        "# Fixes proposed by perfstack doctor. Review every line before running it; perfstack",
        "# changes nothing itself. Each command is safe to run twice. Most need root.",
        visible(f"# Audited: {run.meta.source or ''} on {run.meta.created or ''}"),
        "set -eu",
        "",
    ]
    manual, on_host = [], []
    for f in run.findings:
        label = visible(f"{f.id}{f' [{f.subject}]' if f.subject else ''} ({f.severity.value})")
        refused = [c for c in f.fix_commands if CONTROL.search(c)]
        if not f.fix_commands or refused:
            why = f" (a command held a control character: {visible(refused[0])})" if refused else ""
            manual.append(f"#   {label}: {visible(f.fix)}{visible(why)}")
            continue
        if f.host_action and inside:
            # The audit ran in a container: these fail in here (read-only /proc/sys, no modprobe)
            # and, with set -e, would stop every fix after them.
            on_host += [f"#   {label}: {visible(f.evidence)}"] + [f"#     {c}" for c in f.fix_commands]
            continue
        lines.append(f"# {label}: {visible(f.evidence)}")
        if f.host_action:
            lines.append("# Run on the host, not inside a container:")
        lines += f.fix_commands
        lines.append("")
    if on_host:
        lines += ["# On the host, not inside this container (perfstack audited from inside one):"] + on_host + [""]
    if manual:
        lines += ["# Not scriptable; do by hand:"] + manual
    if len(lines) == HEADER and not manual:
        lines.append("# Nothing to fix.")
    return "\n".join(lines).rstrip() + "\n"
