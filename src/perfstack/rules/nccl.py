"""Math libraries and NCCL: settings that silently change which transport, algorithm or math mode
runs. NCCL reads its variables from the environment first, then from $NCCL_CONF_FILE or
~/.nccl.conf, then /etc/nccl.conf; every check here sees that merged view and names the origin."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from perfstack.model import Facts, NotApplicable, NotChecked
from perfstack.rules.common import cuda_torch, env_of, env_or_empty, gpus, require_gpu, version_tuple
from perfstack.rules.registry import Hit, Hits, SeverityName, check
from perfstack.sources import BOOK, INFRA_ARTICLE, LLM_LINUX_ARTICLE


class Setting(NamedTuple):
    value: str
    origin: str  # "environment" or the config file

    def show(self, name: str) -> str:
        return f"{name}={self.value}" + ("" if self.origin == "environment" else f" (from {self.origin})")

    def undo(self, name: str) -> str:
        return f"unset {name}" if self.origin == "environment" else f"delete the {name} line from {self.origin}"


def nccl_settings(f: Facts) -> dict[str, Setting]:
    """NCCL_* as NCCL will see them: the environment over the config files."""
    out = {name: Setting(str(d.get("value", "")), str(d.get("file", "config file")))
           for name, d in (f.value("nccl.conf") or {}).items() if isinstance(d, dict)}
    out.update({k: Setting(v, "environment") for k, v in env_of(f).items() if k.startswith("NCCL_")})
    return out


def as_int(value: str) -> int | None:
    """NCCL parses integers with strtoll: a leading number counts, anything else is ignored."""
    m = re.match(r"\s*(-?\d+)", value)
    return int(m.group(1)) if m else None


def rdma_active(f: Facts) -> bool | None:
    """Whether an RDMA port (InfiniBand or RoCE) is ACTIVE; None when not known."""
    ports = f.value("network.rdma_ports")
    return None if ports is None else any(str(p.get("state", "")).upper() == "ACTIVE" for p in ports)


@check("nccl-p2p-disabled", "mathlib-nccl", "critical", "NCCL transports disabled",
       doc="Reads NCCL_P2P_DISABLE, NCCL_P2P_LEVEL=LOC, NCCL_SHM_DISABLE, NCCL_IB_DISABLE and NCCL_NET=Socket from "
           "the environment and NCCL's config files. P2P off is critical with two or more GPUs; SHM off is a "
           "warning; IB off (or NCCL_NET=Socket) is critical when an RDMA port is active. The same settings "
           "where they cannot matter (one GPU, no RDMA) are reported as info, to remove before the job moves.",
       why="With P2P off, traffic between GPUs of one node is staged through host memory: latency goes from a "
           "few µs to tens of µs and bandwidth from hundreds of GB/s to tens. With IB off NCCL runs over TCP "
           "sockets, about 10x slower, and the job still trains, so nothing complains. SHM off sends "
           "intra-node traffic that cannot use P2P through the network stack.",
       fix="Unset the variables (or delete them from the NCCL config file); use them only while debugging.",
       refs=f"Book ch. 4 (Pitfall #3: avoid overtuning or disabling NCCL features); {INFRA_ARTICLE} (§5 The math library layer)")
def nccl_p2p_disabled(f: Facts) -> Hits:
    s = nccl_settings(f)
    require_gpu(f)
    count = f.value("gpu.count")
    multi = count is None or count >= 2
    rdma = rdma_active(f)

    def off(name: str) -> Setting | None:
        v = s.get(name)
        return v if v is not None and (as_int(v.value) or 0) != 0 else None

    transports: tuple[tuple[str, str, SeverityName], ...] = (
        ("NCCL_P2P_DISABLE", "GPU-to-GPU P2P (NVLink/PCIe) is off", "critical"),
        ("NCCL_SHM_DISABLE", "shared-memory transport is off", "warning"))
    for name, what, sev in transports:
        v = off(name)
        if v:
            yield Hit(f"{v.show(name)}: {what}" + ("" if multi else "; no effect with one GPU"),
                      severity=sev if multi else "info", subject=name, fix=v.undo(name))
    level = s.get("NCCL_P2P_LEVEL")
    if level and level.value.strip().upper() in ("LOC", "0"):
        yield Hit(f"{level.show('NCCL_P2P_LEVEL')}: P2P is never used" + ("" if multi else "; no effect with one GPU"),
                  severity="critical" if multi else "info", subject="NCCL_P2P_LEVEL", fix=level.undo("NCCL_P2P_LEVEL"))
    ib_sev: SeverityName = "critical" if rdma is True else "info" if rdma is False else "warning"
    note = {True: "an RDMA port is active, so inter-node traffic falls back to TCP sockets",
            False: "no active RDMA port here, so no effect on this host", None: "RDMA ports unknown"}[rdma]
    v = off("NCCL_IB_DISABLE")
    if v:
        yield Hit(f"{v.show('NCCL_IB_DISABLE')}: {note}", severity=ib_sev, subject="NCCL_IB_DISABLE",
                  fix=v.undo("NCCL_IB_DISABLE"))
    net = s.get("NCCL_NET")
    if net and net.value.strip().lower() == "socket" and rdma is not False:
        yield Hit(f"{net.show('NCCL_NET')}: {note}", severity=ib_sev, subject="NCCL_NET", fix=net.undo("NCCL_NET"))


@check("nccl-debug-env", "mathlib-nccl", "info", "NCCL debug logging on",
       doc="Fires when NCCL_DEBUG is INFO or TRACE, or NCCL_DEBUG_SUBSYS is set (environment or NCCL config file).",
       why="INFO and TRACE print per-communicator and per-connection lines from every rank (TRACE per call), "
           "costing time and flooding logs. WARN is the default and what production wants; VERSION is quieter. "
           "INFO is the right setting during bring-up, to see which transport NCCL chose.",
       fix="export NCCL_DEBUG=WARN (or unset it); unset NCCL_DEBUG_SUBSYS",
       refs=f"Book ch. 4 (NCCL_DEBUG); {INFRA_ARTICLE} (§5 The math library layer)")
def nccl_debug_env(f: Facts) -> Hits:
    s = nccl_settings(f)
    require_gpu(f)
    level = s.get("NCCL_DEBUG")
    if level and level.value.strip().upper() in ("INFO", "TRACE"):
        yield Hit(level.show("NCCL_DEBUG"), subject="NCCL_DEBUG", fix=level.undo("NCCL_DEBUG"))
    subsys = s.get("NCCL_DEBUG_SUBSYS")
    if subsys and subsys.value.strip():
        yield Hit(subsys.show("NCCL_DEBUG_SUBSYS"), subject="NCCL_DEBUG_SUBSYS", fix=subsys.undo("NCCL_DEBUG_SUBSYS"))


@check("nccl-async-error-handling", "mathlib-nccl", "info", "NCCL error handling set by an old name or off",
       doc="Reads TORCH_NCCL_ASYNC_ERROR_HANDLING and its deprecated name NCCL_ASYNC_ERROR_HANDLING. Fires when "
           "only the old name is set, when both are set to different values (torch uses the new one), or when "
           "the effective value is 0. Unset is fine: recent torch defaults to aborting on errors.",
       why="With async error handling a failed or stuck rank makes the others abort instead of hanging until "
           "the collective timeout (10 minutes and more) while holding every GPU. PyTorch still reads the old "
           "name but warns about it.",
       fix="export TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (or unset both); unset NCCL_ASYNC_ERROR_HANDLING",
       refs="Book ch. 4 (NCCL asynchronous error handling)")
def nccl_async_error_handling(f: Facts) -> Hits:
    env = env_of(f)
    require_gpu(f)
    old, new = env.get("NCCL_ASYNC_ERROR_HANDLING"), env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")
    if old is not None and new is None:
        yield Hit(f"NCCL_ASYNC_ERROR_HANDLING={old} uses the deprecated name",
                  fix=f"export TORCH_NCCL_ASYNC_ERROR_HANDLING={old}; unset NCCL_ASYNC_ERROR_HANDLING")
    elif old is not None and new is not None and old.strip() != new.strip():
        yield Hit(f"TORCH_NCCL_ASYNC_ERROR_HANDLING={new} and NCCL_ASYNC_ERROR_HANDLING={old}: torch uses {new}",
                  fix="unset NCCL_ASYNC_ERROR_HANDLING")
    effective = new if new is not None else old
    if effective is not None and effective.strip() == "0":
        yield Hit("async error handling is off (0): a failed rank leaves the others hanging until the timeout",
                  fix="export TORCH_NCCL_ASYNC_ERROR_HANDLING=1")


@check("nccl-socket-threads", "mathlib-nccl", "warning", "NCCL socket threads over NCCL's limits",
       doc="Reads NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD. Fires when their product is above 64, when "
           "NCCL_SOCKET_NTHREADS is above 16, or when either is not a number.",
       why="NCCL allows at most 64 sockets per connection (threads x sockets per thread) and 16 socket threads; "
           "beyond that it clips or refuses the values, and every extra thread costs CPU. On multi-NIC TCP "
           f"hosts 2x2 is a sensible start, raised step by step (the book {BOOK} cites +10% from "
           "NCCL_SOCKET_NTHREADS=2 on one cluster).",
       fix="Keep NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD <= 64 (e.g. 4 and 4); measure each step",
       refs="Book ch. 4 (multiple NICs; NCCL socket threads)")
def nccl_socket_threads(f: Facts) -> Hits:
    s = nccl_settings(f)
    require_gpu(f)
    nums: dict[str, int] = {}
    for name in ("NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD"):
        v = s.get(name)
        if v is None:
            continue
        n = as_int(v.value)
        if n is None or n < 1:
            yield Hit(f"{v.show(name)} is not a positive number, so NCCL ignores it", subject=name)
        else:
            nums[name] = n
    threads, socks = nums.get("NCCL_SOCKET_NTHREADS", 1), nums.get("NCCL_NSOCKS_PERTHREAD", 1)
    if threads > 16:
        yield Hit(f"{s['NCCL_SOCKET_NTHREADS'].show('NCCL_SOCKET_NTHREADS')}: above NCCL's maximum of 16",
                  subject="NCCL_SOCKET_NTHREADS")
    if len(nums) == 2 and threads * socks > 64:
        yield Hit(f"{s['NCCL_SOCKET_NTHREADS'].show('NCCL_SOCKET_NTHREADS')} x "
                  f"{s['NCCL_NSOCKS_PERTHREAD'].show('NCCL_NSOCKS_PERTHREAD')} = {threads * socks} sockets, "
                  f"above NCCL's limit of 64")


OVERRIDES = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS",
             "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_P2P_LEVEL")
ALGOS = {"ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"}
PROTOS = {"ll", "ll128", "simple"}
BUFFSIZE_DEFAULT = 4 << 20


def unknown_names(value: str, valid: set[str]) -> list[str]:
    """NCCL_ALGO/NCCL_PROTO: 'Ring,Tree', '^Tree', or per collective 'allreduce:tree,ring;broadcast:ring'."""
    bad = []
    for part in value.split(";"):
        names = part.split(":", 1)[-1]
        bad += [n for n in (x.strip().lstrip("^").strip() for x in names.split(",")) if n and n.lower() not in valid]
    return bad


@check("nccl-manual-overrides", "mathlib-nccl", "warning", "NCCL tuning overridden by hand",
       doc="Lists NCCL_ALGO, NCCL_PROTO, NCCL_MIN/MAX_NCHANNELS, NCCL_MIN/MAX_CTAS, NCCL_BUFFSIZE, NCCL_NTHREADS and "
           "NCCL_P2P_LEVEL when set (info). Warns for names NCCL does not know in NCCL_ALGO/NCCL_PROTO, "
           "NCCL_NTHREADS other than 64/128/256/512, and NCCL_BUFFSIZE above 16 MiB (4x the 4 MiB default; "
           "a conservative threshold of ours).",
       why="NCCL picks algorithm, protocol and channel count from message size and topology; a pinned choice "
           "is right for the case it was measured on, and goes stale with the next NCCL or topology. "
           f"NCCL_NTHREADS is CUDA threads per block, not CPU threads (the appendix of the book {BOOK} says "
           "otherwise). A large "
           "NCCL_BUFFSIZE is allocated per channel and peer, taking GPU memory.",
       fix="Remove the overrides, or record why each is set and re-measure after every NCCL upgrade.",
       refs="Book ch. 4 (topology detection; Pitfall #3: avoid overtuning NCCL; NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS)")
def nccl_manual_overrides(f: Facts) -> Hits:
    s = nccl_settings(f)
    require_gpu(f)
    present = [n for n in OVERRIDES if n in s and not (n == "NCCL_P2P_LEVEL" and s[n].value.upper() in ("LOC", "0"))]
    if present:
        yield Hit("set by hand: " + ", ".join(s[n].show(n) for n in present), severity="info")
    for name, valid in (("NCCL_ALGO", ALGOS), ("NCCL_PROTO", PROTOS)):
        bad = unknown_names(s[name].value, valid) if name in s else []
        if bad:
            yield Hit(f"{s[name].show(name)}: NCCL knows no {', '.join(bad)}", subject=name,
                      fix=f"use names NCCL knows ({', '.join(sorted(valid))}) or {s[name].undo(name)}")
    if "NCCL_NTHREADS" in s and as_int(s["NCCL_NTHREADS"].value) not in (64, 128, 256, 512):
        yield Hit(f"{s['NCCL_NTHREADS'].show('NCCL_NTHREADS')}: must be 64, 128, 256 or 512 CUDA threads per block",
                  subject="NCCL_NTHREADS", fix=s["NCCL_NTHREADS"].undo("NCCL_NTHREADS"))
    size = as_int(s["NCCL_BUFFSIZE"].value) if "NCCL_BUFFSIZE" in s else None
    if size is not None and size > 4 * BUFFSIZE_DEFAULT:
        yield Hit(f"{s['NCCL_BUFFSIZE'].show('NCCL_BUFFSIZE')}: {size / (1 << 20):g} MiB per buffer, "
                  f"{size / BUFFSIZE_DEFAULT:g}x the 4 MiB default", subject="NCCL_BUFFSIZE")


@check("nccl-version-mismatch", "mathlib-nccl", "warning", "torch loaded a different NCCL than its wheel",
       doc="Compares the NCCL version torch loaded (torch.cuda.nccl.version(), python.nccl) with the installed "
           "nvidia-nccl-cuXX wheel matching torch's CUDA major version, and looks for libnccl in LD_PRELOAD. "
           "Quiet when no wheel is installed (torch may link NCCL statically).",
       why="pip torch loads the NCCL of its nvidia-nccl wheel; a different libnccl picked up through "
           "LD_LIBRARY_PATH, LD_PRELOAD or a system copy was not what torch was tested with, and mixed "
           "versions across ranks can hang or fall back to slower paths.",
       fix="Remove the override so torch loads its wheel's libnccl, or install the nvidia-nccl wheel that "
           "matches (pip install -U nvidia-nccl-cuXX==<version>).",
       refs="Book ch. 4 (Pitfall #2: mismatched NCCL versions)")
def nccl_version_mismatch(f: Facts) -> Hits:
    require_gpu(f)
    torch_cuda = cuda_torch(f)
    loaded = f.need("python.nccl")
    if not loaded:
        raise NotApplicable("torch was built without NCCL")
    pkg = f"nvidia-nccl-cu{version_tuple(torch_cuda)[0]}"
    wheel = (f.value("python.packages") or {}).get(pkg)
    if wheel and version_tuple(wheel)[:3] != version_tuple(loaded)[:3]:
        yield Hit(f"torch loaded NCCL {loaded}; the installed {pkg} wheel is {wheel}")
    preload = env_or_empty(f).get("LD_PRELOAD", "")
    if "nccl" in preload:
        yield Hit(f"LD_PRELOAD={preload} forces a libnccl into every process (torch reports {loaded})",
                  fix="unset LD_PRELOAD (or drop the libnccl entry)")


def _matches(name: str, prefix: str) -> bool:
    return name == prefix[1:] if prefix.startswith("=") else name.startswith(prefix)


@check("nccl-socket-ifname", "mathlib-nccl", "critical", "NCCL_SOCKET_IFNAME matches no usable interface",
       doc="Matches NCCL_SOCKET_IFNAME (comma-separated prefixes; '=' for an exact name; a leading '^' excludes) "
           "against /sys/class/net (network.interfaces). Critical when no interface matches or all matches are "
           "down; a warning when only loopback, docker or other virtual bridges match.",
       why="NCCL bootstraps and runs its socket transport over these interfaces. None matching makes "
           "communicator creation fail; a bridge or loopback only reaches this host, so a multi-node job fails "
           f"or crawls over the wrong path. The book {BOOK} describes bootstrap over the wrong NIC falling back "
           "to slow 10 GbE, or failing to connect.",
       fix="export NCCL_SOCKET_IFNAME=<the fast interface, e.g. ib0 or =eth1> (ip -br link lists them)",
       refs="Book ch. 3 (container networking) and ch. 4 (fallback to a slower network path)")
def nccl_socket_ifname(f: Facts) -> Hits:
    s = nccl_settings(f)
    require_gpu(f)
    v = s.get("NCCL_SOCKET_IFNAME")
    if v is None or not v.value.strip():
        return
    ifaces: list[dict[str, Any]] = f.need("network.interfaces")
    exclude = v.value.startswith("^")
    prefixes = [p.strip() for p in v.value.lstrip("^").split(",") if p.strip()]
    matched = [i for i in ifaces if any(_matches(str(i.get("name")), p) for p in prefixes) != exclude]
    names = ", ".join(str(i.get("name")) for i in ifaces)
    up = [i for i in matched if i.get("operstate") not in ("down", "lowerlayerdown", "notpresent")]
    real = [i for i in up if not i.get("is_virtual") and i.get("link_type") != "loopback"]
    if not matched:
        yield Hit(f"{v.show('NCCL_SOCKET_IFNAME')} matches no interface (present: {names})",
                  fix=v.undo("NCCL_SOCKET_IFNAME") + " or name an interface that exists")
    elif not up:
        yield Hit(f"{v.show('NCCL_SOCKET_IFNAME')} matches only interfaces that are down: "
                  + ", ".join(str(i.get("name")) for i in matched))
    elif not real:
        yield Hit(f"{v.show('NCCL_SOCKET_IFNAME')} matches only loopback/virtual interfaces ("
                  + ", ".join(str(i.get("name")) for i in up) + "): reachable from this host only", severity="warning")


TF32_WHY = ("TF32 Tensor Cores run FP32 matmuls and convolutions at several times the FP32 rate: A100 156 vs "
            "19.5 TFLOPS, H100 495 vs 67 (dense, SXM), with a 10-bit mantissa that training tolerates.")


def tf32_gpus(f: Facts) -> list[str] | None:
    """Names of the Ampere-or-newer GPUs; None when capabilities are unknown."""
    try:
        return [f"GPU {g.index} ({g.name})" for g in gpus(f) if g.cc >= (8, 0)]
    except NotChecked:
        return None


@check("tf32-override-env", "mathlib-nccl", "warning", "NVIDIA_TF32_OVERRIDE=0 turns TF32 off everywhere",
       doc="Fires when NVIDIA_TF32_OVERRIDE=0 and a GPU of compute capability 8.0 or newer is present (or the "
           "capability is unknown).",
       why="The variable makes cuBLAS and cuDNN ignore every request for TF32, whatever the framework sets: "
           "FP32 GEMMs and convolutions fall back to plain FP32, up to about 8x slower on A100 and 7x on H100. "
           + TF32_WHY,
       fix="unset NVIDIA_TF32_OVERRIDE (only 0 has an effect; it exists to debug numerics)",
       refs=f"Book appendix checklist (Use TF32 for easy speedup); {INFRA_ARTICLE} (§5 The math library layer, §7.1 Counting work); cuBLAS documentation")
def tf32_override_env(f: Facts) -> Hits:
    value = env_of(f).get("NVIDIA_TF32_OVERRIDE")
    if value is None or value.strip() != "0":
        return
    cards = tf32_gpus(f)
    if cards == []:
        raise NotApplicable("no GPU with TF32 Tensor Cores (compute capability below 8.0)")
    on = f" on {', '.join(cards)}" if cards else ""
    yield Hit(f"NVIDIA_TF32_OVERRIDE=0: FP32 matmul and convolution never use TF32 Tensor Cores{on}",
              fix="unset NVIDIA_TF32_OVERRIDE")


@check("tf32-default-off", "mathlib-nccl", "info", "FP32 matmuls skip Tensor Cores by default",
       doc="Fires when torch reports allow_tf32 False and float32_matmul_precision 'highest' (python.* facts, read "
           "in a fresh interpreter) on a GPU of compute capability 8.0 or newer. This is torch's default; code "
           "that calls torch.set_float32_matmul_precision('high') is not affected, and perfstack cannot see it.",
       why="By default torch runs FP32 matmuls in full FP32 on CUDA cores (cuDNN convolutions do use TF32). "
           + TF32_WHY,
       fix="torch.set_float32_matmul_precision('high') at start-up (or export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, "
           "as NVIDIA's containers do); or train in BF16 with autocast",
       refs="Book appendix checklist (Use TF32 for easy speedup)")
def tf32_default_off(f: Facts) -> Hits:
    require_gpu(f)
    cuda_torch(f)
    cards = tf32_gpus(f)
    if cards == []:
        raise NotApplicable("no GPU with TF32 Tensor Cores (compute capability below 8.0)")
    if env_or_empty(f).get("NVIDIA_TF32_OVERRIDE", "").strip() == "0":
        raise NotApplicable("NVIDIA_TF32_OVERRIDE=0 overrides torch (tf32-override-env)")
    allow = f.need("python.matmul_allow_tf32")
    precision = f.value("python.float32_matmul_precision")
    if not allow and precision in (None, "highest"):
        yield Hit(f"torch.backends.cuda.matmul.allow_tf32 = False, float32_matmul_precision = '{precision}'"
                  + (f" on {', '.join(cards)}" if cards else ""))


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@check("cpu-thread-env", "mathlib-nccl", "warning", "CPU math threads oversubscribe the cores",
       doc="Reads OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS (first number of a list) against "
           "cpu.logical_count, or the cgroup CPU quota when lower. Fires when one exceeds the CPUs, when it times "
           "LOCAL_WORLD_SIZE (ranks on this node) exceeds them, or when it is not a number. Counting logical "
           "CPUs, not physical cores, keeps the check conservative.",
       why="Each rank runs its own thread pool; more threads than cores make them preempt each other, and "
           "CPU-side work (data loading, optimizer steps on CPU, kernel launches) slows down with the context "
           "switching. torchrun sets OMP_NUM_THREADS=1 for multi-process runs for this reason.",
       fix="export OMP_NUM_THREADS=<physical cores / ranks per node> (the same for MKL/OpenBLAS)",
       refs=f"Book appendix checklist (Optimize environment variables for CPU libraries); {LLM_LINUX_ARTICLE} (Compute Optimization Techniques: OpenBLAS tuning)")
def cpu_thread_env(f: Facts) -> Hits:
    env = env_of(f)
    cpus = f.need("cpu.logical_count")
    quota = f.value("cgroup.cpu_quota_cpus")
    budget, where = cpus, f"{cpus} logical CPUs"
    if isinstance(quota, (int, float)) and 0 < quota < cpus:  # a container allowed fewer CPUs than the host has
        budget, where = quota, f"the cgroup quota of {quota:g} CPUs"
    ranks = as_int(env.get("LOCAL_WORLD_SIZE", "")) or 1
    for name in THREAD_VARS:
        value = env.get(name)
        if value is None:
            continue
        n = as_int(value.split(",")[0])
        if n is None or n < 1:
            yield Hit(f"{name}={value!r} is not a positive number; the library ignores it", subject=name)
        elif n > budget:
            yield Hit(f"{name}={n}: more threads than {where}", subject=name)
        elif n * ranks > budget:
            yield Hit(f"{name}={n} x {ranks} local ranks = {n * ranks} threads, more than {where}", subject=name)
