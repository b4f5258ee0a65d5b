"""Bundles come from elsewhere: reads are bounded and contained, and a half-written one is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeHost

from perfstack.cli.main import main
from perfstack.errors import InputError
from perfstack.host import MAX_READ, Unavailable
from perfstack.host import capture as recorder
from perfstack.host.bundle import BundleHost
from perfstack.host.capture import RecordingHost, write

TOP_LEVEL = ("env.json", "nvml.json", "python.json", "unavailable.json", "listdir.json", "meta.json")


def _sparse(p: Path, size: int) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as f:
        f.truncate(size)  # no blocks on disk; a whole read would still return `size` bytes


def _open_all(root: Path) -> None:
    """Open the bundle and ask for everything it answers from a top-level file."""
    host = BundleHost(root)
    for ask in (host.environ, host.nvml, host.python_info):
        try:
            ask()
        except Unavailable:
            pass


def _recording() -> RecordingHost:
    rec = RecordingHost(FakeHost(files={f"/proc/f{i}": f"{i}\n" for i in range(20)}, env={"A": "1"},
                                 nvml_data={"gpus": []}, pyinfo={"torch": None}))
    for i in range(20):
        rec.read_text(f"/proc/f{i}")
    rec.environ(), rec.nvml(), rec.python_info()
    return rec


@pytest.mark.parametrize("after", [0, 5, 19])
def test_interrupted_capture_leaves_nothing_that_looks_like_a_bundle(tmp_path, monkeypatch, after):
    calls = {"n": 0}
    real = recorder.Redactor.text

    def interrupt(self, s):
        calls["n"] += 1
        if calls["n"] > after:
            raise KeyboardInterrupt
        return real(self, s)

    monkeypatch.setattr(recorder.Redactor, "text", interrupt)
    with pytest.raises(KeyboardInterrupt):
        write(_recording(), tmp_path / "b", {"tool_version": "t"})
    assert list(tmp_path.iterdir()) == []  # neither the bundle nor the temporary folder


def test_capture_into_an_existing_empty_directory_completes_and_says_so(tmp_path):
    (tmp_path / "b").mkdir()
    write(_recording(), tmp_path / "b", {"tool_version": "t"})
    assert json.loads((tmp_path / "b" / "meta.json").read_text())["complete"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]
    assert BundleHost(tmp_path / "b").read_text("/proc/f3") == "3\n"


def test_bundle_marked_incomplete_is_refused_naming_the_cause(tmp_path, capsys):
    b = tmp_path / "b"
    write(_recording(), b, {"tool_version": "t"})
    meta = json.loads((b / "meta.json").read_text())
    (b / "meta.json").write_text(json.dumps(dict(meta, complete=False)))
    assert main(["doctor", "--bundle", str(b)]) == 2
    assert "incomplete" in capsys.readouterr().err


@pytest.mark.parametrize("content", [{}, {"README.md": "notes", "src/x.py": "", "data.tar.gz": ""}])
def test_a_directory_that_is_not_a_bundle_is_refused(tmp_path, capsys, content):
    """An empty folder, a folder of something else or an archive's folder not yet unpacked: each would
    otherwise be audited as a machine where nothing could be read ('no NVIDIA GPU seen', exit 0)."""
    for rel, text in content.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert main(["doctor", "--bundle", str(tmp_path), "-q"]) == 2
    err = capsys.readouterr().err
    assert "is not a bundle" in err and "internal error" not in err


@pytest.mark.parametrize("entry,text", [("meta.json", "{}"), ("env.json", "{}"), ("proc/sys/vm/swappiness", "10\n"),
                                        ("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")])
def test_a_bundle_with_any_of_its_files_is_audited(tmp_path, entry, text):
    (tmp_path / entry).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / entry).write_text(text)
    assert main(["doctor", "--bundle", str(tmp_path), "-q", "--fail-on", "never"]) == 0


def test_oversized_bundle_file_is_not_read_and_is_named(tmp_path):
    _sparse(tmp_path / "proc/cpuinfo", 64 << 20)
    (tmp_path / "proc/meminfo").write_bytes(b"x" * MAX_READ)  # exactly the cap: still read
    host = BundleHost(tmp_path)
    with pytest.raises(Unavailable, match=r"proc/cpuinfo is larger than 8 MiB"):
        host.read_text("/proc/cpuinfo")
    assert len(host.read_text("/proc/meminfo")) == MAX_READ
    _sparse(tmp_path / "cmd/dmesg.txt", 64 << 20)
    with pytest.raises(Unavailable, match=r"cmd/dmesg.txt is larger"):
        host.run(["dmesg"])


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_oversized_top_level_json_is_an_input_error(tmp_path, name):
    _sparse(tmp_path / name, 64 << 20)
    with pytest.raises(InputError, match=rf"{name} is larger than 8 MiB"):
        _open_all(tmp_path)


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_json_may_not_point_outside_the_bundle(tmp_path, name):
    secret = tmp_path / "mine.json"
    secret.write_text(json.dumps({"AWS_SECRET": "s3cr3t", "gpus": [], "complete": True}))
    b = tmp_path / "b"
    b.mkdir()
    (b / name).symlink_to(secret)
    with pytest.raises(InputError, match=rf"{name} points outside the bundle"):
        _open_all(b)


def test_cli_names_the_file_that_points_outside(tmp_path, capsys):
    secret = tmp_path / "mine.json"
    secret.write_text(json.dumps({"HOME_TOKEN": "s3cr3t"}))
    b = tmp_path / "b"
    b.mkdir()
    (b / "env.json").symlink_to(secret)
    assert main(["doctor", "--bundle", str(b), "--json"]) == 2
    captured = capsys.readouterr()
    assert "s3cr3t" not in captured.out + captured.err and "env.json" in captured.err
