"""Every file a command writes follows one rule: checked before the work (exit 2, one line naming
the path), replaced atomically after it, and a failed write never costs the finished report."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfstack import outfile
from perfstack.cli.main import main
from perfstack.errors import OutputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUNDLE = FIXTURES / "bundles" / "h100-idle"
RUN = FIXTURES / "runs" / "h100-doctor.json"
ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def _commands(target: str) -> dict[str, list[str]]:
    return {
        "doctor -o": ["doctor", "--bundle", str(BUNDLE), "-o", target],
        "doctor --html": ["doctor", "--bundle", str(BUNDLE), "--html", target],
        "doctor --fix-script": ["doctor", "--bundle", str(BUNDLE), "--fix-script", target],
        "bench -o": ["bench", "host", "-o", target],
        "report -o": ["report", str(RUN), "-o", target],
        "diff -o": ["diff", str(RUN), str(RUN), "-o", target],
        "estimate -o": ["estimate", "infer", "-m", "gpt2", "-o", target],
        "profile -o": ["profile", "--trace", str(FIXTURES / "traces" / "h100" / "control.pt.trace.json.gz"),
                       "-o", target],
    }


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("perfstack:")]
    assert len(lines) == 1, err
    assert "internal error" not in err and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("name", list(_commands("x")))
def test_missing_folder_is_exit_2_before_the_work(name, tmp_path, capsys):
    target = tmp_path / "no-such-folder" / "out.file"
    assert main(_commands(str(target))[name]) == 2
    cap = capsys.readouterr()
    line = _one_error_line(cap.err)
    assert str(target.parent) in line and "does not exist" in line
    assert cap.out == ""  # refused before the work, nothing printed
    assert not target.parent.exists()


@pytest.mark.parametrize("name", ["doctor -o", "report -o", "estimate -o"])
def test_device_is_refused(name, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    assert main(_commands("/dev/full")[name]) == 2
    assert "not a regular file" in _one_error_line(capsys.readouterr().err)


def test_dangling_symlink_is_refused(tmp_path, capsys):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "gone" / "target.json")
    assert main(["report", str(RUN), "-o", str(link)]) == 2
    assert "dangling symlink" in _one_error_line(capsys.readouterr().err)
    assert link.is_symlink()


def test_symlink_to_a_file_replaces_the_file_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.md"
    real.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    assert main(["report", str(RUN), "-o", str(link), "-q"]) == 0
    assert link.is_symlink() and real.read_text().startswith("# ")


def test_a_directory_is_refused(tmp_path, capsys):
    assert main(["doctor", "--bundle", str(BUNDLE), "--fix-script", str(tmp_path)]) == 2
    assert "is a directory" in _one_error_line(capsys.readouterr().err)


def test_two_outputs_naming_one_file_are_refused(tmp_path, capsys):
    p = str(tmp_path / "same")
    assert main(["doctor", "--bundle", str(BUNDLE), "-o", p, "--html", p]) == 2
    assert "same file" in _one_error_line(capsys.readouterr().err)


@pytest.mark.skipif(ROOT, reason="root may write anywhere")
def test_unwritable_folder_and_file(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "old.json").write_text("{}")
    (ro / "old.json").chmod(0o444)
    ro.chmod(0o555)
    try:
        assert main(["report", str(RUN), "-o", str(ro / "new.md")]) == 2
        assert "no permission" in _one_error_line(capsys.readouterr().err)
        assert main(["report", str(RUN), "-o", str(ro / "old.json")]) == 2
        assert "permission denied" in _one_error_line(capsys.readouterr().err)
    finally:
        ro.chmod(0o755)


def test_markup_in_a_path_is_printed_as_is(tmp_path, capsys):
    (tmp_path / "fix[").mkdir()
    target = tmp_path / "fix[" / "x][bold].sh"
    assert main(["doctor", "--bundle", str(BUNDLE), "--fix-script", str(target)]) in (0, 1)
    assert target.read_text().startswith("#!")
    assert str(target) in capsys.readouterr().err


def test_capture_checks_its_directory_before_reading_the_machine(tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    (tmp_path / "file").write_text("x")
    for target, why in ((link, "dangling symlink"), (tmp_path / "full", "not empty"),
                        (tmp_path / "file", "not a directory")):
        assert main(["capture", str(target)]) == 2
        assert why in _one_error_line(capsys.readouterr().err)
    if os.path.exists("/dev/full"):
        assert main(["capture", "/dev/full"]) == 2
        assert "not a directory" in _one_error_line(capsys.readouterr().err)


def test_capture_refuses_a_missing_parent_folder_as_o_does(tmp_path, capsys):
    missing = tmp_path / "no-such-folder"
    assert main(["report", str(RUN), "-o", str(missing / "run.json")]) == 2
    said_for_o = _one_error_line(capsys.readouterr().err)
    assert main(["capture", str(missing / "bundle")]) == 2
    said_for_capture = _one_error_line(capsys.readouterr().err)
    for said in (said_for_o, said_for_capture):
        assert f"folder {missing} does not exist" in said
    assert not missing.exists()  # nothing made on the way


def test_a_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    target.write_text("previous")
    target.chmod(0o640)

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match="No space left"):
        outfile.write(target, "new" * 1000)
    assert target.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temporary file left behind
    monkeypatch.undo()
    outfile.write(target, "new")
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640


def test_a_failed_write_after_the_work_still_prints_the_report(tmp_path, monkeypatch, capsys):
    target = tmp_path / "run.json"

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["doctor", "--bundle", str(BUNDLE), "-o", str(target)]) == 2
    cap = capsys.readouterr()
    assert "perfstack doctor" in cap.out  # the finished audit is shown
    assert "No space left on device" in _one_error_line(cap.err)
    assert not target.exists()
