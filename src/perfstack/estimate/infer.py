"""``perfstack estimate infer``: memory, capacity and roofline latency for serving one model.

Pure: a ModelSpec, a Hardware and the settings in, an EstimateSheet (values + working) out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from perfstack import specs
from perfstack.errors import UsageError
from perfstack.estimate import flops as fl
from perfstack.estimate import kernels as kn
from perfstack.estimate import memory as mem
from perfstack.estimate import params as pc
from perfstack.estimate.activations import prefill_working_per_token
from perfstack.estimate.comms import ring_allreduce
from perfstack.estimate.config import ModelSpec
from perfstack.estimate.hardware import Hardware
from perfstack.estimate.latency import Bound, moe_experts_touched, ridge, roofline
from perfstack.estimate.quantity import Sheet, q
from perfstack.records.estimates import EstimateSheet

# With the fixed cost per kernel counted apart (estimate/kernels.py), the utilisations are those of the
# big kernels alone: prefill GEMMs reached 0.53-0.64 of the dense peak on the truth set (3B-8B, H100 and
# H200; 001:437 gives 0.4-0.6 for whole prefills), and a decode step's weight reads stream at the 91-93%
# of peak that bench's hbm.read measures (001:439's 0.6-0.8 for whole steps held the kernel floor too).
MFU_PREFILL = 0.6
MBU_DECODE = 0.9


@dataclass(frozen=True)
class InferSettings:
    batch: int
    prompt: int
    gen: int
    dtype: str = "bf16"  # weights (unless quantized) and activations
    weights: str | None = None  # int8 | int4 | fp8
    kv_dtype: str | None = None  # fp8, else = dtype
    tp: int = 1
    prefill_chunk: int | None = None
    mfu: float = MFU_PREFILL
    mbu: float = MBU_DECODE
    launch: str = "graph"  # graph: kernels replayed from CUDA graphs; eager: launched from Python each step


def check(m: ModelSpec, s: InferSettings) -> None:
    for name, v in (("--batch", s.batch), ("--prompt", s.prompt), ("--gen", s.gen), ("--tp", s.tp)):
        if v <= 0:
            raise UsageError(f"{name} must be a positive integer, got {v}")
    if s.prefill_chunk is not None and s.prefill_chunk <= 0:
        raise UsageError(f"--prefill-chunk must be positive, got {s.prefill_chunk}")
    if m.max_seq_len and s.prompt + s.gen > m.max_seq_len:
        raise UsageError(f"prompt + generated tokens = {s.prompt + s.gen:,} exceeds {m.name}'s context of "
                         f"{m.max_seq_len:,} tokens (max_position_embeddings)",
                         hint="lower --prompt/--gen, or pass --max-seq-len if the model was extended")
    if m.n_heads % s.tp:
        raise UsageError(f"--tp {s.tp} does not divide the {m.n_heads} attention heads of {m.name}")
    for name, fraction in (("--mfu", s.mfu), ("--mbu", s.mbu)):
        if not 0 < fraction <= 1:
            raise UsageError(f"{name} must be in (0, 1], got {fraction}")
    if s.launch not in kn.LAUNCH_MODES:
        raise UsageError(f"--launch must be one of {', '.join(kn.LAUNCH_MODES)}, got {s.launch!r}")


def _memory(m: ModelSpec, s: InferSettings, tp: int) -> mem.InferenceMemory:
    b = mem.DTYPE_BYTES[s.dtype]
    b_kv = mem.DTYPE_BYTES[s.kv_dtype] if s.kv_dtype else b
    return mem.inference(m, s.batch, s.prompt, s.gen, mem.ElementBytes(weights=b, activations=b, kv=b_kv, quant=s.weights),
                         tp=tp, prefill_chunk=s.prefill_chunk)


def fits(m: ModelSpec, s: InferSettings) -> list[dict[str, Any]]:
    """For every GPU in the spec table: how many GPUs (tensor-parallel) hold this workload."""
    rows = []
    for g in specs.load():
        if not g.hbm_gb:
            continue
        cap = g.hbm_gb * 1e9
        need, per_gpu = None, None
        compute = "fp8" if s.weights == "fp8" else s.dtype
        if g.peak_tflops(compute) is None and (compute != "fp8" or g.peak_tflops(s.dtype) is None):
            rows.append({"gpu": g.id, "name": g.name, "capacity_bytes": cap, "gpus_needed": None,
                         "per_gpu_total_bytes": None, "fits_one": False, "reason": f"no {s.dtype} support"})
            continue
        for tp in (1, 2, 4, 8, 16, 32, 64):
            if m.n_heads % tp:
                continue
            mi = _memory(m, s, tp)
            if mi.total <= cap:
                need, per_gpu = tp, mi.total
                break
        rows.append({"gpu": g.id, "name": g.name, "capacity_bytes": cap, "gpus_needed": need,
                     "per_gpu_total_bytes": per_gpu, "fits_one": need == 1})
    return rows


_EXPECTED = {
    "graph": "max(FLOPs / (P_peak·MFU), bytes / (BW_HBM·MBU)) + K·t_k",
    "eager": "max(max(FLOPs / (P_peak·MFU), bytes / (BW_HBM·MBU)) + K·t_k, K·t_host)",
}


def _expected(b: Bound, floor_s: float, host_s: float) -> tuple[float, str]:
    """The expected time of a step whose big kernels take ``b`` (at the utilisations given), with the
    kernels' fixed cost beside it, and what bounds it: compute, memory, or the kernels' launch (their
    fixed cost, or the host issuing them, is the larger part)."""
    gpu = b.seconds + floor_s
    t = max(gpu, host_s)
    if host_s > gpu or floor_s > b.seconds:
        return t, "launch-bound"
    return t, b.regime


def estimate(m: ModelSpec, hw: Hardware, s: InferSettings) -> EstimateSheet:
    check(m, s)
    sheet = Sheet()
    c = pc.count(m)
    sheet.add("params", *pc.quantities(m))
    b = mem.DTYPE_BYTES[s.dtype]
    b_kv = mem.DTYPE_BYTES[s.kv_dtype] if s.kv_dtype else b
    tp = s.tp
    mi = _memory(m, s, tp)
    B, P, G = s.batch, s.prompt, s.gen
    wq = f" (block matrices {s.weights}: {mem.QUANT_BYTES[s.weights]:g} B each incl. scales)" if s.weights else ""
    base = {"N": c.total, "b_w": b, "TP": tp}
    kv = mem.kv_cache(m, b_kv, tp)
    sym = {"L": m.n_layers, "H_kv": m.n_kv_heads, "d_h": m.head_dim, "b_kv": b_kv, "TP": tp}
    if m.mla:
        sym = {"L": m.n_layers, "r_kv": m.mla.kv_lora_rank, "d_rope": m.mla.qk_rope_head_dim, "b_kv": b_kv}
    ws_terms = prefill_working_per_token(m, b)
    chunk = min(P, s.prefill_chunk) if s.prefill_chunk else P
    sheet.add("memory",
              q("weights_bytes", "weights", mi.weights, "B", "N·b_w / TP" + wq, base,
                ["embeddings, norms and lm_head stay in --dtype"] if s.weights else []),
              q("kv_cache_per_token_bytes", "KV cache per token", mi.kv_per_token, "B", kv.formula, sym,
                ["MLA caches the compressed latent (as vLLM/SGLang do)"] if m.mla else []),
              q("kv_cache_bytes", "KV cache (all sequences)", mi.kv_total, "B",
                "kv_tok · B · (S_prompt + N_gen)", {"kv_tok": mi.kv_per_token, "B": B, "S_prompt": P, "N_gen": G}),
              q("activations_bytes", "activations (prefill working set)", mi.prefill_working, "B",
                "B·S_chunk·w_tok + B·V·(b + 8)",
                {"B": B, "S_chunk": chunk, "V": m.vocab_size, "b": b, "w_tok": sum(v for _, v in ws_terms)},
                [f"w_tok = {t}" for t, _ in ws_terms]
                + ["eager PyTorch forward over the whole prompt (no autograd); serving engines that chunk "
                   "the prefill hold less (--prefill-chunk)", "logits only for the last position, an fp32 copy "
                   "and the sampler's scores: V·(b + 8) per sequence"]),
              q("decode_working_bytes", "decode working set", mi.decode_working, "B",
                "B·(V·(b + 8) + one layer's K or V being grown + (2·d + 3·F)·b)", {"B": B}),
              q("workspace_bytes", "cuBLAS workspaces", mi.workspace, "B", "64 MiB",
                {}, ["cuBLAS + cuBLASLt, allocated through PyTorch's caching allocator"]),
              q("peak_allocated_bytes", "peak allocated (tensors)", mi.peak_allocated, "B",
                "weights + workspace + max(B·(KV(S_prompt) + prefill), B·(KV(S_prompt+N_gen) + decode))",
                {"phase": mi.peak_phase}, ["comparable with torch.cuda.max_memory_allocated()"]),
              q("framework_overhead_bytes", "CUDA context + allocator slack", mi.overhead, "B",
                f"{mem.CUDA_CONTEXT / 1e9:g} GB context + {mem.ALLOCATOR_FIXED / 1e9:g} GB + "
                f"{mem.ALLOCATOR_SLACK:.0%} · (peak allocated − weights)", {},
                ["not seen by torch.cuda.max_memory_allocated(); 001:801 gives 1-2 GB of overhead; "
                 "context and slack measured on H100 (docs/estimate.md)"]),
              q("total_bytes", "total per GPU", mi.total, "B", "peak allocated + overhead", {}))
    cap = hw.capacity
    bmax = mem.max_batch(mi, cap)
    sheet.add("capacity",
              q("gpu_capacity_bytes", f"{hw.spec.name} memory", cap, "B", "spec table hbm_gb · 1e9",
                {"hbm_gb": hw.spec.hbm_gb}),
              q("headroom_bytes", "headroom", cap - mi.total, "B", "capacity − total", {}),
              q("max_batch", "largest batch that fits", bmax, "count",
                "⌊((capacity − context − 0.5 GB − weights)/(1 + slack) − workspace) / per-sequence bytes⌋",
                {"per_sequence_bytes": max(mi.per_seq_prefill, mi.per_seq_decode)},
                [f"per sequence: KV at {P + G} tokens plus its share of the working set",
                 "every prompt prefilled at once (as HF generate does); --prefill-chunk models a serving engine"]))
    # --- time -------------------------------------------------------------------------------
    pmm, pat = fl.prefill(m, B, P)
    pbytes = mi.weights + B * kv.per_seq(P)
    pre = roofline((pmm + pat) / tp, pbytes, hw.peak_flops, hw.hbm_bw)
    pre_x = roofline((pmm + pat) / tp, pbytes, hw.peak_flops, hw.hbm_bw, s.mfu, s.mbu)
    ctx = P + (G - 1) / 2
    dmm, dat = fl.decode_step(m, B, ctx)
    wbytes = mi.weights
    moe_note = []
    if m.moe:
        mo = m.moe
        touched = moe_experts_touched(mo.n_routed, mo.top_k, B)
        expert_w = sum(w.total for w in pc.weights(m) if w.kind == "expert")
        eb = mem.QUANT_BYTES[s.weights] if s.weights else b
        wbytes = mi.weights - expert_w * eb / tp * (1 - touched / mo.n_routed)
        moe_note = [f"MoE: a step reads ≈{touched:.1f} of {mo.n_routed} experts per layer at B={B}: "
                    "E·(1−(1−k/E)^B) (X12)"]
    dbytes = wbytes + B * kv.per_seq(ctx)
    dec = roofline((dmm + dat) / tp, dbytes, hw.peak_flops, hw.hbm_bw)
    dec_x = roofline((dmm + dat) / tp, dbytes, hw.peak_flops, hw.hbm_bw, s.mfu, s.mbu)
    touched_e = moe_experts_touched(m.moe.n_routed, m.moe.top_k, B) if m.moe else None
    kc = kn.count(m, touched_e)
    host_us = hw.host_launch_us or kn.HOST_US
    k_step = kc.per_step
    floor_s = k_step * kn.FLOOR_US * 1e-6  # every GPU of a tensor-parallel group launches every kernel
    host_s = kn.host_s(k_step, s.launch, host_us)
    pre_e = _expected(pre_x, floor_s, host_s)
    comm_s, comm_b = 0.0, 0.0
    if tp > 1 and hw.link_bw:
        comm_b = ring_allreduce(tp, B * m.d_model * b) * 2 * m.n_layers
        comm_s = comm_b / hw.link_bw
    dec_e = _expected(dec_x, floor_s, host_s)
    hwin = {"P_peak": hw.peak_flops, "BW_HBM": hw.hbm_bw}
    src = [hw.flops_source, hw.bw_source]
    sheet.add("flops",
              q("prefill_flops", "prefill FLOPs", pmm + pat, "FLOP",
                "2·N_mm·B·S_prompt + a·B·S_prompt(S_prompt+1)/2",
                {"N_mm": c.matmul_active, "B": B, "S_prompt": P, "a": fl.attn_flops_per_pair(m), "attention": pat},
                ["causal attention counted at full cost (kernels that skip masked blocks do the same work)"]),
              q("prefill_bytes", "prefill bytes (weights + KV written)", pbytes, "B", "weights + B·KV(S_prompt)", {}),
              q("decode_step_flops", "decode FLOPs per step", dmm + dat, "FLOP",
                "2·N_mm·B + a·B·S̄", {"N_mm": c.matmul_active, "B": B, "S̄": ctx, "a": fl.attn_flops_per_pair(m)},
                ["a = FLOPs per (query, key) pair over all layers: 4·L·H_q·d_h (MLA: 2·L·H·(d_qk + d_v)); "
                 "window layers attend to at most W keys"]),
              q("decode_step_bytes", "decode bytes per step", dbytes, "B", "weights read + B·kv_tok·S̄",
                {"S̄": ctx}, moe_note),
              q("ridge_flop_per_byte", "ridge point", ridge(hw.peak_flops, hw.hbm_bw), "FLOP/B", "P_peak / BW_HBM",
                hwin, src),
              q("decode_intensity_flop_per_byte", "decode arithmetic intensity", dec.intensity, "FLOP/B",
                "decode FLOPs / decode bytes ≈ 2B/b_w", {}))
    sheet.add("time",
              q("ttft_s", "TTFT lower bound (prefill)", pre.seconds, "s",
                "max(prefill FLOPs / (TP·P_peak), prefill bytes / (TP·BW_HBM))",
                dict(hwin, compute_s=pre.compute_s, memory_s=pre.memory_s), src + [f"{pre.regime}"]),
              q("itl_s", "ITL lower bound (per decode step)", dec.seconds + comm_s, "s",
                "max(step FLOPs / P_peak, step bytes / BW_HBM)" + (" + TP all-reduce bytes / link" if comm_s else ""),
                dict(hwin, compute_s=dec.compute_s, memory_s=dec.memory_s, comm_s=comm_s),
                src + [f"{dec.regime}", f"average context S̄ = S_prompt + (N_gen − 1)/2 = {ctx:g}"]),
              q("e2e_s", "end-to-end lower bound", pre.seconds + (G - 1) * (dec.seconds + comm_s), "s",
                "TTFT + (N_gen − 1)·ITL", {"N_gen": G}),
              q("prefill_tokens_per_s", "prefill throughput (bound)", B * P / pre.seconds, "tok/s", "B·S_prompt / TTFT",
                {}),
              q("decode_tokens_per_s", "decode throughput (bound)", B / (dec.seconds + comm_s), "tok/s", "B / ITL",
                {}, ["aggregate over the batch; each sequence gets 1/ITL (F15; ITL does not fall as 1/B)"]),
              q("ttft_expected_s", f"TTFT at MFU {s.mfu:g}, kernels {s.launch}", pre_e[0], "s",
                _EXPECTED[s.launch], {"MFU": s.mfu, "MBU": s.mbu, "K": k_step, "t_k_us": kn.FLOOR_US,
                                      **({"t_host_us": host_us} if s.launch == "eager" else {})},
                [f"bound by {pre_e[1]}", "MFU of the big GEMMs: 0.53-0.64 measured on the truth set (docs/estimate.md)"]),
              q("itl_expected_s", f"ITL at MBU {s.mbu:g}, kernels {s.launch}", dec_e[0] + comm_s, "s",
                _EXPECTED[s.launch] + (" + TP all-reduce" if comm_s else ""),
                {"MFU": s.mfu, "MBU": s.mbu, "K": k_step, "t_k_us": kn.FLOOR_US,
                 **({"t_host_us": host_us} if s.launch == "eager" else {})},
                [f"bound by {dec_e[1]}", "MBU: the share of peak a weight read streams at (bench hbm.read: 91-93%)"]))
    sheet.add("flops",
              q("kernels_per_step", "kernels per forward step", k_step, "count",
                "L · k_layer + k_outside", {"L": m.n_layers, "k_layer": round(kc.layers / m.n_layers, 2),
                                            "k_outside": kc.outside},
                ["per dense layer, as a compiled decoder runs it: "
                 + ", ".join(f"{n}{f' ×{k}' if k > 1 else ''}" for n, k in kc.items)]
                + ([f"MoE layers: router, top-k and 3 kernels per expert read ({touched_e:.1f} routed at B={B})"]
                   if m.moe else [])
                + ["an engine with fused add-norm and rotary-cache kernels runs 10-12 per layer"]))
    sheet.add("time",
              q("kernel_floor_s", "fixed GPU cost of those kernels", floor_s, "s", "K · t_k",
                {"K": k_step, "t_k_us": kn.FLOOR_US},
                ["t_k: a kernel's cost beyond its bytes (launch, memory latency, ramp and tail), 3.5-3.7 µs on "
                 "every row of the H100/H200 truth set"]),
              q("host_launch_s", "host time to launch them", host_s, "s",
                "0 (replayed from a CUDA graph)" if s.launch == "graph" else "K · t_host",
                {"K": k_step, "t_host_us": host_us} if s.launch == "eager" else {},
                [hw.host_source] if s.launch == "eager" else []))
    if tp > 1:
        sheet.add("comms", q("tp_decode_bytes", "TP all-reduce bytes per decode step per GPU", comm_b, "B",
                             "2·L · 2·(TP−1)/TP · B·d·b", {"TP": tp, "L": m.n_layers, "d": m.d_model},
                             [hw.link]))
    return EstimateSheet.of({
        "kind": "infer",
        "model": dict(m.to_dict(), description=m.describe()),
        "gpu": hw.to_dict(),
        "settings": asdict(s),
        **sheet.values(),
        "regime": {"prefill": pre_e[1], "decode": dec_e[1]},
        "fit": fits(m, s),
        "assumptions": list(hw.assumptions) + [
            "the bounds are rooflines (MFU = MBU = 1); *_expected_s add each kernel's fixed cost to the big kernels "
            "at the MFU and MBU given (--launch eager: the host's launches can bound the step)",
            "peaks: " + hw.flops_source + "; " + hw.bw_source],
        "working": sheet.working(),
    })
