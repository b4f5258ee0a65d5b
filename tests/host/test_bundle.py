import json

import pytest

from perfstack.errors import InputError
from perfstack.host import Unavailable, cmd_file
from perfstack.host.bundle import BundleHost


def make(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return BundleHost(tmp_path)


def test_files_mirror_absolute_paths(tmp_path):
    host = make(tmp_path, {"proc/meminfo": "MemTotal: 1 kB\n", "cmd/nvidia-smi-q-x.xml": "<x/>"})
    assert host.read_text("/proc/meminfo") == "MemTotal: 1 kB\n"
    assert host.run(["nvidia-smi", "-q", "-x"]) == "<x/>"
    assert host.listdir("/proc") == ["meminfo"]


def test_missing_file_is_unavailable_with_capture_reason(tmp_path):
    host = make(tmp_path, {"unavailable.json": json.dumps({"cmd/dmesg.txt": "dmesg: exit 1: Operation not permitted"})})
    with pytest.raises(Unavailable, match="Operation not permitted"):
        host.run(["dmesg"])
    with pytest.raises(Unavailable, match="proc/swaps not in bundle"):
        host.read_text("/proc/swaps")


def test_reads_cannot_escape_the_bundle(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "secret").write_text("x")
    with pytest.raises(Unavailable, match="outside the bundle"):
        BundleHost(tmp_path / "b").read_text("/../secret")


def test_bad_bundle_paths(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        BundleHost(tmp_path / "nope")
    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match="is a file"):
        BundleHost(tmp_path / "f")


@pytest.mark.parametrize("text,msg", [("[1, 2]", "not a JSON object"), ("{oops", "not valid JSON")])
def test_env_json_must_be_an_object(tmp_path, text, msg):
    host = make(tmp_path, {"env.json": text})
    with pytest.raises(InputError, match=f"bundle file env.json is {msg}"):
        host.environ()


def test_optional_json_absent_is_unavailable(tmp_path):
    host = make(tmp_path, {})
    for call in (host.environ, host.nvml, host.python_info):
        with pytest.raises(Unavailable):
            call()


def test_nvml_error_recorded_at_capture(tmp_path):
    host = make(tmp_path, {"nvml.json": json.dumps({"error": "NVML could not start: Driver Not Loaded"})})
    with pytest.raises(Unavailable, match="Driver Not Loaded"):
        host.nvml()


def test_cmd_file_names():
    assert cmd_file(["nvidia-smi", "topo", "-m"]) == "nvidia-smi-topo-m.txt"
    assert cmd_file(["lspci", "-vvv"]) == "lspci-vvv.txt"
    assert cmd_file(["ibstat", "--short"]) == "ibstat-short.txt"
