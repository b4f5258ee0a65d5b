"""Work a step repeats that it need not (issue 23 items 1, 2 and 4): copies of tensors grown every call
(copy-bound), forward operators re-run in the backward pass (activation-recompute), and all-reduce rounds
after every gradient-accumulation micro-batch under DDP (ddp-sync-per-microbatch).

No false claims is checked on every recorded trace in tests/fixtures/traces (none of them grows a tensor,
checkpoints or accumulates gradients). The structures themselves have no recorded trace yet; their tests
write Kineto events the way torch 2.11's exporter writes them (kineto_events.py) and say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from kineto_events import (ADAM_KERNEL, CAT_KERNEL, COPY_KERNEL, FLASH_KERNEL, GELU_KERNEL, GEMM_KERNEL,
                           NCCL_KERNEL, Kineto)
from perfstack.model import Run, Severity
from perfstack.profile import rules
from perfstack.profile.summary import profile_run
from perfstack.profile.trace import load

T = Path(__file__).parents[1] / "fixtures" / "traces"
NEW = ("copy-bound", "activation-recompute", "ddp-sync-per-microbatch")
SINGLE = sorted([*T.glob("h100/*.pt.trace.json.gz"), *T.glob("validation/h100/*.pt.trace.json.gz"),
                 *T.glob("h200x2/host-sync*.pt.trace.json.gz")])
PAIRS = [sorted(T.glob(f"h200x2/{n}.rank*.pt.trace.json.gz")) for n in ("ddp-not-overlapped", "ddp-not-overlapped-fixed")]
PAIRS += [[T / f"validation/h100x2/{n}.pt.trace.json.gz", T / f"validation/h100x2/{n}.rank1.pt.trace.json.gz"]
          for n in ("ddp-slow", "ddp-fixed", "ddp-comm-bound-slow", "ddp-comm-bound-fixed")]
GIB = 2**30


def finding(run: Run, fid: str):
    return next((f for f in run.findings if f.id == fid), None)


# -- no false claims on the recorded traces ---------------------------------------------------------

@pytest.mark.parametrize("path", SINGLE, ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_recorded_traces_without_these_patterns_do_not_raise_them(path):
    """Training steps (GPT-2, Llama, ResNet-50, attention by hand, MLPs), a batch-1 decode over a static KV
    cache, DataLoader and sync workloads: their copies (cat of rotary halves, stack, clone of activations,
    contiguous before a view) do not grow; nothing is checkpointed or accumulated under DDP."""
    run = profile_run([path])
    assert not {f.id for f in run.findings} & set(NEW)
    w = run.profile.waste
    assert w.activation_recompute is None and w.ddp_sync_per_microbatch is None
    assert w.copy_bound is None or not w.copy_bound.growing_ms


@pytest.mark.parametrize("paths", PAIRS, ids=lambda ps: ps[0].name.split(".")[0])
def test_recorded_ddp_jobs_without_accumulation_do_not_raise_it(paths):
    """One DDP forward (or none: all-reduce by hand) per optimizer step: one all-reduce round each."""
    run = profile_run(paths)
    assert not {f.id for f in run.findings} & set(NEW)
    # DDP in use is recorded for comm-not-overlapped's fix: the fixed variants are DDP, the slow ones reduce by hand
    ddp = run.profile.comm.extra["if_overlapped"]["ddp"]
    assert ddp == ("fixed" in paths[0].name)
    cno = finding(run, "comm-not-overlapped")
    assert cno is None or cno.fix.startswith("Wrap the model in DistributedDataParallel")


def test_the_decode_trace_copies_are_measured_but_not_claimed():
    """The recorded batch-1 decode (static KV cache, tests/fixtures/traces/validation/h100/decode-slow) clones
    activations 1056 times a step: copies, ~11% of its GPU time, none growing: below the share at which
    copies that do not grow are named, and never claimed."""
    from perfstack.profile import copies
    from perfstack.profile.analysis import Analysis
    from perfstack.specs import lookup
    A = Analysis(load(T / "validation/h100/decode-slow.pt.trace.json.gz"))
    calls = copies._calls(A)
    assert {c.name for c in calls} >= {"aten::clone", "aten::index_select"}
    assert not copies._growth(calls)
    total = sum(g.dur for i, g in enumerate(A.gpu) if A.att.step[i] >= 0)
    assert 0.05 < sum(c.time for c in calls) / total < copies.REPORT_SHARE
    assert copies.detect(A, lookup("H100 SXM")) is None


# -- copy-bound ------------------------------------------------------------------------------------

B, H, D, CTX, LAYERS, TOKENS = 8, 8, 128, 4096, 4, 8
KV = B * H * CTX * D * 2  # one layer's K (or V) cache in bf16 at the context length


def decode_trace(tmp_path: Path, static: bool, steps: int = 3, tokens: int = TOKENS) -> Path:
    """Synthetic (no recorded trace of a cat-grown KV cache yet): a 4-layer decoder at batch 8, 8 tokens per
    step from a 4096-token context; each layer's K and V grow by torch.cat along dim 2 (``static``: written
    into a preallocated cache with copy_ on a slice). The cat kernels move the whole cache at 2.5 TB/s; the
    step is GPU-bound (about 180 µs of GPU work per layer and token against about 60 µs of CPU)."""
    k = Kineto()
    pos = CTX
    for _ in range(steps):
        with k.step():
            for _ in range(tokens):
                for _ in range(LAYERS):
                    k.kernel_op("aten::linear", GEMM_KERNEL, 20.0, [[B, 1, 1024], [3072, 1024], [3072]],
                                ["c10::BFloat16"] * 3)
                    for _ in ("k", "v"):
                        if static:
                            k.kernel_op("aten::copy_", COPY_KERNEL, 2.0, [[B, H, 1, D], [B, H, 1, D], []],
                                        ["c10::BFloat16", "c10::BFloat16", "Scalar"], ["", "", "False"])
                        else:
                            moved = 2 * B * H * (pos + 1) * D * 2  # read + written, bf16
                            k.kernel_op("aten::cat", CAT_KERNEL, moved / 2.5e6,
                                        [[[B, H, pos, D], [B, H, 1, D]], []], ["TensorList", "Scalar"], ["", "2"])
                    k.kernel_op("aten::scaled_dot_product_attention", FLASH_KERNEL, 50.0,
                                [[B, H, 1, D], [B, H, pos + 1, D], [B, H, pos + 1, D]], ["c10::BFloat16"] * 3)
                pos += 1
            k.sync()
    return k.write(tmp_path / f"decode-{'static' if static else 'cat'}-{tokens}.pt.trace.json.gz")


def test_a_kv_cache_grown_by_cat_is_copy_bound(tmp_path):
    run = profile_run([decode_trace(tmp_path, static=False)])
    f = finding(run, "copy-bound")
    assert f is not None and run.findings[0].id == "copy-bound", [x.id for x in run.findings]
    assert f.severity is Severity.CRITICAL
    # the cats are 2 x 54 µs of about 180 µs of GPU work per layer and token; fixed, each writes one token
    # (32 KiB) in the 2.5 µs floor: (108 - 5) / 180 ≈ 57% of a GPU-bound step
    assert 50 < f.recoverable_pct < 62
    assert "aten::cat" in f.evidence and "CatArrayBatchedCopy" in f.evidence and "grows by 1 per call" in f.evidence
    e = run.profile.waste.copy_bound
    per_step = TOKENS * LAYERS * 2
    assert e.ops[0].op == "aten::cat" and e.ops[0].growing and e.ops[0].calls_per_step == per_step
    # bytes from the Input Dims (TensorList) and the kernel's OpaqueType<2u>: the cache read and written;
    # all of it but the new token is data already in place
    lengths = [CTX + t + 1 for t in range(3 * TOKENS)]  # 3 steps of 8 tokens
    moved = [2 * B * H * n * D * 2 * LAYERS * 2 for n in lengths]
    assert e.bytes_per_step == pytest.approx(sum(moved) / 3, rel=1e-6)
    assert e.avoidable_bytes_per_step == pytest.approx(sum(m * (1 - 1 / n) for m, n in zip(moved, lengths)) / 3,
                                                       rel=1e-6)
    assert e.fixed_ms == pytest.approx(per_step * 2.5e-3, rel=0.01)
    assert e.hbm_gbps == pytest.approx(3350 * 0.9, rel=0.01)
    assert "cache_implementation='static'" in f.fix


def test_one_token_per_step_over_three_steps_is_enough(tmp_path):
    """Synthetic: one profiler step per generated token, three steps (what perfstack's capture records): each
    layer's cache grows twice in the window, each cat fed the previous one's output."""
    run = profile_run([decode_trace(tmp_path, static=False, tokens=1)])
    f = finding(run, "copy-bound")
    assert f is not None and f.severity is Severity.CRITICAL and 50 < f.recoverable_pct < 62
    assert "4097→4099" in f.evidence


def test_concatenating_a_growing_list_again_each_step(tmp_path):
    """Synthetic: activations appended to a list and the whole list concatenated after every micro-step
    (torch.cat(acts) with one more piece each time): each cat re-copies all the earlier pieces."""
    k = Kineto()
    piece = [64, 256, 1024]
    for _ in range(3):
        with k.step():
            for n in range(1, 9):
                k.kernel_op("aten::linear", GEMM_KERNEL, 30.0, [[64, 256, 1024], [1024, 1024], []],
                            ["c10::BFloat16"] * 3)
                k.kernel_op("aten::cat", CAT_KERNEL, n * 25.0, [[piece] * n, []], ["TensorList", "Scalar"],
                            ["", "0"])
            k.sync()
    run = profile_run([k.write(tmp_path / "list-cat.pt.trace.json.gz")])
    f = finding(run, "copy-bound")
    assert f is not None and "dim 0 grows by 64 per call (64→512" in f.evidence
    e = run.profile.waste.copy_bound
    # the n-th cat writes n pieces where one is new: (1 - 1/n) of each is avoidable
    moved = [2 * n * 64 * 256 * 1024 * 2 for n in range(1, 9)]
    assert e.avoidable_bytes_per_step == pytest.approx(sum(m * (1 - 1 / n) for n, m in enumerate(moved, 1)))


def test_a_prefix_token_on_sequences_of_varying_length_is_not_growth(tmp_path):
    """Synthetic: cat([cls, x]) on batches whose length happens to rise three steps running (512, 600, 777):
    the cat's output is never what the next cat extends, so nothing grows and nothing is claimed."""
    k = Kineto()
    for length in (512, 600, 777):
        with k.step():
            k.kernel_op("aten::linear", GEMM_KERNEL, 300.0, [[8, length, 1024], [1024, 1024], []],
                        ["c10::BFloat16"] * 3)
            k.kernel_op("aten::cat", CAT_KERNEL, 400.0, [[[8, 1, 1024], [8, length, 1024]], []],
                        ["TensorList", "Scalar"], ["", "1"])
            k.sync()
    run = profile_run([k.write(tmp_path / "varlen.pt.trace.json.gz")])
    assert finding(run, "copy-bound") is not None  # the copies are most of the GPU time: named, not claimed
    assert finding(run, "copy-bound").recoverable_ms == 0
    assert not run.profile.waste.copy_bound.growing_ms


def test_the_preallocated_cache_is_not_copy_bound(tmp_path):
    run = profile_run([decode_trace(tmp_path, static=True)])
    assert finding(run, "copy-bound") is None
    assert run.profile.waste.copy_bound is None  # 2 µs slice writes: a few % of the GPU time, nothing grows


def test_copies_that_do_not_grow_are_named_without_a_claim(tmp_path):
    """Synthetic: a step spending most of its GPU time in a fixed-size contiguous() of a large buffer."""
    k = Kineto()
    for _ in range(3):
        with k.step():
            for _ in range(10):
                k.kernel_op("aten::linear", GEMM_KERNEL, 30.0, [[4096, 4096], [4096, 4096], []], ["c10::BFloat16"] * 3)
                with k.op("aten::contiguous", [[64, 4096, 256]], ["c10::BFloat16"], ["", "0"]):
                    k.kernel_op("aten::clone", COPY_KERNEL, 100.0, [[64, 4096, 256]], ["c10::BFloat16"])
            k.sync()
    run = profile_run([k.write(tmp_path / "contiguous.pt.trace.json.gz")])
    f = finding(run, "copy-bound")
    assert f is not None and f.severity is Severity.INFO and f.recoverable_ms == 0
    assert "aten::contiguous" in f.evidence and "cannot tell" in f.evidence
    assert run.profile.waste.copy_bound.ops[0].bytes_per_step == pytest.approx(10 * 2 * 64 * 4096 * 256 * 2)


def test_casts_are_not_copies(tmp_path):
    """Synthetic: aten::to (a dtype cast through _to_copy and copy_) is the fusion finding's, not a copy."""
    k = Kineto()
    for _ in range(3):
        with k.step():
            for _ in range(10):
                with k.op("aten::to", [[64, 4096, 256], [], []], ["float", "Scalar", "Scalar"]):
                    with k.op("aten::_to_copy", [[64, 4096, 256]], ["float"]):
                        k.kernel_op("aten::copy_", COPY_KERNEL, 100.0, [[64, 4096, 256], [64, 4096, 256]],
                                    ["c10::BFloat16", "float"])
            k.sync()
    run = profile_run([k.write(tmp_path / "casts.pt.trace.json.gz")])
    assert finding(run, "copy-bound") is None and run.profile.waste.copy_bound is None


# -- activation-recompute ----------------------------------------------------------------------------

BLOCKS, TOK, HID = 4, 8 * 1024, 1024
ACT = TOK * HID * 2  # one activation of a block's input in bf16


def _block_forward(k: Kineto, tid: int) -> None:
    k.kernel_op("aten::linear", GEMM_KERNEL, 100.0, [[8, 1024, HID], [4 * HID, HID], [4 * HID]],
                ["c10::BFloat16"] * 3, tid=tid)
    k.kernel_op("aten::gelu", GELU_KERNEL, 20.0, [[8, 1024, 4 * HID]], ["c10::BFloat16", ""], tid=tid)
    k.kernel_op("aten::linear", GEMM_KERNEL, 100.0, [[8, 1024, 4 * HID], [HID, 4 * HID], [HID]],
                ["c10::BFloat16"] * 3, tid=tid)


def train_trace(tmp_path: Path, ckpt: str | None, peak: int | None = None, steps: int = 3) -> Path:
    """Synthetic (no recorded trace of activation checkpointing yet): 4 blocks of linear → GELU → linear
    (8×1024 tokens, hidden 1024, bf16), backward on the autograd thread (tid 2); ``ckpt``: each block
    wrapped in torch.utils.checkpoint, 'reentrant' (its forward re-run under CheckpointFunctionBackward
    before a nested backward) or 'nonreentrant' (re-run inside the first backward node that unpacks a saved
    tensor, before that node's own gradient); ``peak``: [memory] events with that peak reserved."""
    k = Kineto()
    for _ in range(steps):
        with k.step():
            for _ in range(BLOCKS):
                if ckpt == "reentrant":
                    with k.op("CheckpointFunction"):
                        _block_forward(k, 1)
                else:
                    _block_forward(k, 1)
            if peak is not None:
                k.memory_event(peak - GIB, peak)
            for _ in range(BLOCKS):
                if ckpt == "reentrant":
                    with k.span("autograd::engine::evaluate_function: CheckpointFunctionBackward", "cpu_op", 2):
                        with k.op("CheckpointFunctionBackward", tid=2):
                            _block_forward(k, 2)
                            _block_backward(k)
                elif ckpt == "nonreentrant":
                    with k.span("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", 2):
                        with k.op("AddmmBackward0", tid=2):
                            _block_forward(k, 2)
                            k.kernel_op("aten::mm", GEMM_KERNEL, 100.0, [[TOK, HID], [HID, 4 * HID]],
                                        ["c10::BFloat16"] * 2, tid=2)
                            k.kernel_op("aten::mm", GEMM_KERNEL, 100.0, [[HID, TOK], [TOK, 4 * HID]],
                                        ["c10::BFloat16"] * 2, tid=2)
                    _block_backward(k, first=False)
                else:
                    _block_backward(k)
            with k.span("Optimizer.step#AdamW.step"):
                k.kernel_op("aten::_fused_adamw_", ADAM_KERNEL, 50.0)
            k.sync()
    return k.write(tmp_path / f"train-{ckpt or 'none'}-{peak}.pt.trace.json.gz")


def _block_backward(k: Kineto, first: bool = True) -> None:
    """A block's backward nodes: the second linear's (if ``first``), GELU's, the first linear's."""
    nodes = (["AddmmBackward0"] if first else []) + ["GeluBackward0", "AddmmBackward0"]
    for node in nodes:
        with k.span(f"autograd::engine::evaluate_function: {node}", "cpu_op", 2):
            with k.op(node, tid=2):
                if node == "GeluBackward0":
                    k.kernel_op("aten::gelu_backward", GELU_KERNEL, 30.0, [[8, 1024, 4 * HID], [8, 1024, 4 * HID]],
                                ["c10::BFloat16"] * 2, tid=2)
                else:
                    for _ in range(2):
                        k.kernel_op("aten::mm", GEMM_KERNEL, 100.0, [[TOK, HID], [HID, 4 * HID]],
                                    ["c10::BFloat16"] * 2, tid=2)


REGION = 8 * 1024 * (HID + 4 * HID + 4 * HID) * 2  # the inputs of linear, GELU, linear in bf16


@pytest.mark.parametrize("ckpt", ["reentrant", "nonreentrant"])
def test_checkpointing_with_memory_to_spare_says_how_many_layers(tmp_path, ckpt):
    run = profile_run([train_trace(tmp_path, ckpt, peak=20 * GIB)])
    f = finding(run, "activation-recompute")
    assert f is not None, [x.id for x in run.findings]
    e = run.profile.waste.activation_recompute
    assert e.regions_per_step == BLOCKS and e.kernels_per_step == 3 * BLOCKS
    assert e.time_ms == pytest.approx(BLOCKS * 0.22, rel=0.01)
    assert e.region_bytes == REGION and e.layers_off == BLOCKS
    assert e.peak_reserved == 20 * GIB and e.total_memory == 85017493504
    assert f"turn checkpointing off for {BLOCKS} of the {BLOCKS} layers" in f.evidence
    assert f"≈ {BLOCKS * REGION / GIB:.1f} GiB more" in f.evidence
    assert f"off for {BLOCKS} of the {BLOCKS}" in f.fix
    # the recompute is 880 of about 3,600 µs of GPU work in a GPU-bound step
    assert 20 < f.recoverable_pct < 27 and f.severity is Severity.WARNING


def test_tight_memory_turns_off_only_what_fits(tmp_path):
    # headroom = 0.9 × total − peak − 1 GiB = 2.5 regions
    peak = int(0.9 * 85017493504 - GIB - 2.5 * REGION)
    run = profile_run([train_trace(tmp_path, "reentrant", peak=peak)])
    f = finding(run, "activation-recompute")
    assert run.profile.waste.activation_recompute.layers_off == 2
    assert "turn checkpointing off for 2 of the 4 layers" in f.evidence
    full = finding(profile_run([train_trace(tmp_path, "reentrant", peak=20 * GIB)]), "activation-recompute")
    assert f.recoverable_ms == pytest.approx(full.recoverable_ms / 2, rel=0.1)


def test_no_headroom_no_finding(tmp_path):
    run = profile_run([train_trace(tmp_path, "reentrant", peak=78 * GIB)])
    assert finding(run, "activation-recompute") is None
    assert run.profile.waste.activation_recompute.layers_off == 0


def test_without_memory_events_it_cannot_tell(tmp_path):
    run = profile_run([train_trace(tmp_path, "nonreentrant", peak=None)])
    f = finding(run, "activation-recompute")
    assert f is not None and f.severity is Severity.INFO and f.recoverable_ms == 0
    assert "cannot tell" in f.evidence and "profile_memory=True" in f.evidence
    assert f.evidence.endswith("measure it: perfstack try --fix no-checkpointing")
    assert "turn checkpointing off for" not in f.evidence


def test_no_checkpointing_no_recompute(tmp_path):
    run = profile_run([train_trace(tmp_path, None, peak=20 * GIB)])
    assert finding(run, "activation-recompute") is None and run.profile.waste.activation_recompute is None


def test_memory_events_and_device_memory_are_read(tmp_path):
    path = train_trace(tmp_path, "reentrant", peak=20 * GIB, steps=1)
    t = load(path)
    assert t.device_memory == {0: 85017493504}
    assert t.peak_reserved == {0: 20 * GIB} and t.peak_allocated == {0: 19 * GIB}
    from perfstack.profile.trace import _load
    lenient = _load(path, lenient=True)
    assert (lenient.peak_reserved, lenient.peak_allocated) == (t.peak_reserved, t.peak_allocated)


def test_recorded_traces_have_the_device_memory_and_no_memory_events():
    t = load(T / "validation/h100/llama-slow.pt.trace.json.gz")
    assert t.device_memory == {0: 85017493504} and t.peak_reserved == {}


# -- ddp-sync-per-microbatch ---------------------------------------------------------------------------

MICRO = 4


def ddp_trace(tmp_path: Path, no_sync: bool, rank: int = 0, steps: int = 3) -> Path:
    """Synthetic (no recorded trace of DDP with gradient accumulation yet): 4 micro-batches per optimizer
    step under DistributedDataParallel; each backward's reducer launches 4 bucket all-reduces (150 µs each,
    on the NCCL stream) and the compute stream waits for them before the next micro-batch (DDP's
    finalize_backward); ``no_sync``: only the last micro-batch all-reduces."""
    k = Kineto(rank=rank, world=2)
    for _ in range(steps):
        with k.step():
            for m in range(MICRO):
                with k.span("DistributedDataParallel.forward"):
                    k.kernel_op("aten::linear", GEMM_KERNEL, 300.0, [[2048, 4096], [4096, 4096], [4096]],
                                ["c10::BFloat16"] * 3)
                done = 0.0
                with k.span("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", 2):
                    with k.op("AddmmBackward0", tid=2):
                        done = k.kernel_op("aten::mm", GEMM_KERNEL, 600.0, [[2048, 4096], [4096, 4096]],
                                           ["c10::BFloat16"] * 2, tid=2)
                if not no_sync or m == MICRO - 1:
                    for _ in range(4):
                        with k.op("c10d::allreduce_", tid=2):
                            with k.op("nccl:all_reduce", tid=2):
                                done = k.launch(NCCL_KERNEL, 150.0, stream=20, tid=2, after=done)
                k.free[7] = max(k.free.get(7, 0.0), done)  # the compute stream waits for the reducer's work
            with k.span("Optimizer.step#AdamW.step"):
                k.kernel_op("aten::_fused_adamw_", ADAM_KERNEL, 100.0)
            k.sync()
    suffix = "" if rank == 0 else f".rank{rank}"
    return k.write(tmp_path / f"ddp-{'nosync' if no_sync else 'sync'}{suffix}.pt.trace.json.gz")


def test_ddp_all_reducing_every_micro_batch(tmp_path):
    run = profile_run([ddp_trace(tmp_path, False, 0), ddp_trace(tmp_path, False, 1)])
    f = finding(run, "ddp-sync-per-microbatch")
    assert f is not None and run.findings[0].id == "ddp-sync-per-microbatch", [x.id for x in run.findings]
    e = run.profile.waste.ddp_sync_per_microbatch
    assert (e.micro_batches, e.rounds, e.kernels_per_round) == (MICRO, MICRO, 4)
    assert e.round_ms == pytest.approx(0.6) and e.extra_ms == pytest.approx(1.8)
    assert e.extra_exposed_ms == pytest.approx(1.8) and e.extra_wait_ms == pytest.approx(0.0)
    # 3 extra rounds of 0.6 ms exposed in a step of 4 × (0.3 + 0.6 + 0.6) + 0.1 ≈ 6.1 ms: ~30%
    assert 25 < f.recoverable_pct < 33
    assert "after 4 of the 4 micro-batches" in f.evidence and "no_sync()" in f.fix
    assert "DistributedDataParallel(" not in f.fix
    cno = finding(run, "comm-not-overlapped")
    assert cno is None or "already under DistributedDataParallel" in cno.fix


def test_ddp_with_no_sync_is_silent(tmp_path):
    run = profile_run([ddp_trace(tmp_path, True, 0), ddp_trace(tmp_path, True, 1)])
    assert finding(run, "ddp-sync-per-microbatch") is None
    assert run.profile.waste.ddp_sync_per_microbatch is None


# -- the checks' wiring --------------------------------------------------------------------------------

def test_new_checks_are_registered_in_order_with_their_docs():
    for cid in NEW:
        c = rules.PROFILE_CHECKS[cid]
        assert cid in rules.ORDER and c.doc and c.why and c.fix and c.measure
    assert rules.ORDER.index("copy-bound") < rules.ORDER.index("gpu-idle")


def test_measured_fixes_are_perfstack_try_fixes_that_name_the_check():
    """A check's ``measure`` ids are fixes of perfstack try whose predicted_by names the check, so the
    'measure it: perfstack try --fix ...' its evidence may end with runs that fix and predicts from it."""
    from perfstack.trial.fixes import FIXES
    named = 0
    for cid, c in rules.PROFILE_CHECKS.items():
        for fix in c.measure:
            assert fix in FIXES and cid in FIXES[fix].predicted_by, (cid, fix)
            named += 1
    assert named >= 13
    assert rules.PROFILE_CHECKS["copy-bound"].measure == ("static-kv-cache",)
    assert rules.PROFILE_CHECKS["activation-recompute"].measure == ("no-checkpointing",)
    assert rules.PROFILE_CHECKS["ddp-sync-per-microbatch"].measure == ("ddp-no-sync",)


def test_a_verdict_resting_on_the_overhead_correction_says_how_to_measure_it():
    """The recorded eager Llama training step (validation/h100/llama-slow): the fp32 loss over its 32k
    vocabulary recovers nothing on the profiled (CPU-bound) step and 11% on the step corrected for the
    profiler's overhead, so its severity rests on the correction; the evidence ends with the perfstack try
    fix that measures it. A finding whose severity does not depend on it does not."""
    run = profile_run([T / "validation/h100/llama-slow.pt.trace.json.gz"])
    f = finding(run, "large-vocab-loss")
    assert "depends on the profiler-overhead correction" in f.evidence
    assert f.evidence.endswith("measure it: perfstack try --fix compile")
    other = finding(run, "unfused-elementwise")
    assert "perfstack try" not in other.evidence
