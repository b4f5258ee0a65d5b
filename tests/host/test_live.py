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


def test_nvml_without_a_driver_is_unavailable_not_an_exception():
    host = LiveHost()
    try:
        data = host.nvml()
    except Unavailable as e:
        assert e.reason
    else:
        assert isinstance(data["gpus"], list)
