"""FLOPs and bytes of one operator from its recorded shapes and dtypes (``record_shapes=True``).

FLOPs are counted for the operators whose math dominates a model — GEMMs, convolutions and
attention — as 2 per multiply-add; bytes are the minimum traffic (each input read once, the
output written once), the x axis of a roofline. Unknown shapes give ``None``, never a guess.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Optional, Sequence

from perfstack.profile import classify

# An op's recorded arguments: "Input Dims", "Input type" and "Concrete Inputs" as the trace holds them.
Dims = Optional[Sequence[Any]]
Types = Optional[Sequence[Any]]
Concrete = Optional[Sequence[Any]]

_FLASH = re.compile(r"_flash_attention|_efficient_attention|_cudnn_attention|flash_attn|_scaled_dot_product_flash|"
                    r"_scaled_dot_product_efficient|_scaled_dot_product_cudnn", re.I)
_CONV_FWD = re.compile(r"^aten::(cudnn_convolution|_convolution|convolution|conv\dd|mkldnn_convolution|"
                       r"cudnn_convolution_transpose|conv_transpose\dd)$")


class _ConvArgs(NamedTuple):
    """Where a convolution op's stride, padding, dilation, output padding and groups sit among its
    arguments, and whether it is transposed (an index: read from the op's ``transposed`` argument)."""
    stride: int
    pad: int
    dil: int
    out_pad: int | None = None
    groups: int | None = None
    transposed: bool | int = False


_CONV_ARGS = {
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    "aten::convolution": _ConvArgs(3, 4, 5, 7, 8, transposed=6),
    "aten::_convolution": _ConvArgs(3, 4, 5, 7, 8, transposed=6),
    # (input, weight, padding, stride, dilation, groups, ...)
    "aten::cudnn_convolution": _ConvArgs(3, 2, 4, groups=5),
    # (input, weight, padding, output_padding, stride, dilation, groups, ...)
    "aten::cudnn_convolution_transpose": _ConvArgs(4, 2, 5, 3, 6, transposed=True),
    # (input, weight, bias, padding, stride, dilation, groups)
    "aten::mkldnn_convolution": _ConvArgs(4, 3, 5, groups=6),
    # conv1d/2d/3d (input, weight, bias, stride, padding, dilation, groups)
    "conv": _ConvArgs(3, 4, 5, groups=6),
    # conv_transpose1d/2d/3d (input, weight, bias, stride, padding, output_padding, groups, dilation)
    "conv_transpose": _ConvArgs(3, 4, 7, 5, 6, transposed=True),
}
# convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, ...)
_CONV_BACKWARD_TRANSPOSED = 7


class Cost(NamedTuple):  # one per operator of a trace: a tuple keeps them small on every Python
    flops: float | None  # None: not a FLOP-counted op, or shapes unknown
    bytes: float | None
    dtype: str | None
    shape: str = ""  # a label for tables ("4096x4096x4096", "N64 C256 64x64 k3")
    gemm: tuple[int, int, int, int] | None = None
    big: float | None = None  # bytes of the largest tensor it touches (what a fused chain must still move)
    last_dim: int | None = None  # last dim of that tensor (a vocabulary, a sequence length)
    big_numel: int | None = None  # its element count (ops on the same data share it, whatever the dtype)


def _tensors(dims: Sequence[Any] | None, types: Sequence[Any] | None) -> list[tuple[tuple[int, ...], str | None]]:
    out = []
    for i, d in enumerate(dims or ()):
        shape = classify.dims(d)
        if shape is None:
            continue
        t = types[i] if types and i < len(types) else None
        out.append((shape, classify.DTYPE_NAME.get(t) if isinstance(t, str) else None))
    return out


def _nbytes(shape: tuple[int, ...], dtype: str | None) -> int:
    return classify.numel(shape) * classify.itemsize(dtype)


def _int_list(v: object) -> list[int] | None:
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
        return list(v)
    if isinstance(v, str):
        try:
            xs = [int(x) for x in v.strip("[]() ").split(",") if x.strip()]
        except ValueError:
            return None
        return xs or None
    return None


def cost(name: str, dims: Sequence[Any] | None, types: Sequence[Any] | None, concrete: Sequence[Any] | None = None) -> Cost:
    """The cost of one op call. ``concrete``: Kineto's "Concrete Inputs" (scalar arguments) when present."""
    dtype = classify.op_dtype(types)
    if name in classify.GEMM_OPS or name in ("aten::_int_mm",):
        shape = classify.gemm_shape(name, dims)
        if not shape:
            return Cost(None, None, dtype)
        b, m, n, k = shape
        # a GEMM's operands in the op's dtype (a _scaled_mm's fp8 inputs write a 16-bit output: close enough)
        size = classify.itemsize(dtype)
        label = f"{m}x{n}x{k}" + (f" (batch {b})" if b > 1 else "")
        return Cost(2.0 * b * m * n * k, float(b * (m * k + k * n + m * n) * size), dtype, label, shape)
    if _FLASH.search(name):
        return _attention(name, dims, types, concrete, dtype)
    if _CONV_FWD.match(name) or name == "aten::convolution_backward" or name.startswith("aten::cudnn_convolution_backward"):
        return _conv(name, dims, types, concrete, dtype)
    ts = _tensors(dims, types)
    if not ts:
        return Cost(None, None, dtype)
    total = sum(_nbytes(s, d) for s, d in ts)
    big = max(ts, key=lambda sd: classify.numel(sd[0]))
    if name not in ("aten::copy_", "aten::copy", "aten::_copy_from"):
        # the output: as large as the largest input for element-wise ops (reductions write less)
        total += _nbytes(big[0], big[1])
    return Cost(None, float(total), dtype, big=float(max(_nbytes(s, d) for s, d in ts)),
                last_dim=big[0][-1] if big[0] else None, big_numel=classify.numel(big[0]))


def _attention(name: str, dims: Dims, types: Types, concrete: Concrete, dtype: str | None) -> Cost:
    ts = _tensors(dims, types)
    four = [s for s, _ in ts if len(s) == 4]
    if len(four) < 3:
        return Cost(None, None, dtype)
    q, k, v = four[0], four[1], four[2]
    bwd = "backward" in name
    if bwd and len(four) >= 4:  # backward ops take grad_out first, then q, k, v
        q, k, v = four[1], four[2], four[3]
    # flash layout (B, H, S, D) for SDPA ops; flash_attn's own (B, S, H, D) when the last dim matches
    b, h, sq, d = q
    sk = k[2]
    if d != k[3]:
        return Cost(None, None, dtype)
    causal = _causal(concrete)
    flops = 4.0 * b * h * sq * sk * d * (0.5 if causal else 1.0)
    if bwd:
        flops *= 2.5  # recompute of QK^T plus the dQ, dK, dV products
    size = classify.itemsize(dtype)
    nbytes = float(size * (classify.numel(q) * (3 if bwd else 2) + classify.numel(k) * (2 if bwd else 1)
                           + classify.numel(v) * (2 if bwd else 1)))
    return Cost(flops, nbytes, dtype, f"B{b} H{h} S{sq}x{sk} D{d}" + (" causal" if causal else ""))


def _causal(concrete: Concrete) -> bool:
    """SDPA-family ops take ``dropout_p`` (a float) then ``is_causal``; the profiler records scalar
    arguments as strings in "Concrete Inputs"."""
    args = list(concrete or ())
    for i, c in enumerate(args):
        if isinstance(c, str) and c and ("." in c or "e" in c.lower()) and c.lower() not in ("true", "false"):
            try:
                float(c)
            except ValueError:
                continue
            nxt = args[i + 1] if i + 1 < len(args) else None
            return isinstance(nxt, str) and nxt.strip().lower() == "true"
    return False


def _conv(name: str, dims: Dims, types: Types, concrete: Concrete, dtype: str | None) -> Cost:
    ts = _tensors(dims, types)
    four = [s for s, _ in ts if len(s) == 4]
    size = classify.itemsize(dtype)
    if name.startswith("aten::convolution_backward") or name.startswith("aten::cudnn_convolution_backward"):
        # (grad_output, input, weight, ...): the gradient's spatial size is the output's
        if len(four) < 3:
            return Cost(None, None, dtype)
        go, x, w = four[0], four[1], four[2]
        n, k_out, ho, wo = go
        r, s = w[2], w[3]
        # each weight meets every element of the larger side once: the output's of a convolution, the input's
        # of a transposed one (its weight is (in, out / groups, r, s))
        transposed = _flag(concrete, _CONV_BACKWARD_TRANSPOSED)
        fwd = 2.0 * classify.numel(x if transposed else go) * w[1] * r * s
        grads = 2.0  # input and weight gradients; output_mask says when the input needs none
        mask = next((c for c in reversed(concrete or ()) if isinstance(c, str) and "true" in c.lower()), None)
        if mask:
            flags = [x.strip().lower() == "true" for x in mask.strip("[]() ").split(",")][:2]
            grads = float(sum(flags)) or 2.0
        nbytes = float(size * (classify.numel(go) * 2 + classify.numel(x) * 2 + classify.numel(w) * 2))
        return Cost(fwd * grads, nbytes, dtype, f"N{n} C{x[1]}→K{k_out} {ho}x{wo} k{r}x{s} (backward)")
    if len(four) < 2:
        return Cost(None, None, dtype)
    x, w = four[0], four[1]
    n, c, h, wd = x
    at = _CONV_ARGS.get(name) or _CONV_ARGS["conv_transpose" if "transpose" in name else "conv"]
    args = list(concrete or ())

    def arg(i: int | None) -> list[int] | None:
        return _int_list(args[i]) if i is not None and len(args) > i else None

    stride, pad, dil, out_pad = arg(at.stride), arg(at.pad), arg(at.dil), arg(at.out_pad)
    transposed = at.transposed if isinstance(at.transposed, bool) else _flag(concrete, at.transposed)
    r, s = w[2], w[3]
    groups = max((arg(at.groups) or [1])[0], 1)
    k_out = w[1] * groups if transposed else w[0]
    kind = " transposed" if transposed else ""
    unknown = Cost(None, float(size * (classify.numel(x) + classify.numel(w))), dtype,
                   f"N{n} C{c}→K{k_out} {h}x{wd} k{r}x{s}{kind}")  # (the input's size: the output's is not known)
    if not stride or min(stride) <= 0:  # (unknown, or a trace's nonsense: no figure rather than a wrong one)
        return unknown
    sh, sw = (stride + stride)[:2]
    ph, pw = ((pad or [0]) * 2)[:2]
    dh, dw = ((dil or [1]) * 2)[:2]
    if transposed:  # every input element is scattered through the weight: (in, out / groups, r, s)
        oh, ow = ((out_pad or [0]) * 2)[:2]
        ho = (h - 1) * sh - 2 * ph + dh * (r - 1) + oh + 1
        wo = (wd - 1) * sw - 2 * pw + dw * (s - 1) + ow + 1
        flops = 2.0 * n * c * h * wd * w[1] * r * s
    else:
        ho = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        wo = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
        flops = 2.0 * n * k_out * ho * wo * w[1] * r * s
    if ho <= 0 or wo <= 0:
        return unknown
    nbytes = float(size * (classify.numel(x) + classify.numel(w) + n * k_out * ho * wo))
    return Cost(flops, nbytes, dtype, f"N{n} C{c}→K{k_out} {ho}x{wo} k{r}x{s}{kind}")


def _flag(concrete: Concrete, i: int) -> bool:
    """A boolean argument recorded in "Concrete Inputs" ("True"/"False")."""
    return concrete is not None and len(concrete) > i and str(concrete[i]).strip().lower() == "true"
