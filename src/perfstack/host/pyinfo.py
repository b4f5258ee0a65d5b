"""Print, as one JSON object, what the Python stack of this interpreter is.

Run as ``python -m perfstack.host.pyinfo`` in a child process by LiveHost; a bundle stores the
same object as python.json. Every field that cannot be read is absent or null, with the
exception text under ``errors``. Nothing here creates a CUDA context: the calls used stop at
cuInit and device-property queries, so the probe costs the torch import and little more.
"""

from __future__ import annotations

import json
import platform
import sys
import threading
import warnings
from importlib import metadata
from typing import Any, Callable

# Packages whose versions explain findings: NCCL and cuDNN wheels (checked against what torch
# loaded), the CUDA runtime wheels, and the libraries that change what the checks recommend.
PACKAGES = ("torch", "numpy", "triton", "transformers", "accelerate", "deepspeed", "vllm", "sglang",
            "nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13",
            "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "nvidia-cublas-cu12", "nvidia-cublas",
            "apex", "flash-attn", "xformers", "transformer-engine", "megatron-core", "bitsandbytes")


def _err(info: dict[str, Any], key: str, text: str) -> None:
    info.setdefault("errors", {})[key] = text[:300]


def _try(info: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
    try:
        info[key] = fn()
    except Exception as e:  # a broken install is exactly what the doctor wants to report
        _err(info, key, f"{type(e).__name__}: {e}")


def _cuda_available(info: dict[str, Any], torch: Any) -> None:
    """torch.cuda.is_available() swallows the reason CUDA failed and only warns it; keep the
    warning text, since it is the evidence a user needs ("driver too old", "no device")."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _try(info, "cuda_available", torch.cuda.is_available)
    for w in caught:
        if "CUDA" in str(w.message):
            _err(info, "cuda_available", str(w.message))
            break
    if info.get("cuda_available"):
        # torch.cuda.init() sets up torch's CUDA state without creating a context; it is also
        # where PYTORCH_(CUDA_)ALLOC_CONF is parsed, so a bad allocator setting fails here, with
        # torch's own message, instead of inside whichever call happens to come first.
        try:
            torch.cuda.init()
        except Exception as e:
            _err(info, "cuda_init", f"{type(e).__name__}: {e}")


def _arch_list(torch: Any) -> list[str]:
    # get_arch_list() answers [] whenever CUDA cannot initialise; the compiled-in flags do not
    # depend on the driver, and the arch check needs them most when CUDA is failing.
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    raw = flags() if flags is not None else None
    arch: list[str] = raw.split() if raw else torch.cuda.get_arch_list()
    return arch


def _versions(info: dict[str, Any]) -> None:
    for name in PACKAGES:
        try:
            info["packages"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
        except Exception as e:  # a corrupt dist-info must not cost the other packages
            _err(info, f"package:{name}", f"{type(e).__name__}: {e}")


def collect() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "packages": {},
    }
    # The distribution metadata is read while torch imports (the import waits on disk and on native
    # initialisation much of the time), so the probe costs little more than the import itself.
    lookups = threading.Thread(target=_versions, args=(info,), name="package versions")
    lookups.start()
    try:
        import torch
    except ImportError:
        lookups.join()
        info["torch"] = None
        return info
    except Exception as e:  # e.g. OSError from a missing libcudart: torch is there but broken
        lookups.join()
        info["torch"] = None
        _err(info, "torch", f"{type(e).__name__}: {e}")
        return info
    lookups.join()
    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    info["torch_hip"] = getattr(torch.version, "hip", None)
    _try(info, "num_threads", torch.get_num_threads)
    _try(info, "float32_matmul_precision", torch.get_float32_matmul_precision)
    _try(info, "matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32)
    _try(info, "cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32)
    if torch.version.cuda is None:
        return info
    _cuda_available(info, torch)
    _try(info, "arch_list", lambda: _arch_list(torch))
    _try(info, "cudnn", lambda: torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
    _try(info, "nccl_available", lambda: torch.distributed.is_available() and torch.distributed.is_nccl_available())
    # torch.cuda.nccl.version() reports the libnccl actually loaded, not the one torch was built with.
    _try(info, "nccl", lambda: ".".join(map(str, torch.cuda.nccl.version())))
    _try(info, "allocator_backend", torch.cuda.get_allocator_backend)
    if info.get("cuda_available") and "cuda_init" not in info.get("errors", {}):
        _try(info, "device_count", torch.cuda.device_count)
        _try(info, "devices", lambda: [
            {"name": torch.cuda.get_device_name(i), "capability": list(torch.cuda.get_device_capability(i))}
            for i in range(torch.cuda.device_count())
        ])
    return info


if __name__ == "__main__":
    json.dump(collect(), sys.stdout)
