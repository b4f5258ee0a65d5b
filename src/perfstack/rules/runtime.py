"""Compiler / runtime checks: torch's CUDA build against the driver and the GPU, JIT and compile
caches, and runtime environment variables left over from debugging.

The helpers the Python-stack layers share (versions, the environment, the GPUs torch can use) are in
rules/common.py.
"""

from __future__ import annotations

import re

from perfstack.model import Facts, NotApplicable, NotChecked
from perfstack.rules.common import cuda_torch, env_of, gpus, is_true, require_gpu, version_tuple
from perfstack.rules.registry import Hit, Hits, SeverityName, check
from perfstack.sources import BOOK, INFRA_ARTICLE

EPHEMERAL = ("/tmp/", "/dev/shm/", "/run/", "/var/tmp/")


# -- architecture coverage ----------------------------------------------------------------------
ARCH = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)")


def parse_arch(entry: str) -> tuple[str, tuple[int, int], str] | None:
    """'sm_90a' -> ('sm', (9, 0), 'a'); 'compute_120' -> ('compute', (12, 0), ''); else None."""
    m = ARCH.fullmatch(entry.strip())
    return (m.group(1), (int(m.group(2)), int(m.group(3))), m.group(4)) if m else None


def coverage(arch_list: list[str], cc: tuple[int, int]) -> str | None:
    """'sass' when a cubin runs natively on cc, 'ptx' when only PTX the driver must JIT does, else None.
    A cubin for X.y runs on X.z with z >= y; 'a' variants run on exactly X.y, 'f' on the family.
    PTX for X.y JIT-compiles for any later capability."""
    best = None
    for kind, (major, minor), suffix in filter(None, map(parse_arch, arch_list)):
        exact = (major, minor) == cc
        if kind == "sm" and (exact or (suffix != "a" and major == cc[0] and minor <= cc[1])):
            return "sass"
        if kind == "compute" and (exact or (suffix == "" and (major, minor) <= cc)
                                  or (suffix == "f" and major == cc[0] and minor <= cc[1])):
            best = "ptx"
    return best


def sm(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


@check("driver-toolkit-mismatch", "compiler-runtime", "critical", "torch's CUDA is newer than the driver supports",
       doc="Compares torch.version.cuda (python.torch_cuda) with the newest CUDA the driver supports "
           "(driver.cuda_version, the 'CUDA Version' of nvidia-smi). A newer major version is critical. A newer "
           "minor version of the same major is a warning: CUDA 11+ minor-version compatibility lets it run, "
           "with a reduced feature set.",
       why="Drivers run older CUDA runtimes, never newer ones: with a newer major version CUDA initialisation "
           "fails ('driver too old') and torch silently runs on the CPU. Within one major version (12.x needs "
           "driver R525+, 13.x R580+) a newer minor runtime starts, but features that need the newer driver "
           "fail, and PTX built by the newer toolkit cannot be JIT-compiled by the older driver. A container "
           "cannot fix this: the driver belongs to the host.",
       fix="Upgrade the host driver to a branch that supports torch's CUDA, or install a torch wheel built for "
           "the driver's CUDA (e.g. pip install torch --index-url https://download.pytorch.org/whl/cu126). "
           "Datacenter GPUs can also use NVIDIA's cuda-compat forward-compatibility package.",
       refs=f"Book ch. 3 (NVIDIA container runtime: host driver vs container CUDA); {INFRA_ARTICLE} (§2 The driver layer); NVIDIA CUDA Compatibility guide (minor version)")
def driver_toolkit_mismatch(f: Facts) -> Hits:
    require_gpu(f)
    torch_cuda = cuda_torch(f)
    driver_cuda = f.need("driver.cuda_version")
    t, d = version_tuple(torch_cuda)[:2], version_tuple(driver_cuda)[:2]
    what = (f"torch {f.value('python.torch', '?')} is built for CUDA {torch_cuda}; driver "
            f"{f.value('driver.version', '?')} supports CUDA up to {driver_cuda}")
    if t[0] > d[0]:
        yield Hit(f"{what}: a newer major version, so CUDA cannot initialise", host_action=True)
    elif t[0] == d[0] and len(t) > 1 and len(d) > 1 and t[1] > d[1]:
        yield Hit(f"{what}: runs under minor-version compatibility, with a reduced feature set",
                  severity="warning", host_action=True)


@check("torch-cuda-arch", "compiler-runtime", "critical", "torch has no kernels for this GPU's architecture",
       doc="For each GPU, looks for its compute capability in torch's compiled architectures "
           "(torch.cuda.get_arch_list(), python.arch_list): a cubin for the same major version at or below "
           "its minor (sm_XY), or PTX at or below it (compute_XY). Critical when neither exists; a warning when "
           "only PTX does.",
       why="Without a cubin or PTX for the GPU every kernel launch fails with 'no kernel image is available for "
           "execution on the device'. With PTX only, the driver JIT-compiles every kernel at start-up (seconds "
           "to minutes per process, cached in ~/.nv/ComputeCache) and the code may be less tuned. Capabilities: "
           "A100 8.0, L40/RTX 4090 8.9, H100/H200 9.0, B200 10.0, RTX 50xx 12.0.",
       fix="Install a torch wheel whose CUDA build lists this GPU (newer GPUs need newer CUDA builds, e.g. "
           "Blackwell needs cu128 or later), or build torch with TORCH_CUDA_ARCH_LIST including it.",
       refs=f"Book ch. 3 (CUDA forward and backward compatibility); {INFRA_ARTICLE} (§3 The compiler layer)")
def torch_cuda_arch(f: Facts) -> Hits:
    cards = gpus(f)
    cuda_torch(f)
    arch = f.need("python.arch_list")
    if not arch:
        raise NotChecked("torch reported an empty CUDA architecture list")
    listed = " ".join(arch)
    for g in cards:
        verdict = coverage(arch, g.cc)
        base = f"GPU {g.index} ({g.name}) is compute capability {g.cc[0]}.{g.cc[1]} ({sm(g.cc)}); torch has [{listed}]"
        if verdict is None:
            yield Hit(f"{base}: no compatible cubin or PTX", subject=f"gpu{g.index}")
        elif verdict == "ptx":
            yield Hit(f"{base}: PTX only, JIT-compiled at every cold start", severity="warning",
                      subject=f"gpu{g.index}")


def jit_needed(f: Facts) -> bool:
    """Whether some GPU runs torch's kernels from PTX (quietly False when unknown)."""
    arch = f.value("python.arch_list") or []
    try:
        return bool(arch) and any(coverage(arch, g.cc) == "ptx" for g in gpus(f))
    except (NotApplicable, NotChecked):
        return False


def arch_list_entries(value: str) -> list[str] | None:
    """TORCH_CUDA_ARCH_LIST ('8.0;8.6+PTX', '9.0a', 'Hopper') -> ['sm_80', 'sm_86', 'compute_86', ...];
    None when a token is not understood (so the check stays quiet rather than guess)."""
    named = {"Volta": "7.0+PTX", "Turing": "7.5+PTX", "Ampere": "8.0;8.6+PTX", "Ada": "8.9+PTX", "Hopper": "9.0+PTX"}
    out: list[str] = []
    for token in re.split(r"[;,\s]+", value.strip()):
        for part in named.get(token, token).split(";"):
            m = re.fullmatch(r"(\d+)\.(\d)([af]?)(\+PTX)?", part)
            if not m:
                return None
            out.append(f"sm_{m.group(1)}{m.group(2)}{m.group(3)}")
            if m.group(4):
                out.append(f"compute_{m.group(1)}{m.group(2)}{m.group(3)}")
    return out or None


@check("extension-arch-list", "compiler-runtime", "warning", "TORCH_CUDA_ARCH_LIST leaves out this GPU",
       doc="When TORCH_CUDA_ARCH_LIST is set, checks that the architectures it names (used when building CUDA "
           "extensions: flash-attn, apex, custom ops, and torch itself from source) cover every GPU, by the same "
           "cubin/PTX rules as torch-cuda-arch. Quiet when a token is not understood.",
       why="Extensions built here get code only for the listed architectures: a GPU outside the list fails "
           "with 'no kernel image is available' in that extension, or JIT-compiles from PTX at every start. "
           "Images built for one GPU generation and run on another hit this.",
       fix="export TORCH_CUDA_ARCH_LIST=\"<major.minor of each GPU>\" (e.g. \"9.0\" for H100) and rebuild the "
           "extensions.",
       refs=f"Book ch. 3 (CUDA forward and backward compatibility); {INFRA_ARTICLE} (§3 The compiler layer); PyTorch torch.utils.cpp_extension documentation (TORCH_CUDA_ARCH_LIST)")
def extension_arch_list(f: Facts) -> Hits:
    value = env_of(f).get("TORCH_CUDA_ARCH_LIST")
    if not value:
        return
    entries = arch_list_entries(value)
    if entries is None:
        return
    for g in gpus(f):
        verdict = coverage(entries, g.cc)
        if verdict != "sass":
            what = "PTX only (JIT at every start)" if verdict == "ptx" else "no code for it"
            yield Hit(f"TORCH_CUDA_ARCH_LIST={value!r}; GPU {g.index} ({g.name}) is {g.cc[0]}.{g.cc[1]}: {what}",
                      severity="warning" if verdict is None else "info", subject=f"gpu{g.index}",
                      fix=f"export TORCH_CUDA_ARCH_LIST=\"{g.cc[0]}.{g.cc[1]}\" and rebuild the extensions")


@check("cuda-jit-cache", "compiler-runtime", "warning", "CUDA JIT cache disabled or on throwaway storage",
       doc="Reads CUDA_CACHE_DISABLE and CUDA_CACHE_PATH. Fires when the cache is disabled (a warning when a GPU "
           "needs PTX JIT per torch-cuda-arch, else info), or when the cache path is under /tmp, /dev/shm or "
           "/run, or when PTX JIT is needed inside a container that keeps the default ~/.nv/ComputeCache.",
       why="The driver caches the cubins it JIT-compiles from PTX. Without a lasting cache every process start "
           "pays the whole JIT again: 1-5 s and more for large libraries, on every rank.",
       fix="unset CUDA_CACHE_DISABLE; export CUDA_CACHE_PATH=<a persistent volume> (and CUDA_CACHE_MAXSIZE to "
           "hold the libraries in use)",
       refs=f"{INFRA_ARTICLE} (§3 The compiler layer: JIT and its cache)")
def cuda_jit_cache(f: Facts) -> Hits:
    env = env_of(f)
    require_gpu(f)
    jit = jit_needed(f)
    if is_true(env.get("CUDA_CACHE_DISABLE")):
        yield Hit(f"CUDA_CACHE_DISABLE={env['CUDA_CACHE_DISABLE']}" + (", and a GPU runs torch from PTX" if jit else ""),
                  severity="warning" if jit else "info", fix="unset CUDA_CACHE_DISABLE")
    path = env.get("CUDA_CACHE_PATH")
    if path and (path.rstrip("/") + "/").startswith(EPHEMERAL):
        yield Hit(f"CUDA_CACHE_PATH={path} is on storage cleared at reboot", severity="info")
    elif not path and jit and f.value("container.in_container"):
        yield Hit("a GPU runs torch from PTX, and the JIT cache is the container's ~/.nv/ComputeCache, "
                  "lost when the container is replaced", severity="warning")


@check("inductor-cache", "compiler-runtime", "warning", "torch.compile caches disabled or short-lived",
       doc="Reads TORCHINDUCTOR_FORCE_DISABLE_CACHES, TORCHINDUCTOR_FX_GRAPH_CACHE and TORCHINDUCTOR_CACHE_DIR. "
           "A warning when a cache is switched off; info when the cache directory is under /tmp, /dev/shm or "
           "/run, or is the default /tmp/torchinductor_<user> inside a container.",
       why="torch.compile spends seconds to many minutes compiling on a cold cache; with a warm cache a restart "
           "reuses the compiled graphs and kernels. A disabled or wiped cache makes every restart pay in full, "
           "and the first run after a torch or driver upgrade recompiles everything.",
       fix="unset TORCHINDUCTOR_FORCE_DISABLE_CACHES; export TORCHINDUCTOR_CACHE_DIR=<a persistent volume>",
       refs=f"{INFRA_ARTICLE} (§3 The compiler layer, §10 Debugging order); PyTorch torch.compile caching documentation (default /tmp/torchinductor_<user>)")
def inductor_cache(f: Facts) -> Hits:
    env = env_of(f)
    if f.need("python.torch") is None:
        raise NotApplicable("torch is not installed")
    if not f.value("gpu.count"):
        raise NotApplicable("no NVIDIA GPU found")
    if env.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES") == "1":
        yield Hit("TORCHINDUCTOR_FORCE_DISABLE_CACHES=1: every torch.compile recompiles from scratch",
                  fix="unset TORCHINDUCTOR_FORCE_DISABLE_CACHES")
    if env.get("TORCHINDUCTOR_FX_GRAPH_CACHE") == "0":
        yield Hit("TORCHINDUCTOR_FX_GRAPH_CACHE=0: compiled graphs are not reused across processes",
                  fix="unset TORCHINDUCTOR_FX_GRAPH_CACHE")
    path = env.get("TORCHINDUCTOR_CACHE_DIR")
    if path and (path.rstrip("/") + "/").startswith(EPHEMERAL):
        yield Hit(f"TORCHINDUCTOR_CACHE_DIR={path} is on storage cleared at reboot", severity="info")
    elif not path and f.value("container.in_container"):
        yield Hit("TORCHINDUCTOR_CACHE_DIR unset in a container: the cache is /tmp/torchinductor_<user> in the "
                  "container, lost when it is replaced", severity="info")


DEBUG_VARS: dict[str, tuple[SeverityName, str]] = {  # name -> (severity, what it costs)
    "CUDA_LAUNCH_BLOCKING": ("warning", "every kernel launch waits for the kernel to finish: no CPU/GPU overlap"),
    "TORCH_CUDA_SANITIZER": ("warning", "the CUDA stream sanitizer checks every kernel launch for races"),
    "TORCH_COMPILE_DEBUG": ("info", "torch.compile writes debug traces of every graph to disk"),
    "TORCH_LOGS": ("info", "torch logs the named components (compile, dynamo, ...) at every step they run"),
}


@check("debug-env-in-prod", "compiler-runtime", "warning", "Debugging variables left set",
       doc="Fires for CUDA_LAUNCH_BLOCKING=1 and TORCH_CUDA_SANITIZER set (warnings), TORCH_DISTRIBUTED_DEBUG=DETAIL "
           "(warning), and TORCH_COMPILE_DEBUG=1 or TORCH_LOGS set (info). NCCL's own switches are checked by "
           "nccl-debug-env and nccl-p2p-disabled.",
       why="Switches flipped while debugging are easy to forget in a launch script. CUDA_LAUNCH_BLOCKING=1 "
           "makes every launch synchronous, losing all overlap of CPU work, copies and kernels; "
           "TORCH_DISTRIBUTED_DEBUG=DETAIL adds consistency checks around every collective.",
       fix="Remove them from the production launch configuration.",
       refs="Book ch. 4 (debugging variables left set in production) and ch. 13 (CUDA_LAUNCH_BLOCKING)")
def debug_env_in_prod(f: Facts) -> Hits:
    env = env_of(f)
    for name, (severity, cost) in DEBUG_VARS.items():
        value = env.get(name)
        if value and (name == "TORCH_LOGS" or is_true(value)):
            yield Hit(f"{name}={value}: {cost}", severity=severity, subject=name, fix=f"unset {name}")
    if env.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        yield Hit("TORCH_DISTRIBUTED_DEBUG=DETAIL: every collective is checked for consistency across ranks",
                  severity="warning", subject="TORCH_DISTRIBUTED_DEBUG", fix="unset TORCH_DISTRIBUTED_DEBUG")


@check("cuda-module-loading", "compiler-runtime", "info", "CUDA lazy loading switched off",
       doc="Fires when CUDA_MODULE_LOADING=EAGER. Lazy loading is the default since CUDA 12.2 on Linux (and torch "
           "sets it when unset).",
       why="Eager loading loads every kernel of every CUDA library into each context at start-up: slower "
           "start-up and more device memory per process (PyTorch measured about 667 MB against 287 MB for a "
           "context when it made LAZY its default).",
       fix="unset CUDA_MODULE_LOADING (or export CUDA_MODULE_LOADING=LAZY)",
       refs="CUDA Programming Guide, Lazy Loading; PyTorch issue pytorch/pytorch#86509")
def cuda_module_loading(f: Facts) -> Hits:
    value = env_of(f).get("CUDA_MODULE_LOADING")
    if value and value.strip().upper() == "EAGER":
        yield Hit(f"CUDA_MODULE_LOADING={value}")


@check("cuda-device-max-connections", "compiler-runtime", "info", "CUDA_DEVICE_MAX_CONNECTIONS=1 without Megatron",
       doc="Fires when CUDA_DEVICE_MAX_CONNECTIONS=1 and neither megatron-core nor transformer-engine is installed "
           "(python.packages): the setting those frameworks rely on, seen elsewhere.",
       why="The variable sets how many hardware work queues a context gets (8 by default). With one, kernels of "
           "all streams share a single queue, so work on separate streams (e.g. DDP/FSDP communication beside "
           "compute) can no longer overlap. Megatron-style tensor parallelism sets 1 on purpose to order "
           f"communication before the GEMM it overlaps with. Not from the book {BOOK}: from CUDA's "
           "documentation.",
       fix="unset CUDA_DEVICE_MAX_CONNECTIONS unless the framework asks for it",
       refs="CUDA Programming Guide, CUDA environment variables (CUDA_DEVICE_MAX_CONNECTIONS)")
def cuda_device_max_connections(f: Facts) -> Hits:
    value = env_of(f).get("CUDA_DEVICE_MAX_CONNECTIONS")
    if value is None or value.strip() != "1":
        return
    packages = f.value("python.packages") or {}
    if not any(p in packages for p in ("megatron-core", "transformer-engine")):
        yield Hit("CUDA_DEVICE_MAX_CONNECTIONS=1 and no Megatron/Transformer Engine installed")


@check("cuda-visible-devices", "compiler-runtime", "warning", "CUDA_VISIBLE_DEVICES hides or misnames GPUs",
       doc="Parses CUDA_VISIBLE_DEVICES against gpu.count. A warning when it hides every GPU (empty, -1, "
           "NoDevFiles) or names an index that does not exist; info when it shows a subset (often deliberate, "
           "e.g. one GPU per rank), or when CUDA_DEVICE_ORDER is not PCI_BUS_ID on a host with different GPU "
           "models. UUID entries are not checked.",
       why="CUDA stops at the first invalid entry: every GPU after it is hidden, and if the first is invalid "
           "the process sees no GPU and torch falls back to the CPU. CUDA numbers GPUs fastest-first by "
           "default, so on mixed hosts the indices differ from nvidia-smi's unless CUDA_DEVICE_ORDER=PCI_BUS_ID.",
       fix="export CUDA_VISIBLE_DEVICES=<existing indices> (nvidia-smi -L lists them); export "
           "CUDA_DEVICE_ORDER=PCI_BUS_ID",
       refs="Book ch. 3 (topology-aware GPU allocation) and ch. 4 (binding with CUDA_VISIBLE_DEVICES); CUDA environment variables")
def cuda_visible_devices(f: Facts) -> Hits:
    env = env_of(f)
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return
    count = f.need("gpu.count")
    require_gpu(f)
    entries = [e.strip() for e in value.split(",")]
    if value.strip() in ("", "-1", "NoDevFiles"):
        yield Hit(f"CUDA_VISIBLE_DEVICES={value!r} hides all {count} GPU(s)")
        return
    shown: list[int] = []
    for e in entries:
        if not re.fullmatch(r"\d+", e):
            if not e.startswith(("GPU-", "MIG-")):
                yield Hit(f"CUDA_VISIBLE_DEVICES={value!r}: entry {e!r} is neither an index nor a UUID; "
                          f"CUDA ignores it and every entry after it")
            return
        if int(e) >= count:
            yield Hit(f"CUDA_VISIBLE_DEVICES={value!r}: GPU {e} does not exist ({count} GPU(s)); CUDA ignores it "
                      f"and every entry after it" + ("" if shown else ", so no GPU is visible"))
            return
        shown.append(int(e))
    if len(set(shown)) < count:
        yield Hit(f"CUDA_VISIBLE_DEVICES={value!r} shows {len(set(shown))} of {count} GPUs", severity="info")
    models = {g.get("name") for g in f.value("gpu.list") or []}
    if len(models) > 1 and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        yield Hit(f"{len(models)} GPU models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA's indices in "
                  f"CUDA_VISIBLE_DEVICES differ from nvidia-smi's", severity="info",
                  fix="export CUDA_DEVICE_ORDER=PCI_BUS_ID")
