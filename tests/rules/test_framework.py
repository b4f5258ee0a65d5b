from fakes import facts

from perfstack.host import Unavailable
from perfstack.rules import CHECKS, load, run_check

load()

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000:19:00.0", "compute_capability": "9.0",
        "memory_total_bytes": 85520809984, "numa_node": 0}


def base(**over):
    values = dict(gpu__count=1, gpu__list=[H100], python__torch="2.11.0+cu130", python__torch_cuda="13.0",
                  python__torch_hip=None, python__cuda_available=True, python__errors={}, python__packages={},
                  python__executable="/opt/torch/.venv/bin/python3")
    values.update(over)
    return facts(**values)


def run(check_id, **over):
    return run_check(CHECKS[check_id], base(**over))


def test_torch_missing():
    found, _ = run("torch-missing", python__torch=None, python__executable="/usr/bin/python3")
    assert found[0].evidence == "torch is not importable by /usr/bin/python3"
    found, _ = run("torch-missing", python__torch=None, python__errors={"torch": "OSError: libcudart.so.12"})
    assert found[0].evidence.endswith(": OSError: libcudart.so.12")
    assert run("torch-missing")[1].status == "passed"
    assert run("torch-missing", python__torch=Unavailable("python probe printed no JSON"))[1].status == "not-checked"


def test_torch_cpu_build():
    found, _ = run("torch-cpu-build", python__torch="2.11.0+cpu", python__torch_cuda=None)
    assert found[0].severity.value == "critical" and "CPU-only build" in found[0].evidence
    found, _ = run("torch-cpu-build", python__torch="2.5.1+rocm6.2", python__torch_cuda=None, python__torch_hip="6.2")
    assert "ROCm build" in found[0].evidence
    assert run("torch-cpu-build")[1].status == "passed"
    assert run("torch-cpu-build", gpu__count=0, python__torch_cuda=None)[1].status == "not-applicable"
    assert run("torch-cpu-build", gpu__count=Unavailable("no driver"))[1].status == "not-applicable"


def test_torch_cuda_unavailable_carries_torch_s_reason():
    reason = "CUDA initialization: The NVIDIA driver on your system is too old (found version 12020)."
    found, _ = run("torch-cuda-unavailable", python__cuda_available=False, python__errors={"cuda_available": reason})
    assert found[0].severity.value == "critical" and found[0].evidence.endswith(reason)
    found, _ = run("torch-cuda-unavailable", python__errors={"cuda_init": "ValueError: Unrecognized key 'foo'"})
    assert "initialisation failed" in found[0].evidence
    assert run("torch-cuda-unavailable")[1].status == "passed"
    assert run("torch-cuda-unavailable", python__torch_cuda=None)[1].status == "not-applicable"
    assert run("torch-cuda-unavailable", python__cuda_available=Unavailable("x"))[1].status == "not-checked"


def test_low_precision_opportunity():
    found, _ = run("low-precision-opportunity")
    assert found[0].severity.value == "info" and "FP8 Tensor Cores" in found[0].evidence
    b200 = {**H100, "name": "NVIDIA B200", "compute_capability": "10.0"}
    found, _ = run("low-precision-opportunity", gpu__list=[b200], python__packages={"transformer-engine": "2.8.0"})
    assert "FP8 and FP4" in found[0].evidence and "transformer-engine 2.8.0 is installed" in found[0].evidence
    a100 = {**H100, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}
    assert run("low-precision-opportunity", gpu__list=[a100])[1].status == "not-applicable"
    assert run("low-precision-opportunity", gpu__count=0, gpu__list=[])[1].status == "not-applicable"
