"""What a GPU event is: its category from the operator that launched it (and the kernel name where
no operator is known), Tensor-Core use, memcpy direction and memory kind, GEMM shapes.

Categories (the per-step breakdown): gemm, conv, attention, elementwise (compute element-wise,
normalizations, reductions, losses), copy (casts, copies, layout changes launched by ``aten::to``,
``copy_``, ``contiguous``...), optimizer (everything ``Optimizer.step`` launches), memcpy, memset,
comm (NCCL), other.

The operator decides, not the kernel name: kernel names are C++ template names in which
``{lambda()#1}`` matches "lamb" and ``gemm`` may be a split-K reduction; the launching operator and
its ancestors (``aten::linear`` → ``aten::addmm``, ``ConvolutionBackward0`` →
``aten::convolution_backward``, ``Optimizer.step#AdamW.step`` → ``aten::_fused_adamw_``) say what
the work is for. Names are the fallback for kernels no operator owns (a trace without
correlation ids, a kernel replayed from a CUDA graph, Triton kernels of compiled code).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable, Optional, Sequence

from perfstack.profile.trace import CONCAT_OPS

CATEGORIES = ("gemm", "conv", "attention", "elementwise", "copy", "optimizer", "memcpy", "memset", "comm", "other")
# When kernels of several categories run at once (several streams), the instant is counted once,
# for the first active category in this order: compute first, then copies, then communication.
PRIORITY = ("gemm", "conv", "attention", "optimizer", "elementwise", "copy", "other", "memcpy", "memset", "comm")
COMPUTE = ("gemm", "conv", "attention")  # the categories whose FLOPs MFU counts

# Operator families, most specific first: an operator inside an attention op is attention even
# when it is a bmm or a softmax; a copy inside a convolution is part of the convolution.
_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention", re.compile(r"scaled_dot_product|flash_attention|efficient_attention|_attention_math|"
                             r"cudnn_attention|ScaledDotProduct|FlashAttention|EfficientAttention|flex_attention", re.I)),
    ("conv", re.compile(r"convolution|conv\d?d|cudnn_conv|ConvolutionBackward|mkldnn_conv|conv_transpose", re.I)),
    ("gemm", re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|addmv|mv|_addmm_activation|"
                        r"addbmm|einsum|_int_mm)$|^(Mm|Addmm|Bmm|Baddbmm|Mv|Addmv|Linear)Backward\d*$")),
    ("copy", re.compile(r"^aten::(to|_to_copy|copy_|contiguous|clone|_copy_from|_copy_from_and_resize)$|"
                        r"^(ToCopy|Clone|CopyBackwards|Copy)Backward\d*$")),
)
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "aten::_scaled_mm", "aten::addmv", "aten::mv", "aten::_addmm_activation"}
LOSS_OPS = re.compile(r"cross_entropy|log_softmax|nll_loss|LogSoftmaxBackward|NllLossBackward|_softmax_backward", re.I)
# The operators that copy memory (what ``copies`` measures) and the casts (the fusion finding's copies, not its):
# ``attribute`` marks every op at or below one of them, so that ``copies`` need not walk up to see.
STACK_OPS = {"aten::stack", "aten::hstack", "aten::vstack", "aten::dstack"}
CAT_OPS = CONCAT_OPS | STACK_OPS
INDEX_OPS = {"aten::index", "aten::index_select", "aten::gather", "aten::take_along_dim", "aten::masked_select"}
CLONE_OPS = {"aten::clone", "aten::contiguous", "aten::copy_", "aten::_copy_from"}
COPY_OPS = CAT_OPS | INDEX_OPS | CLONE_OPS
CASTS = {"aten::to", "aten::_to_copy", "aten::type_as"}

# Kernel names, for kernels no operator explains.
_NCCL = re.compile(r"^(void )?nccl|ncclDevKernel|ncclKernel", re.I)
_ATTN = re.compile(r"flash|fmha|_attn_|attention|sdpa|mha_", re.I)
_CONV = re.compile(r"conv|dgrad|wgrad|fprop|implicit_gemm|implicit_convolve|winograd|nchwToNhwc|nhwcToNchw",
                   re.I)
_NORM = re.compile(r"bn_fw|bn_bw|batch_norm|batchnorm|layer_norm|layernorm|rms_?norm|group_norm", re.I)
_GEMM = re.compile(r"gemm|nvjet|gemv|xmma|cublas|cutlass|wgmma|splitKreduce|_mm_|triton_tem", re.I)
_OPT = re.compile(r"multi_tensor_apply|fused_adam|FusedAdam|fused_sgd|_fused_sgd|lamb_kernel|adam_kernel", re.I)
_COPY = re.compile(r"copy_kernel|_copy_|direct_copy|CatArrayBatchedCopy|transpose", re.I)
_ELEM = re.compile(r"elementwise|reduce|vectorized|unrolled|softmax|norm|gelu|relu|silu|dropout|triton_(poi|red|per)|"
                   r"index|scatter|gather|fill|where|arange|random|distribution|cross_entropy|nll_loss", re.I)
LAYOUT_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw", re.I)

_NO_TC = re.compile(r"sgemm|gemmSN|gemv|_ffma|simt|dgemm|f32f32_f32f32|implicit_convolve_sgemm|dgrad_engine|"
                    r"wgrad_alg\d_engine|conv2d_grouped_direct|winograd_nonfused", re.I)
_TC = re.compile(r"tf32|bf16|f16|fp16|e4m3|e5m2|i8|hmma|tensorop|wgmma|gmma|s1688|s16816|nvjet|xmma_|_xmma|h884|"
                 r"h1688|h16816|triton_tem", re.I)

DTYPE_NAME = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
              "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
              "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8", "unsigned char": "uint8", "int": "int32",
              "long int": "int64", "bool": "bool", "short int": "int16"}
ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "fp8": 1, "int8": 1, "uint8": 1, "int32": 4, "int64": 8,
            "bool": 1, "int16": 2}


def family(op_name: str) -> str | None:
    """The operator family of one CPU op name (attention, conv, gemm, copy), or None."""
    for fam, pat in _FAMILIES:
        if pat.search(op_name):
            return fam
    return None


def by_name(kind: str, name: str) -> str:
    """Category from the kernel name alone (no launching operator known)."""
    if kind in ("memcpy", "memset"):
        return kind
    if name.startswith("triton_"):
        # Inductor's names list every op it fused (``triton_red_fused__log_softmax__to_copy_add``): the
        # prefix says what the kernel is, a template (a GEMM) or a fused point-wise/reduction kernel
        return "gemm" if name.startswith(("triton_tem", "triton_mm")) else "elementwise"
    if _NCCL.search(name):
        return "comm"
    if _ATTN.search(name):
        return "attention"
    if _OPT.search(name):
        return "optimizer"
    if _NORM.search(name):
        return "elementwise"
    if _CONV.search(name) and not name.startswith("triton"):
        return "conv"
    if _GEMM.search(name):
        return "gemm"
    if _COPY.search(name):
        return "copy"
    if _ELEM.search(name):
        return "elementwise"
    return "other"


def category(kind: str, name: str, fam: str | None = None, phase: str | None = None) -> str:
    """Category of a GPU event from its kind, kernel name, the launching operator's family
    (``family()`` of the op and its ancestors, most specific first) and phase."""
    if kind in ("memcpy", "memset"):
        return kind
    if _NCCL.search(name):
        return "comm"
    if phase == "optimizer":
        return "optimizer"
    if fam == "conv" and not (_CONV.search(name) or _GEMM.search(name)) and (_ELEM.search(name) or _COPY.search(name)):
        # element-wise work inside a convolution's backward (gradient accumulation), not the convolution
        return "copy" if _COPY.search(name) else "elementwise"
    if fam in ("attention", "conv"):
        return fam
    if fam == "gemm":
        # cuBLAS's own helpers (split-K reductions, bias epilogues) are part of the GEMM; an
        # element-wise kernel launched by aten::linear for a bias or activation is not.
        if _GEMM.search(name) or not (_ELEM.search(name) or _COPY.search(name)):
            return "gemm"
        return "copy" if _COPY.search(name) else "elementwise"
    if fam == "copy":
        return "copy"
    if name.startswith("triton_"):
        return by_name(kind, name)
    cat = by_name(kind, name)
    if fam is None:
        return cat
    # an aten op outside the known families: element-wise/reduction work unless the name says otherwise
    return cat if cat in ("gemm", "conv", "attention", "copy", "comm") else "elementwise"


@lru_cache(maxsize=1 << 14)  # asked per GEMM kernel of a trace (millions), of a few hundred names
def tensor_cores(name: str, dtype: str | None = None, precision: str | None = None) -> bool | None:
    """True/False when the kernel name (or the op's dtype and precision) says; None when unknown."""
    if _NO_TC.search(name):
        return "tf32" in name.lower()
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


def dims(d: object) -> tuple[int, ...] | None:
    """A tensor's shape from one Input Dims entry, or None when that input is not a tensor."""
    if isinstance(d, (list, tuple)) and d and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**40
                                                  for x in d):
        return tuple(d)
    return None


def numel(shape: Sequence[int]) -> int:
    n = 1
    for v in shape:
        n *= v
    return n


Gemm = tuple[int, int, int, int]  # (batch, M, N, K)
Dims = Optional[tuple[int, ...]]


def _mm(a: Dims, b: Dims) -> Gemm | None:
    return (1, a[0], b[1], a[1]) if a and b and len(a) == 2 and len(b) == 2 else None


def _bmm(a: Dims, b: Dims) -> Gemm | None:
    return (a[0], a[1], b[2], a[2]) if a and b and len(a) == 3 and len(b) == 3 else None


def _linear(x: Dims, w: Dims) -> Gemm | None:
    return (1, numel(x[:-1]), w[0], w[1]) if x and w and len(w) == 2 else None


def _mv(a: Dims, _: Dims) -> Gemm | None:
    return (1, 1, a[0], a[1]) if a and len(a) == 2 else None


def _matmul(a: Dims, b: Dims) -> Gemm | None:
    if a and b and len(a) >= 2 and len(b) == 2:
        return 1, numel(a[:-1]), b[1], b[0]
    if a and b and len(a) >= 3 and len(b) >= 3 and a[:-2] == b[:-2]:
        return numel(a[:-2]), a[-2], b[-1], a[-1]
    return None


# GEMM operator -> (its A operand's position in Input Dims, B's (None: a vector), the shape from the two)
GEMM_OPERANDS: dict[str, tuple[int, int | None, Callable[[Dims, Dims], Gemm | None]]] = {
    "aten::mm": (0, 1, _mm), "aten::_scaled_mm": (0, 1, _mm), "aten::_int_mm": (0, 1, _mm),
    "aten::addmm": (1, 2, _mm), "aten::_addmm_activation": (1, 2, _mm),
    "aten::bmm": (0, 1, _bmm), "aten::baddbmm": (1, 2, _bmm),
    "aten::linear": (0, 1, _linear),
    "aten::mv": (0, None, _mv), "aten::addmv": (1, None, _mv),
    "aten::matmul": (0, 1, _matmul),
}


def gemm_shape(op: str, dims_: Sequence[Any] | None) -> Gemm | None:
    """(batch, M, N, K) of a GEMM operator from its Input Dims, or None."""
    operands = GEMM_OPERANDS.get(op)
    if not dims_ or operands is None:
        return None
    ia, ib, shape = operands
    try:
        return shape(dims(dims_[ia]), dims(dims_[ib]) if ib is not None else None)
    except (IndexError, TypeError):
        return None


def itemsize(dtype: str | None) -> int:
    """Bytes per element; 2 when the dtype is unknown (the common 16-bit case)."""
    return ITEMSIZE.get(dtype or "", 2)


def op_dtype(types: Sequence[Any] | None) -> str | None:
    """The first floating dtype among an op's input types (what its math runs in)."""
    if not types:
        return None
    for t in types:
        if isinstance(t, str) and t in DTYPE_NAME and DTYPE_NAME[t] in ("bf16", "fp16", "fp32", "fp64", "fp8"):
            return DTYPE_NAME[t]
    for t in types:
        if isinstance(t, str) and t in DTYPE_NAME:
            return DTYPE_NAME[t]
    return None


def misaligned(shape: tuple[int, int, int, int], dtype: str | None) -> list[str]:
    """Which of M, N, K break the Tensor-Core alignment rule: multiples of 8 for 16-bit types,
    16 for 8-bit, 4 for TF32 (NVIDIA Matrix Multiplication Performance guide). A GEMV (M or N
    ≤ 16, e.g. batch-1 decode) is memory-bound whatever its alignment and is never flagged."""
    mult = {"bf16": 8, "fp16": 8, "fp8": 16, "int8": 16, "fp32": 4}.get(dtype or "")
    _, m, n, k = shape
    if not mult or is_gemv(shape):
        return []
    return [f"{d}={v}" for d, v in (("M", m), ("N", n), ("K", k)) if v % mult]


def is_gemv(shape: tuple[int, int, int, int]) -> bool:
    """Matrix-vector-like GEMMs: too few rows or columns to reuse the weights from registers, so
    they are bound by reading the weights from memory, not by Tensor-Core throughput."""
    return min(shape[1], shape[2]) <= 16


def short_name(name: str, width: int = 90) -> str:
    """A kernel name without template noise, for tables."""
    s = name
    if s.startswith("void "):
        s = s[5:]
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
