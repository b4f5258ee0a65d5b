from fakes import facts
from hypothesis import given
from hypothesis import strategies as st

from perfstack.host import Unavailable
from perfstack.rules import CHECKS, load, run_check
from perfstack.rules.common import version_tuple
from perfstack.rules.runtime import (
    arch_list_entries,
    coverage,
    parse_arch,
)

load()

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000:19:00.0", "compute_capability": "9.0",
        "memory_total_bytes": 85520809984, "numa_node": 0}
ARCH_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # torch 2.11.0+cu130, recorded


def gpu(name, cc, index=0):
    return {**H100, "index": index, "name": name, "compute_capability": cc}


def base(**over):
    """A healthy H100 host as the other probes describe it."""
    values = dict(env={}, gpu__count=1, gpu__list=[H100], driver__cuda_version="13.0", driver__version="580.159.04",
                  python__torch="2.11.0+cu130", python__torch_cuda="13.0", python__arch_list=ARCH_CU130,
                  python__device_capabilities=["9.0"], python__packages={}, container__in_container=False)
    values.update(over)
    return facts(**values)


def run(check_id, **over):
    return run_check(CHECKS[check_id], base(**over))


# -- driver-toolkit-mismatch ------------------------------------------------------------------------
def test_toolkit_newer_major_than_driver_is_critical():
    found, res = run("driver-toolkit-mismatch", driver__cuda_version="12.2", driver__version="535.104.05")
    assert res.status == "found" and found[0].severity.value == "critical" and found[0].host_action
    assert "CUDA 13.0" in found[0].evidence and "up to 12.2" in found[0].evidence and "535.104.05" in found[0].evidence


def test_toolkit_newer_minor_is_a_warning_and_same_or_older_is_quiet():
    found, _ = run("driver-toolkit-mismatch", python__torch_cuda="12.8", driver__cuda_version="12.4")
    assert found[0].severity.value == "warning" and "minor-version compatibility" in found[0].evidence
    assert run("driver-toolkit-mismatch")[1].status == "passed"
    assert run("driver-toolkit-mismatch", python__torch_cuda="12.6")[1].status == "passed"


def test_toolkit_not_checked_or_not_applicable():
    _, res = run("driver-toolkit-mismatch", driver__cuda_version=Unavailable("nvidia-smi: command not found"))
    assert res.status == "not-checked" and "command not found" in res.reason
    _, res = run("driver-toolkit-mismatch", python__torch_cuda=Unavailable("torch is not importable"))
    assert res.status == "not-checked" and "not importable" in res.reason
    assert run("driver-toolkit-mismatch", python__torch_cuda=None)[1].status == "not-applicable"
    assert run("driver-toolkit-mismatch", gpu__count=0, gpu__list=[])[1].status == "not-applicable"


# -- torch-cuda-arch ----------------------------------------------------------------------------------
def test_arch_missing_is_critical_per_gpu():
    found, res = run("torch-cuda-arch", python__arch_list=["sm_80", "sm_86"],
                     gpu__list=[H100, gpu("NVIDIA H100 80GB HBM3", "9.0", 1)], gpu__count=2)
    assert res.status == "found" and [f.subject for f in found] == ["gpu0", "gpu1"]
    assert found[0].severity.value == "critical" and "sm_90" in found[0].evidence


def test_arch_ptx_only_is_a_warning():
    found, _ = run("torch-cuda-arch", python__arch_list=["sm_80", "sm_90", "compute_90"],
                   gpu__list=[gpu("NVIDIA B200", "10.0")])
    assert found[0].severity.value == "warning" and "PTX only" in found[0].evidence


def test_arch_covered_by_same_major_cubin_is_quiet():
    assert run("torch-cuda-arch")[1].status == "passed"
    assert run("torch-cuda-arch", gpu__list=[gpu("NVIDIA GeForce RTX 4090", "8.9")])[1].status == "passed"  # sm_86
    assert run("torch-cuda-arch", gpu__list=[gpu("NVIDIA B300", "10.3")])[1].status == "passed"  # sm_100


def test_arch_not_checked_without_arch_list_and_capability_falls_back_to_torch():
    _, res = run("torch-cuda-arch", python__arch_list=Unavailable("torch is not importable by /usr/bin/python3"))
    assert res.status == "not-checked" and "not importable" in res.reason
    found, _ = run("torch-cuda-arch", gpu__list=[{**H100, "compute_capability": None}],
                   python__device_capabilities=["12.0"], python__arch_list=["sm_90"])
    assert found[0].evidence.startswith("GPU 0 (cuda:0) is compute capability 12.0")
    _, res = run("torch-cuda-arch", gpu__list=Unavailable("x"), gpu__count=Unavailable("NVML not found"),
                 python__device_capabilities=Unavailable("y"))
    assert res.status == "not-applicable" and "NVML not found" in res.reason


def test_coverage_rules():
    assert coverage(["sm_90a"], (9, 0)) == "sass" and coverage(["sm_90a"], (10, 0)) is None
    assert coverage(["sm_80"], (8, 6)) == "sass" and coverage(["sm_86"], (8, 0)) is None
    assert coverage(["compute_80"], (9, 0)) == "ptx" and coverage(["compute_90a"], (10, 0)) is None
    assert coverage(["sm_100f"], (10, 3)) == "sass"
    assert parse_arch("sm_120") == ("sm", (12, 0), "") and parse_arch("gfx90a") is None


@given(st.lists(st.text(max_size=12), max_size=5), st.tuples(st.integers(0, 20), st.integers(0, 9)))
def test_coverage_total(arch, cc):
    assert coverage(arch, cc) in ("sass", "ptx", None)


@given(st.text())
def test_version_tuple_returns_ints_or_raises_value_error(text):
    try:
        v = version_tuple(text)
    except ValueError:
        return
    assert v and all(isinstance(p, int) for p in v)


# -- extension-arch-list ------------------------------------------------------------------------------
def test_extension_arch_list():
    found, _ = run("extension-arch-list", env={"TORCH_CUDA_ARCH_LIST": "8.0;8.6"})
    assert found[0].severity.value == "warning" and "no code" in found[0].evidence
    found, _ = run("extension-arch-list", env={"TORCH_CUDA_ARCH_LIST": "8.0 8.6+PTX"})
    assert found[0].severity.value == "info"
    for ok in ("9.0a", "Hopper", "8.0;9.0", "Mystery"):  # an unknown token keeps it quiet
        assert run("extension-arch-list", env={"TORCH_CUDA_ARCH_LIST": ok})[1].status == "passed"
    assert arch_list_entries("Ampere") == ["sm_80", "sm_86", "compute_86"]


@given(st.text())
def test_arch_list_entries_total(text):
    out = arch_list_entries(text)
    assert out is None or all(parse_arch(e) for e in out)


# -- caches ------------------------------------------------------------------------------------------
def test_cuda_jit_cache():
    found, _ = run("cuda-jit-cache", env={"CUDA_CACHE_DISABLE": "1"})
    assert found[0].severity.value == "info"
    found, _ = run("cuda-jit-cache", env={"CUDA_CACHE_DISABLE": "1"}, python__arch_list=["compute_80"])
    assert found[0].severity.value == "warning"
    found, _ = run("cuda-jit-cache", env={}, python__arch_list=["compute_80"], container__in_container=True)
    assert "container" in found[0].evidence
    found, _ = run("cuda-jit-cache", env={"CUDA_CACHE_PATH": "/tmp/nv"})
    assert found[0].severity.value == "info"
    assert run("cuda-jit-cache", env={"CUDA_CACHE_PATH": "/data/nv"})[1].status == "passed"
    assert run("cuda-jit-cache", env=Unavailable("env.json missing"))[1].status == "not-checked"


def test_inductor_cache():
    found, _ = run("inductor-cache", env={"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"})
    assert found[0].severity.value == "warning"
    found, _ = run("inductor-cache", env={}, container__in_container=True)
    assert found[0].severity.value == "info" and "/tmp/torchinductor_" in found[0].evidence
    assert run("inductor-cache", env={"TORCHINDUCTOR_CACHE_DIR": "/dev/shm/ind"})[0][0].severity.value == "info"
    assert run("inductor-cache", env={"TORCHINDUCTOR_CACHE_DIR": "/cache/inductor"},
               container__in_container=True)[1].status == "passed"
    assert run("inductor-cache", python__torch=None)[1].status == "not-applicable"


# -- environment left over from debugging -------------------------------------------------------------
def test_debug_env_names_each_variable():
    found, _ = run("debug-env-in-prod", env={"CUDA_LAUNCH_BLOCKING": "1", "TORCH_LOGS": "recompiles",
                                             "TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    assert {f.subject: f.severity.value for f in found} == {
        "CUDA_LAUNCH_BLOCKING": "warning", "TORCH_LOGS": "info", "TORCH_DISTRIBUTED_DEBUG": "warning"}
    assert run("debug-env-in-prod", env={"CUDA_LAUNCH_BLOCKING": "0"})[1].status == "passed"
    assert run("debug-env-in-prod", env=Unavailable("env.json missing"))[1].status == "not-checked"


def test_module_loading_and_max_connections():
    assert run("cuda-module-loading", env={"CUDA_MODULE_LOADING": "EAGER"})[1].status == "found"
    assert run("cuda-module-loading", env={"CUDA_MODULE_LOADING": "LAZY"})[1].status == "passed"
    assert run("cuda-device-max-connections", env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})[1].status == "found"
    assert run("cuda-device-max-connections", env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
               python__packages={"megatron-core": "0.14.0"})[1].status == "passed"


# -- CUDA_VISIBLE_DEVICES --------------------------------------------------------------------------
def four_gpus(**over):
    return dict(gpu__count=4, gpu__list=[gpu("NVIDIA H100 80GB HBM3", "9.0", i) for i in range(4)], **over)


def test_visible_devices_invalid_index_hides_the_rest():
    found, _ = run("cuda-visible-devices", env={"CUDA_VISIBLE_DEVICES": "0,7,1"}, **four_gpus())
    assert found[0].severity.value == "warning" and "GPU 7 does not exist" in found[0].evidence
    found, _ = run("cuda-visible-devices", env={"CUDA_VISIBLE_DEVICES": "5"}, **four_gpus())
    assert "no GPU is visible" in found[0].evidence
    found, _ = run("cuda-visible-devices", env={"CUDA_VISIBLE_DEVICES": ""}, **four_gpus())
    assert "hides all 4" in found[0].evidence


def test_visible_devices_subset_is_info_and_all_or_uuid_is_quiet():
    found, _ = run("cuda-visible-devices", env={"CUDA_VISIBLE_DEVICES": "2,3"}, **four_gpus())
    assert found[0].severity.value == "info" and "shows 2 of 4" in found[0].evidence
    assert run("cuda-visible-devices", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, **four_gpus())[1].status == "passed"
    uuid = {"CUDA_VISIBLE_DEVICES": "GPU-8b2c1f0e"}
    assert run("cuda-visible-devices", env=uuid, **four_gpus())[1].status == "passed"
    assert run("cuda-visible-devices", env={})[1].status == "passed"
    _, res = run("cuda-visible-devices", env={"CUDA_VISIBLE_DEVICES": "0"}, gpu__count=Unavailable("no driver"))
    assert res.status == "not-checked"


def test_visible_devices_mixed_models_want_pci_order():
    mixed = dict(gpu__count=2, gpu__list=[H100, gpu("NVIDIA A100-SXM4-80GB", "8.0", 1)])
    found, _ = run("cuda-visible-devices", env={"CUDA_VISIBLE_DEVICES": "1,0"}, **mixed)
    assert "CUDA_DEVICE_ORDER" in found[0].evidence
    assert run("cuda-visible-devices", env={"CUDA_VISIBLE_DEVICES": "1,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
               **mixed)[1].status == "passed"
