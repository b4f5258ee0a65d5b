"""Helpers several layers' checks share: which GPUs and NUMA nodes there are, sizes in words, versions and
the environment of the Python stack, the GPUs torch can use, system mounts and sysctl fixes.

A helper two rule modules need lives here, never in one of them: a layer's module holds its checks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from perfstack.redact import NOT_KEPT
from perfstack.model import Facts, NotApplicable, NotChecked
from perfstack.rules.shell import Abs, Command, sh
from perfstack.units import binary_size


def gpu_list(f: Facts) -> list[dict[str, Any]]:
    """The GPUs; NotApplicable when the driver says there are none or could not be asked."""
    count = f.value("gpu.count")
    if count is None:
        fact = f.get("gpu.count")
        if fact is None:
            raise NotChecked("gpu.count was not collected")
        raise NotApplicable(f"no NVIDIA driver/GPU found: {fact.reason}")
    if count == 0:
        raise NotApplicable("no NVIDIA GPU")
    gpus: list[dict[str, Any]] = f.need("gpu.list")
    return gpus


def cpu_nodes(f: Facts) -> list[dict[str, Any]]:
    """The NUMA nodes that have CPUs (GPU HBM on Grace Hopper and CXL memory show as CPU-less
    nodes); NotApplicable with fewer than two."""
    nodes = [n for n in f.need("numa.nodes") if n["cpus"]]
    if len(nodes) < 2:
        raise NotApplicable("one NUMA node with CPUs")
    return nodes


size = binary_size  # the rules' short name for a size in evidence: '512 MiB', '1.5 GiB'


# -- the Python stack: versions, environment, the GPUs torch can use -------------------------------
def version_tuple(text: str) -> tuple[int, ...]:
    """'13.0' -> (13, 0); '2.11.0+cu130' -> (2, 11, 0); '2.21.5.post1' -> (2, 21, 5)."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    if not m:
        raise ValueError(f"no version number in {text!r:.40}")
    return tuple(int(p) for p in m.group(1).split("."))


def require_gpu(f: Facts) -> None:
    """NotApplicable when the driver says there is no GPU. When it could not be asked, checks of
    environment settings still run: a wrong setting is wrong whatever the driver says."""
    if f.value("gpu.count") == 0:
        raise NotApplicable("no NVIDIA GPU")


class Env(dict[str, Any]):
    """The env fact as the rules read it: a variable whose value a capture did not keep (bundles keep only
    the values the checks read; older or hand-made ones may lack one) makes the check not checked, by name,
    rather than judged on a placeholder."""

    def get(self, name: str, default: Any = None) -> Any:
        v = super().get(name, default)
        if v == NOT_KEPT:
            raise NotChecked(f"the value of {name} was not kept in the bundle (capture with --keep-env {name})")
        return v


def env_of(f: Facts) -> Env:
    """The env fact; NotChecked when it was not collected."""
    return Env(f.need("env"))


def env_or_empty(f: Facts) -> Env:
    """The env fact, empty when it was not collected."""
    return Env(f.value("env") or {})


def is_true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    cc: tuple[int, int]


def parse_cc(text: Any) -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(text)) if text is not None else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def gpus(f: Facts) -> list[Gpu]:
    """Every GPU whose compute capability is known: from gpu.list (NVML / nvidia-smi), else from
    what torch saw. NotApplicable without a GPU, NotChecked when no capability is known."""
    require_gpu(f)
    out = [Gpu(g.get("index", i), g.get("name") or f"GPU {i}", cc)
           for i, g in enumerate(f.value("gpu.list") or []) if (cc := parse_cc(g.get("compute_capability")))]
    if not out:
        out = [Gpu(i, f"cuda:{i}", cc) for i, c in enumerate(f.value("python.device_capabilities") or [])
               if (cc := parse_cc(c))]
    if not out:
        gpu_list(f)  # no driver answer at all: not applicable, in the driver's words
        raise NotChecked("no GPU compute capability known (gpu.list and python.device_capabilities lack it)")
    return out


def cuda_torch(f: Facts) -> str:
    """torch's CUDA version; NotApplicable for a CPU-only torch (torch-cpu-build reports that)."""
    v: str | None = f.need("python.torch_cuda")
    if v is None:
        raise NotApplicable(f"torch {f.value('python.torch', '')} is a CPU-only build")
    return v


# -- mounts and the driver's GPU count -------------------------------------------------------------
# Mount points that never hold data: /boot, and where a container runtime puts its own bind mounts
# (driver libraries under /usr, /etc/hosts, /dev/shm, service-account secrets under /run).
SYSTEM_MOUNT = re.compile(r"^/(boot|etc|usr|lib|lib64|bin|sbin|dev|proc|sys|run|var/run|var/lib/kubelet)(/|$)")


def gpu_count(f: Facts) -> int:
    """How many GPUs the driver sees; NotApplicable when there is no driver to ask."""
    if f.value("gpu.count") is None and "gpu.count" in f:
        raise NotApplicable(f"no NVIDIA driver/GPU found: {f['gpu.count'].reason}")
    return int(f.need("gpu.count"))


# -- sysctl fixes ----------------------------------------------------------------------------------
SYSCTL_FILE = "/etc/sysctl.d/99-perfstack.conf"


def sysctl_commands(name: str, value: object, line: str | None = None) -> list[Command]:
    """Set now and persist; both steps are idempotent (the persist step replaces its own line).
    ``line`` is the persisted form when it differs from name=value (lists of numbers)."""
    return [
        sh("sysctl", "-w", f"{name}={value}"),
        sh("touch", Abs(SYSCTL_FILE)).then(sh("sed", "-i", f"/^{name}[ =]/d", Abs(SYSCTL_FILE)))
        .then(sh("echo", line or f"{name}={value}", into=SYSCTL_FILE, append=True)),
    ]


# -- GPUs in evidence ------------------------------------------------------------------------------
BUSY_PCT = 10  # utilization above this counts as "under load" (perfstack's threshold)


def label(g: dict[str, Any]) -> str:
    return f"GPU {g.get('index')} ({g.get('name') or g.get('pci_bus_id') or 'unknown'})"


def busy(g: dict[str, Any]) -> bool:
    return (g.get("utilization_gpu") or 0) > BUSY_PCT
