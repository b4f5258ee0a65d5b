"""--fix-script from a hostile bundle: values are quoted arguments, never shell text."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfstack.cli.main import main
from perfstack.model import Facts, Fact, Finding, Run, Severity
from perfstack.records.meta import RunMeta
from perfstack.report.fixscript import render_fix_script
from perfstack.rules.shell import Abs, UnsafeValue, Under, lines, sh, write

sys.path.insert(0, str(Path(__file__).parent.parent / "fixtures"))
import variants  # noqa: E402

KNOWN = {"echo", "mount", "sysctl", "touch", "sed", "printf", "nvidia-smi", "modprobe", "systemctl", "swapoff",
         "for", "do", "done", "if", "then", "fi", "set"}
HOST_LINE = "#     "


def _script(tmp_path: Path, edit) -> str:
    bundle = variants.healthy(tmp_path / "b")
    edit(bundle)
    script = tmp_path / "fix.sh"
    main(["doctor", "--bundle", str(bundle), "--fix-script", str(script), "--fail-on", "never", "-q"])
    return script.read_text()


def _commands(script: str) -> list[list[str]]:
    """Every simple command the script would run, or lists for the host (commented out when the
    audit ran in a container, for the user to copy), as argv (POSIX shell syntax via shlex)."""
    out = []
    for line in script.splitlines():
        line = line[len(HOST_LINE):] if line.startswith(HOST_LINE) else line
        if not line.strip() or line.startswith("#"):
            continue
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lex.whitespace_split = True
        argv: list[str] = []
        for tok in lex:
            if tok in ("&&", "||", ";", "|"):
                out.append(argv)
                argv = []
            else:
                argv.append(tok)
        out.append(argv)
    return [a for a in out if a]


def _add_mount(b: Path, mountpoint_field: str) -> None:
    """An ext4 mount with strict atime (mount-noatime fires) at a mount point as mountinfo escapes it."""
    p = b / "proc/self/mountinfo"
    p.write_text(p.read_text().rstrip("\n") + f"\n90 27 8:17 / {mountpoint_field} rw,strictatime - ext4 /dev/sdb1 rw\n")


@pytest.mark.skipif(not shutil.which("sh"), reason="needs /bin/sh")
def test_newline_in_a_mount_point_cannot_start_a_command(tmp_path):
    text = _script(tmp_path, lambda b: _add_mount(b, r"/data\012touch\040/tmp/X\012#x"))
    assert subprocess.run(["sh", "-n", "-c", text]).returncode == 0
    assert not any(a[0] == "touch" and "/tmp/X" in a for a in _commands(text))
    assert all(a[0] in KNOWN for a in _commands(text)), _commands(text)
    # No mount line at all for it: the finding says to do it by hand, the name shown escaped.
    assert not any(a[:1] == ["mount"] for a in _commands(text))
    assert "mount-noatime" in text and r"/data\ntouch /tmp/X\n#x" in text


@pytest.mark.parametrize("field, mountpoint", [
    ("/srv/a;touch${IFS}/tmp/Y;#", "/srv/a;touch${IFS}/tmp/Y;#"),
    (r"/mnt/My\040Data", "/mnt/My Data"),
    ("/srv/$(id)`id`'q'", "/srv/$(id)`id`'q'"),
])
def test_mount_point_is_one_argument(tmp_path, field, mountpoint):
    text = _script(tmp_path, lambda b: _add_mount(b, field))
    mounts = [a for a in _commands(text) if a[0] == "mount"]
    assert mounts == [["mount", "-o", "remount,noatime", "--", mountpoint]]


@pytest.mark.parametrize("field", ["--all", "-a", "-o", "data", "--", ""])
def test_a_mount_point_that_is_not_an_absolute_path_is_never_an_option(tmp_path, field):
    # before: a mount point of '--all' became 'mount -o remount,noatime --all' in the root fix script
    text = _script(tmp_path, lambda b: _add_mount(b, field or r"\040"))
    mounts = [a for a in _commands(text) if a[0] == "mount"]
    assert all(a[a.index("--") + 1].startswith("/") for a in mounts), mounts
    assert not any(field and field in a for a in mounts), mounts


def test_every_path_argument_in_a_fix_is_absolute_and_after_double_dash(tmp_path):
    def edit(b: Path) -> None:
        variants.nvme_bfq(b)
        _add_mount(b, "/data")
    text = _script(tmp_path, edit)
    for argv in _commands(text):
        paths = [i for i, a in enumerate(argv) if a.startswith("/") and argv[0] not in ("echo", "printf", "for")]
        if argv[0] in ("mount", "touch", "sed") and paths:
            assert "--" in argv and argv.index("--") < paths[0], argv
    assert ["mount", "-o", "remount,noatime", "--", "/data"] in _commands(text)


def test_block_device_name_is_quoted_and_cannot_leave_sys_block(tmp_path):
    def edit(b: Path) -> None:
        variants.nvme_bfq(b)
        evil = "nvme1n1;touch${IFS}Z"
        q = b / "sys/block" / evil / "queue"
        q.mkdir(parents=True)
        (q / "scheduler").write_text("none [bfq]\n")
        (q / "rotational").write_text("0\n")
    text = _script(tmp_path, edit)
    targets = [line.removeprefix(HOST_LINE) for line in text.splitlines() if "queue/scheduler" in line]
    assert "echo none > '/sys/block/nvme1n1;touch${IFS}Z/queue/scheduler'" in targets
    assert not any(a[0] == "touch" for a in _commands(text))


def test_comments_cannot_be_broken_by_evidence_or_subject():
    run = Run(meta=RunMeta(source="bundle x\nrm -rf /", created="now"),
              findings=[Finding(id="x", layer="storage", severity=Severity.INFO, title="t",
                                evidence="a\nrm -rf ~\r\x1b]0;title\x07", fix="f\nreboot", subject="s\nhalt",
                                fix_commands=["echo ok"]),
                        Finding(id="y", layer="storage", severity=Severity.INFO, title="t", evidence="e",
                                fix="do\nreboot", fix_commands=["echo a\nreboot"])])
    text = render_fix_script(run)
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert body == ["set -eu", "echo ok"]
    assert not any(c in text.replace("\n", "") for c in "\r\x1b\x07")


def test_host_only_fixes_are_commented_out_when_audited_inside_a_container():
    facts = Facts({"container.in_container": Fact("container.in_container", True)})
    run = Run(facts=facts, findings=[
        Finding(id="swappiness", layer="kernel", severity=Severity.WARNING, title="t", evidence="vm.swappiness = 60",
                fix="f", fix_commands=["sysctl -w vm.swappiness=10"], host_action=True),
        Finding(id="alloc", layer="allocator", severity=Severity.INFO, title="t", evidence="e", fix="f",
                fix_commands=["echo container-side"])])
    text = render_fix_script(run)
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert body == ["set -eu", "echo container-side"]
    assert "#     sysctl -w vm.swappiness=10" in text
    # Outside a container the same finding is a command to run.
    facts_host = Facts({"container.in_container": Fact("container.in_container", False)})
    run.facts = facts_host
    assert "sysctl -w vm.swappiness=10" in [ln for ln in render_fix_script(run).splitlines()]


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "\x1b[2J", "a\x00", "\x9b31m"])
def test_builders_refuse_control_characters(value):
    with pytest.raises(UnsafeValue):
        lines([sh("mount", "-o", "remount,noatime", value)])
    with pytest.raises(UnsafeValue):
        lines([write(value, "/x")])


@pytest.mark.parametrize("name", ["..", ".", "", "../../etc/cron.d/x", "a/b"])
def test_paths_under_a_directory_take_one_plain_name(name):
    with pytest.raises(UnsafeValue):
        lines([write("none", Under("/sys/block", name, "queue/scheduler"))])


def test_write_uses_printf_for_values_echo_would_interpret():
    assert lines([write("-n", "/x"), write("a\\c", "/y")]) == ["printf '%s\\n' -n > /x", "printf '%s\\n' 'a\\c' > /y"]


def test_mountinfo_decodes_only_the_kernels_escapes():
    from perfstack.probes.mounts import parse_mountinfo
    [m] = parse_mountinfo(r"1 2 8:1 / /a\040b\011c\134d\033e\012f rw - ext4 /dev/x rw")
    assert m["mountpoint"] == "/a b\tc\\d\\033e\nf"  # \033 is not a kernel escape: kept as written


@pytest.mark.parametrize("path", ["--all", "-a", "relative/dir", "", "~/x"])
def test_path_arguments_must_be_absolute(path):
    with pytest.raises(UnsafeValue):
        lines([sh("mount", "-o", "remount,noatime", Abs(path))])
    with pytest.raises(UnsafeValue):
        lines([write("x", path)])
    assert lines([sh("touch", Abs("/etc/x"))]) == ["touch -- /etc/x"]
