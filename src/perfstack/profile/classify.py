"""What a GPU event is: category, Tensor-Core use, memcpy direction and memory kind, GEMM FLOPs.

Categories (the per-step breakdown): gemm, attention, elementwise (element-wise and reductions),
optimizer, memcpy, memset, comm (NCCL), other. Names follow cuBLAS/CUTLASS/ATen/Triton/NCCL
conventions seen in torch 2.x traces; where a GEMM kernel's name is ambiguous about Tensor Cores
(``f32f32`` without ``tf32``), the launching operator's input dtype and the recorded
float32_matmul_precision decide.
"""

from __future__ import annotations

import re
from typing import Sequence

CATEGORIES = ("gemm", "attention", "elementwise", "optimizer", "memcpy", "memset", "comm", "other")
# When kernels of several categories run at once (several streams), the instant is counted once,
# for the first active category in this order: compute first, then copies, then communication.
PRIORITY = ("gemm", "attention", "optimizer", "elementwise", "other", "memcpy", "memset", "comm")

_ATTN = re.compile(r"flash|fmha|attention|_attn|sdpa|mha_|softmax_warp_forward_attn", re.I)
_GEMM = re.compile(r"gemm|nvjet|gemv|matmul|xmma|cublas|cutlass.*(tensorop|wgmma|simt)|_mm_|dot_kernel|splitk", re.I)
_OPT = re.compile(r"multi_tensor_apply|adam|_fused_sgd|fused_sgd|lamb|optimizer|foreach", re.I)
_ELEM = re.compile(r"elementwise|reduce|vectorized|unrolled|softmax|norm|gelu|relu|silu|dropout|triton_(poi|red|per)|"
                   r"index|scatter|gather|cat_|copy|fill|cast|mul|add|where|arange|random|distribution|sum|mean", re.I)

_NO_TC = re.compile(r"sgemm|gemmSN|gemv|_ffma|simt|dgemm|f32f32_f32f32", re.I)
_TC = re.compile(r"tf32|bf16|f16|fp16|e4m3|e5m2|i8|hmma|tensorop|wgmma|gmma|s1688|s16816|nvjet|xmma_gemm_(bf|f16|e4)", re.I)

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "aten::_scaled_mm", "aten::addmv", "aten::mv", "aten::_addmm_activation"}

DTYPE_BITS = {"c10::BFloat16": 16, "c10::Half": 16, "float": 32, "double": 64, "c10::Float8_e4m3fn": 8,
              "c10::Float8_e5m2": 8, "signed char": 8, "unsigned char": 8}
DTYPE_NAME = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
              "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "signed char": "int8"}


def category(kind: str, name: str) -> str:
    if kind == "memcpy":
        return "memcpy"
    if kind == "memset":
        return "memset"
    if name.startswith("nccl") or "nccl" in name[:40].lower():
        return "comm"
    if _ATTN.search(name):
        return "attention"
    if _GEMM.search(name):
        return "gemm"
    if _OPT.search(name):
        return "optimizer"
    if _ELEM.search(name):
        return "elementwise"
    return "other"


def tensor_cores(name: str, dtype: str | None = None, precision: str | None = None) -> bool | None:
    """True/False when the kernel name (or the op's dtype and precision) says; None when unknown."""
    if _NO_TC.search(name):
        if "tf32" in name.lower():
            return True
        return False
    if _TC.search(name):
        return True
    if dtype in ("bf16", "fp16", "fp8", "int8"):
        return True
    if dtype == "fp32" and precision:
        return precision in ("high", "medium")
    return None


def memcpy_kind(name: str) -> tuple[str, str]:
    """('HtoD', 'Pageable') from 'Memcpy HtoD (Pageable -> Device)'."""
    m = re.search(r"(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD)", name)
    direction = m.group(1) if m else "other"
    kind = next((k for k in ("Pageable", "Pinned", "Managed") if k in name), "Device")
    return direction, kind


def _dims(d) -> list[int] | None:
    if isinstance(d, list) and d and all(isinstance(x, int) and not isinstance(x, bool) for x in d):
        return d
    return None


def gemm_shape(op: str, dims: Sequence | None) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a GEMM operator from its Input Dims, or None."""
    if not dims:
        return None
    try:
        if op in ("aten::mm",):
            a, b = _dims(dims[0]), _dims(dims[1])
            if a and b and len(a) == 2 and len(b) == 2:
                return 1, a[0], b[1], a[1]
        elif op in ("aten::addmm", "aten::_addmm_activation"):
            a, b = _dims(dims[1]), _dims(dims[2])
            if a and b and len(a) == 2 and len(b) == 2:
                return 1, a[0], b[1], a[1]
        elif op == "aten::_scaled_mm":
            a, b = _dims(dims[0]), _dims(dims[1])
            if a and b and len(a) == 2 and len(b) == 2:
                return 1, a[0], b[1], a[1]
        elif op in ("aten::bmm",):
            a, b = _dims(dims[0]), _dims(dims[1])
            if a and b and len(a) == 3 and len(b) == 3:
                return a[0], a[1], b[2], a[2]
        elif op == "aten::baddbmm":
            a, b = _dims(dims[1]), _dims(dims[2])
            if a and b and len(a) == 3 and len(b) == 3:
                return a[0], a[1], b[2], a[2]
        elif op == "aten::linear":
            x, w = _dims(dims[0]), _dims(dims[1])
            if x and w and len(w) == 2:
                m = 1
                for v in x[:-1]:
                    m *= v
                return 1, m, w[0], w[1]
        elif op in ("aten::matmul",):
            a, b = _dims(dims[0]), _dims(dims[1])
            if a and b and len(a) >= 2 and len(b) == 2:
                m = 1
                for v in a[:-1]:
                    m *= v
                return 1, m, b[1], b[0]
    except (IndexError, TypeError):
        return None
    return None


ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "fp8": 1, "int8": 1}


def itemsize(dtype: str | None) -> int:
    """Bytes per element; 2 when the dtype is unknown (the common 16-bit case)."""
    return ITEMSIZE.get(dtype or "", 2)


def op_dtype(types: Sequence | None) -> str | None:
    if not types:
        return None
    for t in types:
        if isinstance(t, str) and t in DTYPE_NAME:
            return DTYPE_NAME[t]
    return None


def misaligned(shape: tuple[int, int, int, int], dtype: str | None) -> list[str]:
    """Which of M, N, K break the Tensor-Core alignment rule: multiples of 8 for 16-bit types,
    16 for 8-bit, 4 for TF32 (NVIDIA Matrix Multiplication Performance guide)."""
    mult = {"bf16": 8, "fp16": 8, "fp8": 16, "int8": 16, "fp32": 4}.get(dtype or "")
    if not mult:
        return []
    _, m, n, k = shape
    return [f"{d}={v}" for d, v in (("M", m), ("N", n), ("K", k)) if v % mult]


def short_name(name: str, width: int = 90) -> str:
    """A kernel name without template noise, for tables."""
    s = name
    if s.startswith("void "):
        s = s[5:]
    # keep the outer template name and the first template argument's head
    depth, out = 0, []
    for ch in s:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<")
            continue
        if ch == ">":
            depth -= 1
            if depth == 0:
                out.append(">")
            continue
        if ch == "(" and depth == 0:
            break
        if depth <= 1:
            out.append(ch)
    s = "".join(out).replace("at::native::", "").replace("(anonymous namespace)::", "").strip()
    if len(s) < 4 or name.startswith(("Memcpy", "Memset")):
        s = name
    return s if len(s) <= width else s[: width - 1] + "…"
