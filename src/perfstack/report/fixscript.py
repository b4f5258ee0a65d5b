"""--fix-script: the findings' fixes as a shell script the user reviews. perfstack never runs it."""

from __future__ import annotations

from perfstack.model import Run


def render_fix_script(run: Run) -> str:
    lines = [
        "#!/bin/sh",
        "# Fixes proposed by perfstack doctor. Review every line before running it; perfstack",
        "# changes nothing itself. Each command is safe to run twice. Most need root.",
        f"# Audited: {run.meta.get('source', '')} on {run.meta.get('created', '')}",
        "set -eu",
        "",
    ]
    manual = []
    for f in run.findings:
        label = f"{f.id}{f' [{f.subject}]' if f.subject else ''} ({f.severity.value})"
        if not f.fix_commands:
            manual.append(f"#   {label}: {f.fix}")
            continue
        lines.append(f"# {label}: {f.evidence}")
        if f.host_action:
            lines.append("# Run on the host, not inside the container:")
        lines += f.fix_commands
        lines.append("")
    if manual:
        lines += ["# Not scriptable; do by hand:"] + manual
    if len(lines) == 6 and not manual:
        lines.append("# Nothing to fix.")
    return "\n".join(lines).rstrip() + "\n"


