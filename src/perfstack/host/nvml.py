"""NVML answers as one JSON-able dict, the same shape live and in a bundle's nvml.json.

Each per-GPU field holds the answer, or ``{"error": "<NVML error>"}`` when that call is not
supported or failed, so "not supported on this GPU" is data rather than an exception.
The nvidia-smi equivalent of each field is in the comment beside it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        value = fn(*args)
    except Exception as e:  # pynvml.NVMLError and friends; a missing symbol on an old driver too
        return {"error": str(e) or type(e).__name__}
    return value.decode() if isinstance(value, bytes) else value


def _gpu(nv: Any, i: int) -> dict[str, Any]:
    g: dict[str, Any] = {"index": i}
    try:
        h = nv.nvmlDeviceGetHandleByIndex(i)
    except Exception as e:  # a GPU that fell off the bus answers here with "Unknown Error" / GPU_IS_LOST
        g["error"] = str(e) or type(e).__name__
        return g
    c = lambda name, *a: _call(getattr(nv, name, _absent(name)), h, *a)  # noqa: E731
    g["name"] = c("nvmlDeviceGetName")  # --query-gpu=name
    g["uuid"] = c("nvmlDeviceGetUUID")
    g["serial"] = c("nvmlDeviceGetSerial")
    pci = c("nvmlDeviceGetPciInfo")
    g["pci_bus_id"] = pci if isinstance(pci, dict) else _text(getattr(pci, "busId", None))
    g["compute_capability"] = _list(c("nvmlDeviceGetCudaComputeCapability"))
    g["persistence_mode"] = c("nvmlDeviceGetPersistenceMode")  # 1 = enabled
    g["compute_mode"] = c("nvmlDeviceGetComputeMode")  # 0 default, 3 exclusive process
    g["mig_mode"] = _list(c("nvmlDeviceGetMigMode"))  # [current, pending]
    g["ecc_mode"] = _list(c("nvmlDeviceGetEccMode"))  # [current, pending]
    for kind, code in (("volatile", 0), ("aggregate", 1)):
        for err, ecode in (("corrected", 0), ("uncorrected", 1)):
            g[f"ecc_{kind}_{err}"] = c("nvmlDeviceGetTotalEccErrors", ecode, code)
    g["remapped_rows"] = _list(c("nvmlDeviceGetRemappedRows"))  # [corr, unc, pending, failure]
    g["clocks_event_reasons"] = c("nvmlDeviceGetCurrentClocksEventReasons")  # -q -d PERFORMANCE
    if isinstance(g["clocks_event_reasons"], dict):  # drivers before R535 only know the old name
        g["clocks_event_reasons"] = c("nvmlDeviceGetCurrentClocksThrottleReasons")
    g["app_clock_mhz"] = c("nvmlDeviceGetApplicationsClock", 0)  # -q -d CLOCK: Applications Clocks
    g["app_clock_default_mhz"] = c("nvmlDeviceGetDefaultApplicationsClock", 0)
    g["sm_clock_mhz"] = c("nvmlDeviceGetClockInfo", 1)
    g["sm_clock_max_mhz"] = c("nvmlDeviceGetMaxClockInfo", 1)
    g["mem_clock_mhz"] = c("nvmlDeviceGetClockInfo", 2)
    g["power_limit_mw"] = c("nvmlDeviceGetEnforcedPowerLimit")
    g["power_default_mw"] = c("nvmlDeviceGetPowerManagementDefaultLimit")
    g["power_usage_mw"] = c("nvmlDeviceGetPowerUsage")
    g["temperature_c"] = c("nvmlDeviceGetTemperature", 0)
    g["temp_slowdown_c"] = c("nvmlDeviceGetTemperatureThreshold", 1)
    g["pcie_gen"] = c("nvmlDeviceGetCurrPcieLinkGeneration")
    g["pcie_gen_max"] = c("nvmlDeviceGetMaxPcieLinkGeneration")  # system (host and GPU) max
    g["pcie_gen_gpu_max"] = c("nvmlDeviceGetGpuMaxPcieLinkGeneration")
    g["pcie_width"] = c("nvmlDeviceGetCurrPcieLinkWidth")
    g["pcie_width_max"] = c("nvmlDeviceGetMaxPcieLinkWidth")
    util = c("nvmlDeviceGetUtilizationRates")
    g["utilization_gpu"] = util if isinstance(util, dict) else getattr(util, "gpu", None)
    mem = c("nvmlDeviceGetMemoryInfo")
    g["memory_total"] = mem if isinstance(mem, dict) else getattr(mem, "total", None)
    g["memory_used"] = mem if isinstance(mem, dict) else getattr(mem, "used", None)
    procs = c("nvmlDeviceGetComputeRunningProcesses")
    g["compute_processes"] = procs if isinstance(procs, dict) else len(procs)
    g["numa_node"] = c("nvmlDeviceGetNumaNodeId")  # topo -m: NUMA Affinity
    g["nvlink_states"] = _nvlink_states(nv, h)  # nvlink -s
    return g


def _nvlink_states(nv: Any, h: Any) -> Any:
    """1/0 per NVLink the GPU has (active/inactive), or the error when it has none."""
    states: list[int] = []
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _call(getattr(nv, "nvmlDeviceGetNvLinkState", _absent("nvmlDeviceGetNvLinkState")), h, link)
        if isinstance(state, dict):  # past the last link, or no NVLink at all ("Not Supported")
            return states or state
        states.append(int(state))
    return states


def _absent(name: str) -> Callable[..., Any]:
    def missing(*_: Any) -> Any:
        raise RuntimeError(f"{name} not in this nvidia-ml-py")
    return missing


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _list(v: Any) -> Any:
    return list(v) if isinstance(v, (tuple, list)) else v


@contextmanager
def _session() -> Iterator[Any]:
    """pynvml, initialized; raises RuntimeError with a readable reason when NVML is unusable."""
    try:
        import pynvml as nv
    except ImportError:
        raise RuntimeError("nvidia-ml-py is not installed") from None
    try:
        nv.nvmlInit()
    except Exception as e:
        raise RuntimeError(f"NVML could not start: {e}") from None
    try:
        yield nv
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def query() -> dict[str, Any]:
    """Ask NVML everything the probes use. Returns ``{"error": reason}`` when NVML is unusable
    (no driver, no libnvidia-ml, version mismatch) — that is a normal answer on a CPU box."""
    try:
        with _session() as nv:
            out: dict[str, Any] = {
                "driver_version": _call(nv.nvmlSystemGetDriverVersion),
                "cuda_driver_version": _call(nv.nvmlSystemGetCudaDriverVersion_v2),  # 12040 = 12.4
                "nvml_version": _call(nv.nvmlSystemGetNVMLVersion),
            }
            count = _call(nv.nvmlDeviceGetCount)
            # Keep the count's own answer: an error here is "could not ask", not "zero GPUs".
            out["device_count"] = count
            out["gpus"] = [_gpu(nv, i) for i in range(count)] if isinstance(count, int) else []
            return out
    except RuntimeError as e:
        return {"error": str(e)}


def telemetry(index: int) -> dict[str, Any]:
    """The few fields a benchmark samples before and after it runs (nvidia-smi -q -d
    CLOCK,TEMPERATURE,POWER,PERFORMANCE). ``{"error": reason}`` when NVML is unusable."""
    try:
        with _session() as nv:
            h = nv.nvmlDeviceGetHandleByIndex(index)
            util = _call(nv.nvmlDeviceGetUtilizationRates, h)
            procs = _call(nv.nvmlDeviceGetComputeRunningProcesses, h)
            return {
                "sm_clock_mhz": _call(nv.nvmlDeviceGetClockInfo, h, 1),
                "mem_clock_mhz": _call(nv.nvmlDeviceGetClockInfo, h, 2),
                "temperature_c": _call(nv.nvmlDeviceGetTemperature, h, 0),
                "power_w": _scale(_call(nv.nvmlDeviceGetPowerUsage, h), 1e-3),
                "power_limit_w": _scale(_call(nv.nvmlDeviceGetEnforcedPowerLimit, h), 1e-3),
                "clocks_event_reasons": _call(getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons",
                                                      _absent("nvmlDeviceGetCurrentClocksEventReasons")), h),
                "utilization_gpu": getattr(util, "gpu", None),
                "compute_pids": [p.pid for p in procs] if isinstance(procs, list) else None,
            }
    except Exception as e:
        return {"error": str(e)}


def _scale(v: Any, k: float) -> Any:
    return round(v * k, 1) if isinstance(v, (int, float)) else v
