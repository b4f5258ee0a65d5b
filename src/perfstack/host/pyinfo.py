"""Print, as one JSON object, what the Python stack of this interpreter is.

Run as ``python -m perfstack.host.pyinfo`` in a child process by LiveHost; a bundle stores the
same object as python.json. Every field that cannot be read is absent or null, with the
exception text under ``errors``.
"""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata
from typing import Any, Callable

PACKAGES = ("numpy", "triton", "transformers", "accelerate", "deepspeed", "vllm", "nvidia-nccl-cu12",
            "nvidia-nccl-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "apex", "flash-attn")


def _try(info: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
    try:
        info[key] = fn()
    except Exception as e:  # a broken install is exactly what the doctor wants to report
        info.setdefault("errors", {})[key] = f"{type(e).__name__}: {e}"[:300]


def collect() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "packages": {},
    }
    for name in PACKAGES:
        try:
            info["packages"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    try:
        import torch
    except ImportError:
        info["torch"] = None
        return info
    except Exception as e:
        info["torch"] = None
        info.setdefault("errors", {})["torch"] = f"{type(e).__name__}: {e}"[:300]
        return info
    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    _try(info, "cuda_available", torch.cuda.is_available)
    _try(info, "arch_list", torch.cuda.get_arch_list)
    _try(info, "cudnn", lambda: torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
    _try(info, "nccl", lambda: ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None)
    _try(info, "nccl_available", lambda: torch.distributed.is_available() and torch.distributed.is_nccl_available())
    _try(info, "matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32)
    _try(info, "cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32)
    _try(info, "float32_matmul_precision", torch.get_float32_matmul_precision)
    if info.get("cuda_available"):
        _try(info, "device_count", torch.cuda.device_count)
        _try(info, "devices", lambda: [
            {"name": torch.cuda.get_device_name(i), "capability": list(torch.cuda.get_device_capability(i))}
            for i in range(torch.cuda.device_count())
        ])
    return info


if __name__ == "__main__":
    json.dump(collect(), sys.stdout)
