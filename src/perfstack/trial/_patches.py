"""The fixes a trial applies from inside the script's process, right after its ``import torch``.

Loaded by path from ``_arm.py`` (standard library only at module level; torch is handed in). Each fix is
one function that patches a library default where the script builds it (a DataLoader, an optimizer, the
model's first call) and records in ``applied[fix_id]`` what it changed, so that a fix that found nothing
to change is reported as not applied rather than as "no gain". The fixes applied through the environment
(allocator, NCCL, threads, a preloaded allocator) are set by the parent and need nothing here.

Nothing here outlives the process: the user's files and the installed libraries are never touched.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

# fix id -> {"count": times it changed something, "what": what it changed, or why it changed nothing}
applied: dict[str, dict[str, Any]] = {}
_on_step: list[Callable[[int], None]] = []
on_import: Callable[[str, Callable[[Any], None]], None] | None = None  # set by _arm.py


def _note(fix: str, what: str) -> None:
    """``fix`` changed something: ``what``."""
    a = applied.setdefault(fix, {"count": 0, "what": what})
    a["count"] += 1
    a["what"] = what


def _skip(fix: str, why: str, override: bool = False) -> None:
    """``fix`` found something it could not change (kept unless it changed something elsewhere)."""
    a = applied.setdefault(fix, {"count": 0, "what": why})
    if override:
        a.update(count=0, what=why)


def on_step(n: int) -> None:
    for f in _on_step:
        f(n)


# -- switches ------------------------------------------------------------------------------------

def tf32(torch: Any) -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    set_precision = torch.set_float32_matmul_precision
    set_precision("high")
    _note("tf32", "TF32 on for matmuls and convolutions (float32 matmul precision 'high')")

    @functools.wraps(set_precision)
    def held(precision: str) -> None:
        if precision == "highest":
            _note("tf32", "TF32 on; the script's set_float32_matmul_precision('highest') was held at 'high'")
            return
        set_precision(precision)

    torch.set_float32_matmul_precision = held


def cudnn_benchmark(torch: Any) -> None:
    torch.backends.cudnn.benchmark = True
    _note("cudnn-benchmark", "torch.backends.cudnn.benchmark = True")

    def check(n: int) -> None:
        if n == 1 and not torch.backends.cudnn.benchmark:
            _skip("cudnn-benchmark", "overridden: the script set torch.backends.cudnn.benchmark = False", True)
    _on_step.append(check)


# -- DataLoader ------------------------------------------------------------------------------------

def _dataloader(torch: Any, fix: str, change: Callable[[Any, dict[str, Any]], str]) -> None:
    import inspect

    import torch.utils.data as tud
    cls = tud.DataLoader
    init = cls.__init__
    sig = inspect.signature(init)

    @functools.wraps(init)
    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            kw = dict(bound.arguments)
            kw.pop("self", None)
            extra = kw.pop("kwargs", {}) if "kwargs" in kw else {}
            what = change(tud, kw)
            if what:
                _note(fix, what)
            return init(self, **kw, **extra)
        except TypeError:
            return init(self, *args, **kwargs)

    cls.__init__ = patched  # type: ignore[method-assign]


def _workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, min(8, cpus // max(1, ranks) - 1))


def dataloader_workers(torch: Any) -> None:
    def change(tud: Any, kw: dict[str, Any]) -> str:
        if kw.get("num_workers", 0) != 0:
            return ""
        if isinstance(kw.get("dataset"), tud.IterableDataset):
            _skip("dataloader-workers", "an IterableDataset is replayed whole by every worker unless it shards itself")
            return ""
        n = _workers()
        kw.update(num_workers=n, persistent_workers=True, prefetch_factor=4)
        return f"DataLoader num_workers 0 → {n}, persistent_workers=True, prefetch_factor=4"
    _dataloader(torch, "dataloader-workers", change)


def pin_memory(torch: Any) -> None:
    def change(tud: Any, kw: dict[str, Any]) -> str:
        if kw.get("pin_memory") or not torch.cuda.is_available():
            return ""
        kw["pin_memory"] = True
        return "DataLoader pin_memory=True"
    _dataloader(torch, "pin-memory", change)


# -- optimizers ------------------------------------------------------------------------------------

_FUSED = ("Adam", "AdamW", "SGD", "Adagrad")
_FOREACH = ("Adam", "AdamW", "SGD", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam", "ASGD", "Adadelta")


def _params(p: Any) -> tuple[Any, list[Any]]:
    """The optimizer's params as a list (a generator would be consumed by looking) and every tensor in them."""
    p = list(p)
    tensors: list[Any] = []
    for x in p:
        tensors.extend(x["params"] if isinstance(x, dict) else [x])
    return p, tensors


def _optimizer(torch: Any, names: tuple[str, ...], fix: str, flag: str) -> None:
    for name in names:
        cls = getattr(torch.optim, name, None)
        if cls is None:
            continue
        init = cls.__init__

        def patched(self: Any, params: Any, *args: Any, _init: Any = init, _name: str = name, **kwargs: Any) -> None:
            params, tensors = _params(params)
            fits = tensors and all(getattr(t, "is_cuda", False) and t.is_floating_point() for t in tensors)
            if (flag == "foreach" or fits) and not kwargs.get(flag):
                kwargs[flag] = True
                if flag == "fused":
                    kwargs["foreach"] = None
                _note(fix, f"{_name}({flag}=True)")
            elif flag == "fused" and not fits and not kwargs.get(flag):
                _skip(fix, f"{_name} has parameters that are not floating-point CUDA tensors")
            _init(self, params, *args, **kwargs)

        cls.__init__ = functools.wraps(init)(patched)


def fused_optimizer(torch: Any) -> None:
    _optimizer(torch, _FUSED, "fused-optimizer", "fused")


def foreach_optimizer(torch: Any) -> None:
    _optimizer(torch, _FOREACH, "foreach-optimizer", "foreach")


# -- the model's first call ----------------------------------------------------------------------------

class _TopLevel:
    """Finds the model: the first module with parameters called from outside any other module's call (a loss
    module has none). Until then ``Module.__call__`` is wrapped; once the model is found the wrapper is
    removed, ``first(model)`` runs once, and the model alone gets a subclass whose ``__call__`` runs the
    ``each(call, model, ...)`` wrappers: no other module call pays for a fix, as none does in the unmodified
    script's arm."""

    def __init__(self, torch: Any) -> None:
        self.first: list[Callable[[Any], None]] = []
        self.each: list[Callable[..., Any]] = []
        mod = torch.nn.Module
        call = mod.__call__
        depth = [0]  # inside a module call that is not the model's
        top = self

        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            if depth[0] or not any(True for _ in self.parameters()):
                depth[0] += 1
                try:
                    return call(self, *args, **kwargs)
                finally:
                    depth[0] -= 1
            mod.__call__ = call  # found: every other module's call is torch's own again
            top.adopt(self, call)
            return self(*args, **kwargs)

        mod.__call__ = wrapped

    def adopt(self, model: Any, call: Callable[..., Any]) -> None:
        for f in self.first:
            f(model)
        if not self.each:
            return
        each = list(self.each)

        def model_call(this: Any, *args: Any, **kwargs: Any) -> Any:
            run: Callable[..., Any] = call
            for w in each:
                run = functools.partial(w, run)
            return run(this, *args, **kwargs)

        model.__class__ = type(type(model).__name__, (type(model),), {"__call__": model_call})


_top: _TopLevel | None = None


def _model(torch: Any) -> _TopLevel:
    global _top
    if _top is None:
        _top = _TopLevel(torch)
    return _top


def compile_model(torch: Any, fix: str = "compile", mode: str | None = None) -> None:
    def first(m: Any) -> None:
        m.compile(**({"mode": mode} if mode else {}))
        _note(fix, f"torch.compile of {type(m).__name__} (Module.compile(), mode {mode or 'default'})")
    _model(torch).first.append(first)


def compile_graphs(torch: Any) -> None:
    """CUDA graphs through torch.compile: the launches of a step replayed as one graph."""
    compile_model(torch, "compile-cudagraphs", "reduce-overhead")


def channels_last(torch: Any) -> None:
    state: dict[str, bool] = {}

    def first(m: Any) -> None:
        convs = [x for x in m.modules() if isinstance(x, (torch.nn.Conv2d, torch.nn.ConvTranspose2d))]
        state["on"] = bool(convs)
        if not convs:
            _skip("channels-last", f"{type(m).__name__} has no 2-D convolution")
            return
        m.to(memory_format=torch.channels_last)
        _note("channels-last", f"{type(m).__name__} and its 4-D inputs in channels_last ({len(convs)} convolutions)")

    def each(run: Callable[..., Any], m: Any, *args: Any, **kwargs: Any) -> Any:
        if state.get("on"):
            args = tuple(a.contiguous(memory_format=torch.channels_last)
                         if isinstance(a, torch.Tensor) and a.dim() == 4 else a for a in args)
        return run(m, *args, **kwargs)

    top = _model(torch)
    top.first.append(first)
    top.each.append(each)


def bf16_autocast(torch: Any) -> None:
    """The model's forward under bf16 autocast on the device its parameters live on; floating outputs that come
    out in bf16 are handed back in fp32, so that a loss the script computes outside the model (MSE against an
    fp32 target, say) meets the dtypes it was written for. Entering autocast on every call drops its cache
    of cast weights: a decode loop that calls the model once per token re-casts every weight per token."""
    state: dict[str, str] = {}

    def first(m: Any) -> None:
        p = next(iter(m.parameters()))
        state["device"] = p.device.type
        _note("bf16-autocast", f"{type(m).__name__}'s forward under torch.autocast('{p.device.type}', "
                               "dtype=torch.bfloat16), its bf16 outputs returned as fp32")

    def fp32(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.float() if x.dtype == torch.bfloat16 else x
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return tuple(fp32(v) for v in x)
        if isinstance(x, list):
            return [fp32(v) for v in x]
        return x

    def each(run: Callable[..., Any], m: Any, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(state.get("device", "cuda"), dtype=torch.bfloat16):
            out = run(m, *args, **kwargs)
        return fp32(out)

    top = _model(torch)
    top.first.append(first)
    top.each.append(each)


# -- activation checkpointing ------------------------------------------------------------------------------

def no_checkpointing(torch: Any) -> None:
    import torch.utils.checkpoint as ck
    options = ("use_reentrant", "context_fn", "determinism_check", "debug", "preserve_rng_state")

    def direct(function: Any, *args: Any, **kwargs: Any) -> Any:
        for k in options:
            kwargs.pop(k, None)
        _note("no-checkpointing", "activation checkpointing off: checkpointed blocks run directly")
        return function(*args, **kwargs)

    ck.checkpoint = direct


# -- DDP gradient accumulation ---------------------------------------------------------------------------

def ddp_no_sync(torch: Any) -> None:
    """Skip the gradient all-reduce on every micro-batch but the last of a step, as ``no_sync()`` would.
    The micro-batches per step are counted over the first step (which synchronizes each as the script
    does); from the second step on, the first k-1 forward passes run with gradient sync off."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    state = {"per_step": 0, "seen": 0, "steps": 0}
    forward = DDP.forward

    def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
        state["seen"] += 1
        k = state["per_step"]
        if state["steps"] >= 1 and k > 1 and torch.is_grad_enabled():
            last = state["seen"] >= k
            self.require_backward_grad_sync = last
            if not last:
                _note("ddp-no-sync", f"gradient all-reduce skipped on {k - 1} of {k} micro-batches per step")
        return forward(self, *args, **kwargs)

    def boundary(n: int) -> None:
        if n == 1:
            state["per_step"] = state["seen"]
            if state["seen"] <= 1:
                _skip("ddp-no-sync", "one forward pass per optimizer step (no gradient accumulation)")
        state["steps"], state["seen"] = n, 0

    DDP.forward = patched  # type: ignore[method-assign]
    _on_step.append(boundary)


# -- generate ------------------------------------------------------------------------------------------

def static_kv_cache(torch: Any) -> None:
    def patch(utils: Any) -> None:
        gen = utils.GenerationMixin.generate

        @functools.wraps(gen)
        def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
            if "cache_implementation" not in kwargs and kwargs.get("past_key_values") is None:
                kwargs["cache_implementation"] = "static"
                _note("static-kv-cache", "generate(cache_implementation='static')")
            return gen(self, *args, **kwargs)

        utils.GenerationMixin.generate = generate

    if on_import is None:
        raise RuntimeError("static-kv-cache needs the trial child's import hook")
    on_import("transformers.generation.utils", patch)


INSTALLERS: dict[str, Callable[[Any], None]] = {
    "tf32": tf32,
    "cudnn-benchmark": cudnn_benchmark,
    "dataloader-workers": dataloader_workers,
    "pin-memory": pin_memory,
    "fused-optimizer": fused_optimizer,
    "foreach-optimizer": foreach_optimizer,
    "compile": compile_model,
    "compile-cudagraphs": compile_graphs,
    "channels-last": channels_last,
    "bf16-autocast": bf16_autocast,
    "no-checkpointing": no_checkpointing,
    "ddp-no-sync": ddp_no_sync,
    "static-kv-cache": static_kv_cache,
}


def install(torch: Any, fixes: list[str]) -> None:
    """Apply each fix that patches the process; those applied through the environment need nothing here
    and are recorded as such."""
    for fix in fixes:
        f = INSTALLERS.get(fix)
        if f is None:
            _note(fix, "set in the environment")
            continue
        try:
            f(torch)
        except Exception as e:
            _skip(fix, f"failed to apply: {type(e).__name__}: {e}", True)
