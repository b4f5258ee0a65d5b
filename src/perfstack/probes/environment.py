"""The environment variables that steer the GPU stack (NCCL_*, CUDA_*, PYTORCH_*, ...).

Only variables with these prefixes become facts, and any whose name looks like a secret is
replaced, so a saved Run never carries credentials. The rules read them through the ``env`` fact, so
these prefixes are also what a capture keeps the values of (``KEEP_ENV``); a bundle's variable whose
value was not kept stays in the fact with the value ``<not-kept>``, and a rule that needs it says so
(rules.common.env_of).
"""

from __future__ import annotations

from perfstack import redact
from perfstack.probes.collector import Collector, probe

PREFIXES = ("NCCL_", "CUDA_", "PYTORCH_", "TORCH", "NVIDIA_", "CUBLAS", "CUDNN_", "OMP_", "MKL_",
            "OPENBLAS_", "KMP_", "NVSHMEM_", "UCX_", "FI_", "HF_", "TRANSFORMERS_", "LD_PRELOAD",
            "LD_LIBRARY_PATH", "MALLOC_", "SLURM_", "KUBERNETES_", "LOCAL_RANK", "RANK", "WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "GLOO_", "TRITON_")
KEEP_ENV = PREFIXES  # what a capture keeps the values of, for the rules that read the env fact


def relevant(env: dict[str, str]) -> dict[str, str]:
    return {k: ("REDACTED" if redact.secret_name(k) else v) for k, v in sorted(env.items()) if k.startswith(PREFIXES)}


@probe
def environment(c: Collector) -> None:
    """Source: the audited process's environment (env.json in a bundle). Shell: env"""
    env = c.env()
    if env is None:
        c.missing("env", f"environment not available ({c.env_missing or 'env.json missing from bundle'})",
                  "environment")
    else:
        c.put("env", relevant(env), "environment")
