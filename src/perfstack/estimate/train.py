"""``perfstack estimate train``: per-GPU memory, step-time bound and communication for training.

Pure: a ModelSpec, a Hardware and the settings in, an EstimateSheet (values + working) out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from perfstack import specs
from perfstack.errors import UsageError
from perfstack.estimate import activations as act
from perfstack.estimate import comms
from perfstack.estimate import flops as fl
from perfstack.estimate import memory as mem
from perfstack.estimate import params as pc
from perfstack.estimate.config import ModelSpec
from perfstack.estimate.hardware import Hardware
from perfstack.estimate.latency import pipeline_bubble
from perfstack.estimate.quantity import Sheet, q
from perfstack.records.estimates import EstimateSheet

MFU_TRAIN = 0.4  # 001:415/427: 0.40-0.55 is excellent on H100
PRECISIONS = ("fp32", "bf16-mixed", "bf16")
OPTIMIZERS = ("adamw", "sgd", "adafactor", "adam8bit")


@dataclass(frozen=True)
class TrainSettings:
    batch: int  # micro-batch per GPU, sequences
    seq: int
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    grad_ckpt: bool = False
    zero: int = 0
    dp: int = 1
    tp: int = 1
    pp: int = 1
    micro_batches: int = 1  # per step per pipeline (gradient accumulation)
    mfu: float = MFU_TRAIN


def check(m: ModelSpec, s: TrainSettings) -> None:
    for name, v in (("--batch", s.batch), ("--seq", s.seq), ("--dp", s.dp), ("--tp", s.tp), ("--pp", s.pp),
                    ("--micro-batches", s.micro_batches)):
        if v <= 0:
            raise UsageError(f"{name} must be a positive integer, got {v}")
    if m.max_seq_len and s.seq > m.max_seq_len:
        raise UsageError(f"--seq {s.seq:,} exceeds {m.name}'s context of {m.max_seq_len:,} tokens "
                         "(max_position_embeddings)")
    if s.zero not in (0, 1, 2, 3):
        raise UsageError(f"--zero must be 0, 1, 2 or 3, got {s.zero}")
    if s.precision not in PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}")
    if s.optimizer not in OPTIMIZERS:
        raise UsageError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}")
    if m.n_heads % s.tp:
        raise UsageError(f"--tp {s.tp} does not divide the {m.n_heads} attention heads of {m.name}")
    if s.pp > m.n_layers:
        raise UsageError(f"--pp {s.pp} is more than the {m.n_layers} layers of {m.name}")
    if not 0 < s.mfu <= 1:
        raise UsageError(f"--mfu must be in (0, 1], got {s.mfu}")


def _memory(m: ModelSpec, s: TrainSettings) -> mem.TrainingMemory:
    return mem.training(m, s.batch, s.seq, s.precision, s.optimizer, s.grad_ckpt, s.zero, s.dp, s.tp, s.pp,
                        s.micro_batches)


def estimate(m: ModelSpec, hw: Hardware, s: TrainSettings) -> EstimateSheet:
    check(m, s)
    sheet = Sheet()
    c = pc.count(m)
    sheet.add("params", *pc.quantities(m))
    tm = _memory(m, s)
    n_gpu = s.dp * s.tp * s.pp
    T = s.batch * s.seq
    par = {"TP": s.tp, "PP": s.pp, "DP": s.dp, "ZeRO": s.zero}
    shard = lambda st: f"/N_d (ZeRO-{s.zero})" if s.zero >= st and s.dp > 1 else ""  # noqa: E731
    b_p = 2 if s.precision == "bf16" else 4
    opt_f = {"adamw": "8·N (fp32 m and v)", "sgd": "4·N (fp32 momentum)", "adam8bit": "2·N (8-bit m and v)",
             "adafactor": "Σ 4·(rows + cols) per matrix (factored second moment, no momentum)"}[s.optimizer]
    master_f = ("4·N/(TP·PP)" + shard(1) if tm.master else
                "0 (the fp32 parameters are the master copy)" if s.precision == "bf16-mixed" else "0 (fp32 training)")
    layer_terms = act.saved_per_token_per_layer(m, s.precision)
    per_layer = sum(v for _, v in layer_terms)
    saved_f = "B·S·(L/PP)·Σ(per-layer terms)/TP + final norm"
    sheet.add("memory",
              q("params_bytes", "parameters", tm.params, "B", f"{b_p}·N/(TP·PP){shard(3)}", dict(par, N=c.total)),
              q("grads_bytes", "gradients", tm.grads, "B", f"{b_p}·N/(TP·PP){shard(2)}", par,
                ["gradients exist from backward until zero_grad(set_to_none=True)"]),
              q("optimizer_bytes", f"optimizer states ({s.optimizer})", tm.optimizer, "B", opt_f + shard(1), par),
              q("master_weights_bytes", "fp32 master weights", tm.master, "B", master_f, par, list(tm.notes)),
              q("autocast_copies_bytes", "autocast bf16 weight copies", tm.autocast_copies, "B",
                "2·N_linear/(TP·PP)" if tm.autocast_copies else "0 (no autocast)", {"N_linear": c.matmul_total},
                ["torch.autocast caches one bf16 copy per linear weight until autocast exits; backward keeps "
                 "them; HF's grouped-GEMM experts run in fp32 and are not copied"] if tm.autocast_copies else []),
              q("activations_bytes", "activations" + (" (checkpointed)" if s.grad_ckpt else ""), tm.activations, "B",
                ("B·S·(L/PP)·r·d + one layer recomputed" if s.grad_ckpt else saved_f),
                {"B": s.batch, "S": s.seq, "L": m.n_layers, "d": m.d_model, "per_layer_per_token": per_layer},
                [f"{t} = {v:,.0f} B" for t, v in layer_terms]
                + ["1F1B: the first pipeline stage holds min(PP, micro-batches) micro-batches"] * (s.pp > 1)),
              q("activations_no_ckpt_bytes", "activations without checkpointing", tm.activations_no_ckpt, "B",
                saved_f, {}),
              q("activations_ckpt_bytes", "activations with checkpointing", tm.activations_ckpt, "B",
                "B·S·(L/PP)·r·d (layer inputs) + B·S·per-layer (one layer recomputed)", {}),
              q("loss_buffers_bytes", "loss buffers (vocabulary-sized)", tm.loss_buffers, "B", "12·B·S·V/TP",
                {"V": m.vocab_size}, ["fp32 log-probabilities, their gradient and the fp32 logits' gradient "
                                      "are alive together at the start of backward"]),
              q("optimizer_temp_bytes", "optimizer step temporaries", tm.optimizer_temp, "B",
                {"adamw": "4·N/(TP·PP) (foreach Adam builds √v for all parameters)" + shard(1), "sgd": "0",
                 "adam8bit": "0 (fused kernel)", "adafactor": "2·largest tensor·4"}[s.optimizer], {}),
              q("workspace_bytes", "cuBLAS workspaces", tm.workspace, "B", "64 MiB", {},
                ["cuBLAS + cuBLASLt, allocated through PyTorch's caching allocator"]),
              q("peak_forward_backward_bytes", "peak in forward/backward", tm.peak_forward_backward, "B",
                "params + optimizer + master + copies + activations + loss buffers", {}),
              q("peak_optimizer_bytes", "peak in the optimizer step", tm.peak_optimizer, "B",
                "params + grads + optimizer + master + temporaries", {}),
              q("peak_allocated_bytes", "peak allocated (tensors)", tm.peak_allocated, "B",
                "max(forward/backward, optimizer step)", {"phase": tm.peak_phase},
                ["comparable with torch.cuda.max_memory_allocated()"]),
              q("framework_overhead_bytes", "CUDA context + allocator slack", tm.overhead, "B",
                f"{mem.CUDA_CONTEXT / 1e9:g} GB context + {mem.ALLOCATOR_FIXED / 1e9:g} GB + "
                f"{mem.ALLOCATOR_SLACK:.0%} · (peak allocated − parameters)", {}),
              q("total_bytes", "total per GPU", tm.total, "B", "peak allocated + overhead", {}))
    sheet.add("capacity",
              q("gpu_capacity_bytes", f"{hw.spec.name} memory", hw.capacity, "B", "spec table hbm_gb · 1e9", {}),
              q("headroom_bytes", "headroom", hw.capacity - tm.total, "B", "capacity − total", {}))
    # --- time -------------------------------------------------------------------------------
    tokens = T * s.dp * s.micro_batches
    mm, at = fl.training_step(m, tokens, s.seq, s.grad_ckpt)
    F = mm + at
    bubble = pipeline_bubble(s.pp, s.micro_batches)
    ideal = F / (n_gpu * hw.peak_flops)
    t_bound = ideal / (1 - bubble)
    t_exp = t_bound / s.mfu
    k = 8 if s.grad_ckpt else 6
    src = [hw.flops_source]
    sheet.add("time",
              q("step_flops", "FLOPs per step", F, "FLOP",
                f"{k}·N_mm·T + {k // 2}·attention  (T = B·S·DP·micro-batches)",
                {"N_mm": c.matmul_active, "T": tokens, "attention": at},
                ["full recompute adds one forward: 8·N·T (X3)"] if s.grad_ckpt else []),
              q("step_time_s", "step time lower bound", t_bound, "s",
                "FLOPs / (n_GPU·P_peak) / (1 − bubble)", {"n_GPU": n_gpu, "P_peak": hw.peak_flops,
                                                           "bubble": bubble}, src),
              q("step_time_expected_s", f"step time at MFU {s.mfu:g}", t_exp, "s", "step_time_s / MFU",
                {"MFU": s.mfu}, ["001:427: MFU 0.40-0.55 is excellent on H100; < 0.30 means memory- or "
                                 "communication-bound"]),
              q("tokens_per_s", "tokens/s (bound)", tokens / t_bound, "tok/s", "T / step time", {}),
              q("tokens_per_s_expected", f"tokens/s at MFU {s.mfu:g}", tokens / t_exp, "tok/s",
                "T / expected step time", {}),
              q("pipeline_bubble_fraction", "pipeline bubble", bubble, "fraction", "(p − 1)/(m + p − 1)",
                {"p": s.pp, "m": s.micro_batches}))
    # --- communication ------------------------------------------------------------------------
    b_act = 4 if s.precision == "fp32" else 2
    local_params = c.total / (s.tp * s.pp)
    dp_b, dp_f = comms.data_parallel(s.dp, local_params, 4 if s.precision != "bf16" else 2, b_p, s.zero)
    msg = s.batch * s.seq * m.d_model * b_act
    passes = 6 if s.grad_ckpt else 4
    tp_b = comms.tensor_parallel(s.tp, m.n_layers / s.pp, msg, passes) * s.micro_batches
    pp_b = comms.pipeline_parallel(s.pp, msg, s.micro_batches)
    link = hw.link_bw or float("nan")
    sheet.add("comms",
              q("dp_bytes", "DP traffic per GPU per step", dp_b, "B", dp_f, {"n": s.dp, "N_local": local_params}),
              q("tp_bytes", "TP traffic per GPU per step", tp_b, "B",
                f"{passes}·(L/PP)·2·(t−1)/t·b·s·d·b_act · micro-batches", {"t": s.tp, "message": msg}),
              q("pp_bytes", "PP traffic per stage per step", pp_b, "B", "2·b·s·d·b_act · micro-batches",
                {"p": s.pp, "message": msg}),
              q("comm_time_s", "communication time floor", (dp_b + tp_b + pp_b) / link if hw.link_bw else 0.0, "s",
                "(DP + TP + PP bytes) / link bandwidth per direction", {"link": hw.link},
                ["all groups assumed inside one node's GPU-to-GPU link; overlap with compute not counted (F22)"]))
    return EstimateSheet.of({
        "kind": "train",
        "model": dict(m.to_dict(), description=m.describe()),
        "gpu": hw.to_dict(),
        "settings": asdict(s),
        **sheet.values(),
        "regime": {"step": "compute-bound (6·N·T against peak)"},
        "fit": fits(m, s),
        "assumptions": list(hw.assumptions) + [
            "eager PyTorch (Hugging Face style) training: AdamW via foreach ops, SDPA/FlashAttention, loss "
            "upcast to fp32", "peaks: " + hw.flops_source],
        "working": sheet.working(),
    })


def fits(m: ModelSpec, s: TrainSettings) -> list[dict[str, Any]]:
    tm = _memory(m, s)
    return [{"gpu": g.id, "name": g.name, "capacity_bytes": g.hbm_gb * 1e9, "per_gpu_total_bytes": tm.total,
             "fits": tm.total <= g.hbm_gb * 1e9, "gpus_in_job": s.dp * s.tp * s.pp}
            for g in specs.load() if g.hbm_gb]
