"""Communication volume per GPU and its time floor on the GPU-to-GPU link (F38-F42, X4-X6).

    ring all-reduce of S bytes over n GPUs: each GPU sends (and receives) 2·(n−1)/n·S      (X6)
    DP (DDP, ZeRO-1/2): gradients all-reduced (or reduce-scattered + params all-gathered): 2·(n−1)/n·N·b_g
    ZeRO-3 / FSDP: all-gather params in forward and backward + reduce-scatter grads: (n−1)/n·N·(2·b_w + b_g)
    TP (Megatron): 2 all-reduces per layer in forward, 2 in backward, of b·s·d·b_act bytes each   (X4)
    PP: activations forward and gradients backward per micro-batch per stage boundary: 2·b·s·d·b_act (X5)
Time floor = bytes / link bandwidth per direction; α (latency per message) is ignored.
"""

from __future__ import annotations


def ring_allreduce(n: int, size: float) -> float:
    """Bytes each GPU sends in a ring all-reduce of ``size`` bytes over ``n`` GPUs."""
    return 2 * (n - 1) / n * size if n > 1 else 0.0


def data_parallel(n: int, params: float, b_grad: float, b_w: float, zero: int) -> tuple[float, str]:
    if n <= 1:
        return 0.0, "no data parallelism"
    if zero >= 3:
        return (n - 1) / n * params * (2 * b_w + b_grad), \
            "(n−1)/n·N·(2·b_w + b_g)  (ZeRO-3/FSDP: AG fwd + AG bwd + RS grads)"
    return ring_allreduce(n, params * b_grad), "2·(n−1)/n·N·b_g  (ring all-reduce of gradients)"


def tensor_parallel(t: int, layers: float, message: float, passes: int) -> float:
    """``passes`` all-reduces per layer (2 inference, 4 training, 6 with recompute) of ``message`` bytes."""
    return ring_allreduce(t, message) * passes * layers if t > 1 else 0.0


def pipeline_parallel(p: int, message: float, micro_batches: int, training: bool = True) -> float:
    """Bytes one stage sends per step: activations forward (+ their gradients backward)."""
    return (2 if training else 1) * message * micro_batches if p > 1 else 0.0
