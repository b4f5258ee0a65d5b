import pytest
from fakes import FakeHost

from perfstack.errors import InputError
from perfstack.probes.collector import run_probes
from perfstack.probes.memory import memory


def test_reads_swappiness_and_thp():
    host = FakeHost(files={"/proc/sys/vm/swappiness": "60\n",
                           "/sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
                           "/sys/kernel/mm/transparent_hugepage/defrag": "always defer [madvise] never\n"})
    f = run_probes(host, [memory])
    assert f["kernel.swappiness"].value == 60
    assert f["kernel.thp_enabled"].value == "madvise"
    assert f["kernel.thp_enabled"].source == "/sys/kernel/mm/transparent_hugepage/enabled"


def test_garbage_live_is_not_available_with_reason():
    f = run_probes(FakeHost(files={"/proc/sys/vm/swappiness": "sixty"}), [memory])
    assert not f["kernel.swappiness"].available
    assert "not in the expected format" in f["kernel.swappiness"].reason
    assert "absent" in f["kernel.thp_enabled"].reason


def test_garbage_in_bundle_is_an_input_error_naming_the_file():
    host = FakeHost(files={"/sys/kernel/mm/transparent_hugepage/enabled": "madvise"}, kind="bundle")
    with pytest.raises(InputError, match="bundle file sys/kernel/mm/transparent_hugepage/enabled is missing"):
        run_probes(host, [memory])
