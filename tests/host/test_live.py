import sys

import pytest

from perfstack.host import Unavailable
from perfstack.host.live import LiveHost


def test_hung_command_times_out_instead_of_hanging():
    with pytest.raises(Unavailable, match="timed out after 0.3 s"):
        LiveHost().run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.3)


def test_missing_command_and_failing_command():
    with pytest.raises(Unavailable, match="command not found"):
        LiveHost().run(["perfstack-no-such-tool"])
    with pytest.raises(Unavailable, match="exit 3: boom"):
        LiveHost().run([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"])


def test_unreadable_paths_are_unavailable(tmp_path):
    with pytest.raises(Unavailable, match="absent"):
        LiveHost().read_text(str(tmp_path / "nope"))
    with pytest.raises(Unavailable):
        LiveHost().read_text(str(tmp_path))  # a directory


def test_python_info_describes_this_interpreter():
    info = LiveHost().python_info()
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    assert "torch" in info  # None when torch is absent; a version string when present


def test_nvml_without_a_driver_is_unavailable_not_an_exception(monkeypatch):
    # What nvidia-ml-py raises on a machine without the driver (no libnvidia-ml.so.1), whether or not
    # this machine has one.
    pynvml = pytest.importorskip("pynvml")

    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    with pytest.raises(Unavailable, match="NVML could not start: NVML Shared Library Not Found"):
        LiveHost().nvml()


def test_nvml_without_nvidia_ml_py_is_unavailable_not_an_exception(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with pytest.raises(Unavailable, match="nvidia-ml-py is not installed"):
        LiveHost().nvml()
