import pytest
from fakes import FakeHost
from hypothesis import given, settings
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.probes.collector import run_probes
from perfstack.probes.limits import (
    LIMIT_NAMES,
    limits,
    parse_limits,
    parse_status,
    process,
)

# /proc/self/limits as a stock distribution shell hands it out: memlock at 64 KiB, nofile at 1024.
LIMITS = """\
Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max file size             unlimited            unlimited            bytes     
Max data size             unlimited            unlimited            bytes     
Max stack size            8388608              unlimited            bytes     
Max core file size        0                    unlimited            bytes     
Max resident set          unlimited            unlimited            bytes     
Max processes             2063467              2063467              processes 
Max open files            1024                 1048576              files     
Max locked memory         65536                65536                bytes     
Max address space         unlimited            unlimited            bytes     
Max file locks            unlimited            unlimited            locks     
Max pending signals       2063467              2063467              signals   
Max msgqueue size         819200               819200               bytes     
Max nice priority         0                    0                    
Max realtime priority     0                    0                    
Max realtime timeout      unlimited            unlimited            us        
"""

STATUS = """\
Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
Tgid:\t48213
Ngid:\t0
Pid:\t48213
PPid:\t48190
TracerPid:\t0
Uid:\t1000\t1000\t1000\t1000
Gid:\t1000\t1000\t1000\t1000
FDSize:\t256
Groups:\t4 24 27 1000 
VmPeak:\t 9061480 kB
VmSize:\t 8995944 kB
VmLck:\t       0 kB
VmPin:\t       0 kB
VmHWM:\t 2178652 kB
VmRSS:\t 2163372 kB
VmSwap:\t  524288 kB
HugetlbPages:\t       0 kB
Threads:\t41
Cpus_allowed:\tffffffff,ffffffff,ffffffff,ffffffff,ffffffff,ffffffff,ffffffff
Cpus_allowed_list:\t0-55,112-167
Mems_allowed:\t00000000,00000003
Mems_allowed_list:\t0-1
voluntary_ctxt_switches:\t1532
nonvoluntary_ctxt_switches:\t87
"""


def test_reads_every_limit():
    f = run_probes(FakeHost(files={"/proc/self/limits": LIMITS}), [limits])
    assert f["limits.memlock"].value == {"soft": 65536, "hard": 65536, "units": "bytes"}
    assert f["limits.nofile"].value == {"soft": 1024, "hard": 1048576, "units": "files"}
    assert f["limits.cpu"].value["soft"] == "unlimited"
    assert f["limits.nice"].value == {"soft": 0, "hard": 0, "units": ""}
    assert f["limits.memlock"].source == "/proc/self/limits"
    assert all(f[f"limits.{k}"].available for k in LIMIT_NAMES.values())


def test_reads_process_status():
    f = run_probes(FakeHost(files={"/proc/self/status": STATUS}), [process])
    assert f["proc.cpus_allowed"].value == list(range(56)) + list(range(112, 168))
    assert f["proc.mems_allowed"].value == [0, 1]
    assert f["proc.vm_swap_bytes"].value == 524288 * 1024


def test_kernel_thread_status_without_vmswap_is_missing_that_field():
    f = run_probes(FakeHost(files={"/proc/self/status": "Name:\tkthreadd\nPid:\t2\nCpus_allowed_list:\t0-7\n"}),
                   [process])
    assert f["proc.cpus_allowed"].available
    assert "no VmSwap line" in f["proc.vm_swap_bytes"].reason


def test_absent_files_are_missing_with_reason():
    f = run_probes(FakeHost(), [limits, process])
    assert "absent" in f["limits.memlock"].reason and "absent" in f["limits.nofile"].reason
    assert "absent" in f["proc.vm_swap_bytes"].reason


def test_garbage_live_is_not_available_with_reason():
    f = run_probes(FakeHost(files={"/proc/self/limits": "Max locked memory 64\n",
                                   "/proc/self/status": STATUS.replace("0-55,112-167", "0-55,x")}), [limits, process])
    assert "/proc/self/limits is missing the 'Limit" in f["limits.memlock"].reason
    assert "/proc/self/status is not in the expected format" in f["proc.cpus_allowed"].reason


@pytest.mark.parametrize("path, text", [("/proc/self/limits", LIMITS.replace("65536                65536", "lots")),
                                        ("/proc/self/status", STATUS.replace("524288 kB", "524288 MB"))])
def test_garbage_in_bundle_is_an_input_error_naming_the_file(path, text):
    with pytest.raises(InputError, match=f"bundle file {path.lstrip('/')} is"):
        run_probes(FakeHost(files={path: text}, kind="bundle"), [limits, process])


@given(st.text())
def test_parsers_return_their_type_or_raise(text):
    for parse in (parse_limits, parse_status):
        try:
            assert isinstance(parse(text), dict)
        except ValueError:
            pass


@settings(max_examples=50)
@given(st.text(), st.sampled_from(["/proc/self/limits", "/proc/self/status"]))
def test_bundle_garbage_only_ever_raises_input_error(text, path):
    files = {"/proc/self/limits": LIMITS, "/proc/self/status": STATUS, path: text}
    try:
        f = run_probes(FakeHost(files=files, kind="bundle"), [limits, process])
    except InputError as e:
        assert path.lstrip("/") in e.message
    else:
        assert not any(k.startswith("probe.") for k in f)
