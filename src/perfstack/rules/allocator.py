"""Allocator checks: the CUDA caching allocator's configuration, read from the environment the way
torch parses it (c10 AllocatorConfig / CUDAAllocatorConfig)."""

from __future__ import annotations

import re

from perfstack.model import Facts, NotApplicable
from perfstack.rules.common import env_of, is_true, require_gpu, version_tuple
from perfstack.rules.registry import Hit, Hits, check
from perfstack.sources import INFRA_ARTICLE


# Every key some torch release accepts (torch 2.1 .. 2.11). A key newer than the installed torch
# still fails there; torch's own complaint (python.errors['cuda_init']) catches that case.
BOOL_KEYS = {"expandable_segments", "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
             "pinned_use_cuda_host_register", "pinned_use_hip_host_register", "pinned_use_background_threads",
             "graph_capture_record_stream_reuse", "pinned_free_catch_all", "throw_on_cudamalloc_oom"}
SIZE_KEYS = {"max_split_size_mb", "max_non_split_rounding_mb", "large_segment_size_mb", "pinned_num_register_threads",
             "pinned_reserve_segment_size_mb", "pinned_max_round_threshold_mb", "pinned_max_cached_size_mb"}
OTHER_KEYS = {"backend", "garbage_collection_threshold", "roundup_power2_divisions", "per_process_memory_fraction"}
KEYS = BOOL_KEYS | SIZE_KEYS | OTHER_KEYS
# Options the cudaMallocAsync backend ignores (torch warns, and they silently do nothing).
NATIVE_ONLY = ("max_split_size_mb", "garbage_collection_threshold", "roundup_power2_divisions", "expandable_segments")
LARGE_BUFFER_MB = 20  # torch rejects max_split_size_mb below its 20 MiB large-buffer size


def parse_alloc_conf(text: str) -> list[tuple[str, str]]:
    """'expandable_segments:True, max_split_size_mb:128' -> [(key, value), ...], tokenised as torch does:
    whitespace ignored, items split at commas outside [...], key and value split at the first ':'.
    Raises ValueError for an item without ':' or unbalanced brackets."""
    text = re.sub(r"\s+", "", text)
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if depth < 0:
            raise ValueError(f"unbalanced ']' at character {i + 1}")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced '['")
    items.append(text[start:])
    pairs = []
    for item in filter(None, items):
        key, sep, value = item.partition(":")
        if not sep or not key or not value:
            raise ValueError(f"'{item}' is not key:value")
        pairs.append((key, value))
    return pairs


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def problems(pairs: list[tuple[str, str]]) -> list[str]:
    """What torch would reject (or silently ignore) in a parsed configuration."""
    out = [p for key, value in pairs if (p := _problem(key, value))]
    if ("backend", "cudaMallocAsync") in pairs:
        keys = [k for k, _ in pairs]
        ignored = [k for k in NATIVE_ONLY if k in keys]
        if ignored:
            out.append(f"backend:cudaMallocAsync ignores {', '.join(ignored)}")
    return out


def _problem(key: str, value: str) -> str | None:
    """What is wrong with one option, or None."""
    if key not in KEYS:
        return f"unknown option '{key}'"
    if key in BOOL_KEYS and value not in ("True", "False"):
        return f"{key}:{value} must be True or False (capitalised)"
    if key in SIZE_KEYS and not value.isdigit():
        return f"{key}:{value} is not a whole number"
    if key == "max_split_size_mb" and int(value) < LARGE_BUFFER_MB:
        return f"max_split_size_mb:{value} is below the {LARGE_BUFFER_MB} MB minimum"
    if key == "pinned_num_register_threads" and not (_pow2(int(value)) and int(value) <= 128):
        return f"pinned_num_register_threads:{value} must be a power of 2 up to 128"
    if key == "backend" and value not in ("native", "cudaMallocAsync"):
        return f"backend:{value} must be native or cudaMallocAsync"
    if key in ("garbage_collection_threshold", "per_process_memory_fraction"):
        try:
            ok = 0.0 < float(value) < 1.0 if key == "garbage_collection_threshold" else 0.0 < float(value) <= 1.0
        except ValueError:
            ok = False
        return None if ok else f"{key}:{value} is out of range"
    if key == "roundup_power2_divisions" and not value.startswith("[") and not (value.isdigit()
                                                                               and _pow2(int(value))):
        return f"roundup_power2_divisions:{value} must be a power of 2"
    return None


@check("alloc-conf", "allocator", "warning", "CUDA allocator configuration is wrong or missing expandable segments",
       doc="Parses PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF (comma-separated key:value). A warning for "
           "unknown options, bad values (booleans must be True/False, max_split_size_mb >= 20, "
           "garbage_collection_threshold in (0, 1), power-of-2 roundups, backend native|cudaMallocAsync), options "
           "cudaMallocAsync ignores, torch's own rejection of the setting, both variables set to different "
           "values, and the new name alone where torch ignores it (before 2.8; expandable_segments on 2.9). "
           "Info when expandable_segments:True is missing with the native backend.",
       why="torch parses the setting at CUDA start-up: a bad option makes the first CUDA call raise, and an "
           "ignored one silently leaves the default. With fixed-size segments, varying allocation sizes "
           "(variable sequence lengths, dynamic batches, LLM serving) fragment memory and end in OOMs while "
           "memory looks free; expandable_segments (torch 2.1+, vLLM's default) grows segments instead. "
           "Current torch reads PYTORCH_CUDA_ALLOC_CONF first and ignores PYTORCH_ALLOC_CONF when both are set "
           "(checked on torch 2.11); torch 2.9 ignored expandable_segments given under the new name "
           "(pytorch/pytorch#183387).",
       fix="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (and the same in PYTORCH_ALLOC_CONF on torch "
           ">= 2.10, or only one of the two)",
       refs=f"{INFRA_ARTICLE} (§6.2 Fragmentation, §9.3 Compose deploy with resources); Book ch. 3 and ch. 6 (PYTORCH_ALLOC_CONF); PyTorch source c10/core/AllocatorConfig.cpp")
def alloc_conf(f: Facts) -> Hits:
    env = env_of(f)
    require_gpu(f)
    legacy, unified = env.get("PYTORCH_CUDA_ALLOC_CONF"), env.get("PYTORCH_ALLOC_CONF")
    torch = f.value("python.torch", "unknown")
    if torch is None:
        raise NotApplicable("torch is not installed")
    if f.value("python.torch_cuda", "unknown") is None:
        raise NotApplicable(f"torch {torch} is a CPU-only build")
    tv = version_tuple(torch)[:2] if torch != "unknown" else None
    if legacy is not None and unified is not None and legacy.strip() != unified.strip():
        yield Hit(f"PYTORCH_CUDA_ALLOC_CONF={legacy!r} and PYTORCH_ALLOC_CONF={unified!r}: torch uses the first",
                  fix="set only one of them (or both to the same value)")
    if legacy is None and unified is not None and tv is not None and \
            (tv < (2, 8) or (tv == (2, 9) and "expandable_segments" in unified)):
        broken = "predates this name and ignores it" if tv < (2, 8) else \
            "ignores expandable_segments given this way (pytorch/pytorch#183387)"
        yield Hit(f"only PYTORCH_ALLOC_CONF={unified!r} is set, and torch {torch} {broken}",
                  fix=f"export PYTORCH_CUDA_ALLOC_CONF={unified}")
    name, value = ("PYTORCH_CUDA_ALLOC_CONF", legacy) if legacy is not None else ("PYTORCH_ALLOC_CONF", unified)
    rejected = (f.value("python.errors") or {}).get("cuda_init", "")
    if value is not None and re.search(r"[Aa]llocator|ConfigTokenizer|max_split|garbage_collect|roundup", rejected):
        yield Hit(f"{name}={value!r}: torch {torch} refuses it at CUDA start-up: {rejected}")
        return
    try:
        pairs = parse_alloc_conf(value or "")
    except ValueError as e:
        yield Hit(f"{name}={value!r} is not a key:value list: {e}")
        return
    issues = problems(pairs)
    if issues:
        yield Hit(f"{name}={value!r}: " + "; ".join(issues))
    elif ("backend", "cudaMallocAsync") not in pairs and ("expandable_segments", "True") not in pairs:
        yield Hit((f"{name}={value!r}" if value else "PYTORCH_CUDA_ALLOC_CONF is unset")
                  + ": expandable segments are off, so variable-size allocations fragment GPU memory",
                  severity="info")


@check("caching-allocator-disabled", "allocator", "warning", "PyTorch's CUDA caching allocator switched off",
       doc="Fires when PYTORCH_NO_CUDA_MEMORY_CACHING is set: a warning for 1/true, info for other values (older "
           "torch releases disable caching for any value; newer ones only for 1/true).",
       why="Without the caching allocator every tensor allocation calls cudaMalloc and every free calls cudaFree, "
           "which synchronises the device: each costs tens of µs to milliseconds instead of about a "
           "microsecond, and CPU/GPU overlap is lost. The switch exists for memory-checking tools.",
       fix="unset PYTORCH_NO_CUDA_MEMORY_CACHING",
       refs=f"PyTorch CUDA semantics notes (memory management); {INFRA_ARTICLE} (§6.1 The PyTorch caching allocator)")
def caching_allocator_disabled(f: Facts) -> Hits:
    value = env_of(f).get("PYTORCH_NO_CUDA_MEMORY_CACHING")
    if value is None or not value.strip():
        return
    require_gpu(f)
    yield Hit(f"PYTORCH_NO_CUDA_MEMORY_CACHING={value}",
              severity="warning" if is_true(value) else "info")
