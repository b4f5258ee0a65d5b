"""Framework checks: can torch use the GPUs at all, and what precision the hardware offers."""

from __future__ import annotations

from perfstack.model import Facts, NotApplicable
from perfstack.rules.common import gpu_list, gpus, version_tuple
from perfstack.rules.registry import Hit, Hits, check
from perfstack.sources import INFRA_ARTICLE



@check("torch-missing", "framework", "info", "torch is not importable",
       doc="Fires when the interpreter perfstack runs in cannot import torch (python.torch is None). The checks "
           "that need torch then report 'not checked' with the reason.",
       why="perfstack inspects the torch of the interpreter it runs in. Without it, the torch/CUDA build, "
           "architecture and NCCL checks cannot run; if the workload uses another environment, run perfstack "
           "from there.",
       fix="Run perfstack with the workload's interpreter (e.g. /path/to/venv/bin/python -m perfstack doctor), "
           "or pip install perfstack into that environment.",
       refs=f"{INFRA_ARTICLE} (§2 The driver layer, §10 Debugging order)")
def torch_missing(f: Facts) -> Hits:
    if f.need("python.torch") is None:
        why = (f.value("python.errors") or {}).get("torch")
        where = f.value("python.executable", "this interpreter")
        yield Hit(f"torch is not importable by {where}" + (f": {why}" if why else ""))


@check("torch-cpu-build", "framework", "critical", "CPU-only torch on a GPU machine",
       doc="Fires when the driver reports GPUs (gpu.count > 0) and torch is installed without CUDA "
           "(torch.version.cuda is None).",
       why="A CPU-only wheel cannot use the GPUs at all: everything runs on the CPU, typically 10-100x slower, "
           "and code that calls .cuda() fails. pip installs the CPU wheel from some indexes (and on machines "
           "where it cannot see a CUDA toolkit) without saying so.",
       fix="pip install torch --index-url https://download.pytorch.org/whl/cu<XY> (a CUDA build the driver "
           "supports; see driver-toolkit-mismatch)",
       refs=f"{INFRA_ARTICLE} (§2 The driver layer, §10 Debugging order)")
def torch_cpu_build(f: Facts) -> Hits:
    count = len(gpu_list(f))
    torch = f.need("python.torch")
    if torch is None:
        raise NotApplicable("torch is not installed (torch-missing)")
    if f.need("python.torch_cuda") is None:
        hip = f.value("python.torch_hip")
        kind = f"a ROCm build (HIP {hip})" if hip else "a CPU-only build"
        yield Hit(f"torch {torch} is {kind}; the driver reports {count} NVIDIA GPU(s)")


@check("torch-cuda-unavailable", "framework", "critical", "torch cannot use CUDA",
       doc="Fires when torch is a CUDA build, the driver reports GPUs, and torch.cuda.is_available() is False or "
           "torch's CUDA initialisation raised; the evidence carries torch's own message when it gave one.",
       why="The job then runs on the CPU or fails at the first .cuda(). Usual causes: a driver older than "
           "torch's CUDA (driver-toolkit-mismatch), CUDA_VISIBLE_DEVICES hiding every GPU, a container started "
           "without GPU access, or missing /dev/nvidia* device nodes.",
       fix="Follow torch's message: fix driver-toolkit-mismatch or cuda-visible-devices first; in containers "
           "start with --gpus all (or the NVIDIA runtime) and check nvidia-smi works inside.",
       refs=f"{INFRA_ARTICLE} (§2 The driver layer, §10 Debugging order); Book ch. 3 (the GPU software stack)")
def torch_cuda_unavailable(f: Facts) -> Hits:
    count = len(gpu_list(f))
    if f.need("python.torch") is None or f.need("python.torch_cuda") is None:
        raise NotApplicable("torch is missing or not a CUDA build (torch-missing, torch-cpu-build)")
    errors = f.value("python.errors") or {}
    reason = errors.get("cuda_available") or errors.get("cuda_init")
    if not f.need("python.cuda_available"):
        yield Hit(f"torch {f.value('python.torch')} (CUDA {f.value('python.torch_cuda')}) cannot use the "
                  f"{count} GPU(s) the driver reports" + (f": {reason}" if reason else ""))
    elif errors.get("cuda_init"):
        yield Hit(f"torch sees CUDA but its CUDA initialisation failed: {errors['cuda_init']}")


@check("low-precision-opportunity", "framework", "info", "GPU supports FP8 (or FP4)",
       doc="Fires for GPUs of compute capability 8.9 or newer (FP8 Tensor Cores: L40, RTX 4090, H100/H200) and "
           "notes FP4 from 10.0 (Blackwell). Says whether transformer-engine is installed. Static and "
           "workload-independent: an opportunity to evaluate, not a fault.",
       why="FP8 doubles Tensor Core throughput over BF16/FP16 and halves weight and KV-cache bytes; FP4 doubles "
           "it again on Blackwell. For compute-bound training and for inference that passes validation in "
           "FP8 this is the largest remaining factor after BF16.",
       fix="Evaluate FP8: Transformer Engine (fp8_autocast, E4M3 forward / E5M2 gradients) for training; FP8 "
           "weights and KV cache in the serving engine (e.g. vLLM --quantization fp8 --kv-cache-dtype fp8).",
       refs=f"Book ch. 2 (FP8 and FP4 Tensor Cores) and appendix checklist (Exploit FP8, novel precisions, and scaling techniques); {INFRA_ARTICLE} (§8.4 Shrinking the cache itself, §8.7 Graph IRs and ahead-of-time compilers)")
def low_precision_opportunity(f: Facts) -> Hits:
    cards = [g for g in gpus(f) if g.cc >= (8, 9)]
    if not cards:
        raise NotApplicable("no GPU with FP8 Tensor Cores (compute capability below 8.9)")
    te = (f.value("python.packages") or {}).get("transformer-engine")
    torch = f.value("python.torch")
    for g in cards:
        fmt = "FP8 and FP4" if g.cc >= (10, 0) else "FP8"
        note = f"transformer-engine {te} is installed" if te else "transformer-engine is not installed"
        old = torch and version_tuple(torch)[:2] < (2, 1)
        yield Hit(f"GPU {g.index} ({g.name}, {g.cc[0]}.{g.cc[1]}) has {fmt} Tensor Cores; {note}"
                  + ("; torch < 2.1 has no float8 dtypes" if old else ""), subject=f"gpu{g.index}")
