"""The fixes ``perfstack try`` can apply to a script from outside it, each a small declared object.

A fix is applied either through the environment the script starts with (``env``) or by a patch the trial
child installs right after the script's ``import torch`` (``trial/_patches.py``, same id). Each says when it
applies (``applies``: None, or why not), whether it changes the numbers the script computes, whether it must
be asked for by name (``opt_in``: it changes start-up time or numerics too much to try unasked), whether it
needs more memory, which profile findings predict a gain for it, and the change that makes it permanent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from perfstack.errors import UsageError

Env = Mapping[str, str]


@dataclass(frozen=True)
class Setting:
    """What a fix may look at to decide whether it applies: the environment the script would start with,
    the processes per node, a preloaded allocator found on this machine, and the finding ids of a profile
    (None when there is no profile)."""

    environ: Env
    nproc: int = 1
    cpus: int = 1
    jemalloc: Optional[str] = None
    findings: Optional[frozenset[str]] = None


@dataclass(frozen=True)
class Fix:
    id: str
    title: str
    advice: str  # the change to make in the script or its launch, shown by --apply-best
    predicted_by: tuple[str, ...] = ()  # profile finding ids whose recoverable time this fix would recover
    env: Optional[Callable[[Setting], dict[str, Optional[str]]]] = None  # variables to set (None: unset)
    applies: Callable[[Setting], Optional[str]] = field(default=lambda s: None)
    changes_numerics: bool = False
    opt_in: bool = False
    needs_memory: bool = False

    @property
    def how(self) -> str:
        return "environment" if self.env is not None else "patched at import"


def _alloc_conf(s: Setting) -> dict[str, Optional[str]]:
    cur = s.environ.get("PYTORCH_CUDA_ALLOC_CONF") or s.environ.get("PYTORCH_ALLOC_CONF") or ""
    parts = [p for p in cur.split(",") if p and not p.startswith("expandable_segments")]
    return {"PYTORCH_CUDA_ALLOC_CONF": ",".join(parts + ["expandable_segments:True"])}


def _alloc_applies(s: Setting) -> Optional[str]:
    cur = (s.environ.get("PYTORCH_CUDA_ALLOC_CONF") or "") + (s.environ.get("PYTORCH_ALLOC_CONF") or "")
    return "expandable_segments:True is already set" if "expandable_segments:True" in cur else None


NCCL_FORCING = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_ALGO", "NCCL_PROTO",
                "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS")


def _nccl_set(s: Setting) -> list[str]:
    return [k for k in NCCL_FORCING if s.environ.get(k)]


def _threads(s: Setting) -> int:
    return max(1, s.cpus // max(1, s.nproc))


def _not_for_one(s: Setting) -> Optional[str]:
    return None if s.nproc > 1 else "one process: no DistributedDataParallel to synchronize (use --nproc N)"


FIXES: dict[str, Fix] = {f.id: f for f in (
    Fix("expandable-segments", "CUDA allocator with expandable segments",
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        predicted_by=("allocator-churn",), env=_alloc_conf, applies=_alloc_applies),
    Fix("tf32", "TF32 for float32 matmuls and convolutions",
        "torch.set_float32_matmul_precision('high'); torch.backends.cudnn.allow_tf32 = True",
        predicted_by=("fp32-matmul", "fp32-conv"), changes_numerics=True),
    Fix("cudnn-benchmark", "cuDNN autotuning of convolution algorithms",
        "torch.backends.cudnn.benchmark = True  (input shapes fixed from step to step)",
        predicted_by=("fp32-conv",)),
    Fix("dataloader-workers", "DataLoader worker processes",
        "DataLoader(..., num_workers=N, persistent_workers=True, prefetch_factor=4)",
        predicted_by=("dataloader-stall",)),
    Fix("pin-memory", "Pinned host memory for the DataLoader's batches",
        "DataLoader(..., pin_memory=True) and .to(device, non_blocking=True)",
        predicted_by=("pageable-memcpy",)),
    Fix("fused-optimizer", "Fused optimizer step", "torch.optim.AdamW(params, ..., fused=True)",
        predicted_by=("optimizer-not-fused",)),
    Fix("foreach-optimizer", "Multi-tensor (foreach) optimizer step", "torch.optim.AdamW(params, ..., foreach=True)",
        predicted_by=("optimizer-not-fused",)),
    # Default compile fuses: of a launch-bound step's launches it removes only those of the kernels it fuses
    # away, which the fusion findings' replay already counts; the per-kernel launch cost of the rest, and the
    # Python between them, stay (a launch-bound step measured -8% compiled by default, H200). So launch-bound
    # predicts the CUDA-graph mode, not this one.
    Fix("compile", "torch.compile of the model", "model.compile()  (or model = torch.compile(model))",
        predicted_by=("unfused-elementwise", "attention-unfused", "large-vocab-loss"), opt_in=True),
    # it compiles first and then replays the whole graph: the profile replays both together (the what-if of this
    # fix's id, summary.COMPILE_GRAPHS), which is its prediction where either finding fired
    Fix("compile-cudagraphs", "torch.compile with CUDA graphs (mode 'reduce-overhead')",
        "model.compile(mode='reduce-overhead')  (static shapes; no CPU work inside the graphed region)",
        predicted_by=("launch-bound", "unfused-elementwise", "attention-unfused", "large-vocab-loss"), opt_in=True),
    Fix("channels-last", "channels_last memory format for a convolutional model",
        "model = model.to(memory_format=torch.channels_last); x = x.to(memory_format=torch.channels_last)",
        predicted_by=("fp32-conv",)),
    Fix("bf16-autocast", "bf16 autocast of the model's forward",
        "with torch.autocast('cuda', dtype=torch.bfloat16): loss = model(x) ...",
        predicted_by=("fp32-matmul", "fp32-conv"), changes_numerics=True, opt_in=True),
    Fix("no-checkpointing", "Activation checkpointing off", "drop torch.utils.checkpoint / "
        "gradient_checkpointing_enable() where memory allows (the peak memory is measured)",
        predicted_by=("activation-recompute",), needs_memory=True),
    Fix("ddp-no-sync", "No gradient all-reduce on accumulation micro-batches",
        "with model.no_sync(): loss.backward()  on every micro-batch but the last of a step",
        predicted_by=("ddp-sync-per-microbatch", "comm-not-overlapped"), applies=_not_for_one),
    Fix("static-kv-cache", "Static KV cache for generate()", "model.generate(..., cache_implementation='static')",
        predicted_by=("copy-bound",), opt_in=True),
    Fix("nccl-defaults", "NCCL's own choices (forcing variables unset)",
        "unset " + " ".join(NCCL_FORCING[:5]) + " ...",
        predicted_by=("comm-not-overlapped",),
        env=lambda s: {k: None for k in _nccl_set(s)},
        applies=lambda s: None if _nccl_set(s) else "no NCCL variable forces a transport or algorithm"),
    Fix("omp-threads", "OpenMP threads sized to the cores per process",
        "export OMP_NUM_THREADS=<cores per process>",
        env=lambda s: {"OMP_NUM_THREADS": str(_threads(s))},
        applies=lambda s: "OMP_NUM_THREADS is already the cores per process"
        if s.environ.get("OMP_NUM_THREADS") == str(_threads(s)) else None),
    Fix("jemalloc", "jemalloc as the host allocator",
        "LD_PRELOAD=libjemalloc.so.2 python train.py",
        env=lambda s: {"LD_PRELOAD": " ".join(x for x in (s.environ.get("LD_PRELOAD"), s.jemalloc) if x)},
        applies=lambda s: "no libjemalloc found on this machine (apt install libjemalloc2)" if not s.jemalloc
        else "jemalloc is already preloaded" if "jemalloc" in (s.environ.get("LD_PRELOAD") or "") else None),
)}


def parse(text: str) -> list[Fix]:
    """``--fix tf32,compile`` → the fixes, in the order given; an unknown id is a usage error naming it."""
    out: list[Fix] = []
    for name in (x.strip() for x in text.split(",")):
        if not name:
            continue
        if name not in FIXES:
            raise UsageError(f"--fix {name}: no such fix", hint="perfstack try --list shows every fix")
        if FIXES[name] not in out:
            out.append(FIXES[name])
    if not out:
        raise UsageError("--fix names no fix", hint="perfstack try --list shows every fix")
    return out


def predicted_for(fix: Fix, findings: Mapping[str, float],
                  replayed: Optional[Mapping[str, float]] = None) -> tuple[Optional[float], list[str]]:
    """The gain a profile predicts for ``fix`` and the ids of the findings that name it; (None, []) when none
    does. The figure is the profile's replay of the fix as a whole where it made one (``replayed``: fix id ->
    recoverable %, a fix that does what several findings name), else the largest of those findings'."""
    hits = {fid: pct for fid, pct in findings.items() if fid in fix.predicted_by}
    if not hits:
        return None, []
    whole = (replayed or {}).get(fix.id)
    return (max(hits.values()) if whole is None else whole), sorted(hits)


def replayed_fixes(whatif: Mapping[str, object]) -> dict[str, float]:
    """A profile's what-ifs (``profile.whatif``: by finding id, or by fix id for a fix replayed as a whole)
    reduced to those of fixes, as fix id -> recoverable %; ``whatif`` as loaded records or their JSON."""
    out: dict[str, float] = {}
    for k, w in whatif.items():
        pct = w.get("pct") if isinstance(w, Mapping) else getattr(w, "pct", None)
        if k in FIXES and isinstance(pct, (int, float)) and not isinstance(pct, bool):
            out[k] = float(pct)
    return out


def environment(fixes: list[Fix], s: Setting) -> dict[str, str]:
    """The environment for an arm with ``fixes``: ``s.environ`` with each fix's variables set or unset."""
    env = dict(s.environ)
    for f in fixes:
        if f.env is None:
            continue
        for k, v in f.env(Setting(env, s.nproc, s.cpus, s.jemalloc, s.findings)).items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
    return env
