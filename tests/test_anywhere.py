"""The doctor runs anywhere: a hung nvidia-smi, no driver, no torch, garbage files."""

from fakes import FakeHost

from perfstack.audit import audit, summary
from perfstack.host import Unavailable
from perfstack.rules import select_checks


def run(host):
    r = audit(host, select_checks(), "test")
    assert not [c for c in r.checks if c.reason.startswith("internal error")]
    return r


def test_hung_nvidia_smi_becomes_a_reason_not_a_hang():
    host = FakeHost(cmds={("nvidia-smi", "-q", "-x"): Unavailable("nvidia-smi -q -x: timed out after 10 s")},
                    pyinfo={"python": "3.11.7", "torch": None})
    r = run(host)
    assert not r.facts["gpu.count"].available
    assert "timed out" in r.facts["gpu.count"].reason
    gpu_checks = [c for c in r.checks if c.id == "gpu-persistence-mode"]
    assert gpu_checks[0].status in ("not-applicable", "not-checked") and "timed out" in gpu_checks[0].reason


def test_no_torch_is_a_fact_and_an_info():
    r = run(FakeHost(pyinfo={"python": "3.11.7", "torch": None}))
    assert r.facts["python.torch"].value is None
    assert [f.id for f in r.findings if f.id == "torch-missing"]


def test_garbage_everywhere_live_still_completes():
    junk = "\x00\xff garbage ]]] [[[ 12abc\n"
    paths = ["/proc/meminfo", "/proc/self/limits", "/proc/self/status", "/proc/cpuinfo", "/proc/swaps",
             "/proc/mounts", "/proc/self/mountinfo", "/proc/self/cgroup", "/proc/sys/vm/swappiness",
             "/sys/kernel/mm/transparent_hugepage/enabled", "/proc/modules", "/proc/cmdline"]
    host = FakeHost(files={p: junk for p in paths},
                    cmds={("nvidia-smi", "-q", "-x"): "<nvidia_smi_log><gpu", ("dmesg",): junk,
                          ("nvidia-smi", "topo", "-m"): junk},
                    env={"PYTORCH_CUDA_ALLOC_CONF": junk}, pyinfo={"torch": 3})
    r = run(host)
    s = summary(r)
    assert s["checks"] == len(select_checks())
    assert "not valid XML" in r.facts["gpu.count"].reason
