"""The Python stack the workload runs on (torch, its CUDA build, cuDNN, NCCL) and NCCL's config files.

The torch facts come from ``perfstack.host.pyinfo`` run in a child interpreter (python.json in a
bundle). Torch being absent is a fact (python.torch = None), not a gap; the facts that only torch
can give are then "not available" with the reason, so the checks that need them say why they
did not run.
"""

from __future__ import annotations

from typing import Any

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe

PYINFO = "python -m perfstack.host.pyinfo"
KEEP_ENV = ("HOME", "NCCL_CONF_FILE")  # read to find the NCCL config file: a capture keeps their values
STR, INT, BOOL, LIST, DICT, NONE = (str,), (int,), (bool,), (list,), (dict,), (type(None),)

# pyinfo field -> (fact name, accepted JSON types). Read whenever torch imported.
TORCH_FIELDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "torch_cuda": ("python.torch_cuda", STR + NONE),
    "torch_hip": ("python.torch_hip", STR + NONE),
    "num_threads": ("python.num_threads", INT),
    "float32_matmul_precision": ("python.float32_matmul_precision", STR),
    "matmul_allow_tf32": ("python.matmul_allow_tf32", BOOL),
    "cudnn_allow_tf32": ("python.cudnn_allow_tf32", BOOL),
}
# Read only from a CUDA build of torch: pyinfo does not ask a CPU build about CUDA.
CUDA_FIELDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "cuda_available": ("python.cuda_available", BOOL),
    "arch_list": ("python.arch_list", LIST),
    "cudnn": ("python.cudnn", INT + NONE),
    "nccl": ("python.nccl", STR + NONE),
    "nccl_available": ("python.nccl_available", BOOL),
    "allocator_backend": ("python.allocator_backend", STR),
    "device_count": ("python.device_count", INT),
}
DEVICE_FACT = "python.device_capabilities"
BASE_FACTS = ("python.version", "python.executable", "python.packages", "python.errors", "python.torch")
KEYS = BASE_FACTS + tuple(k for k, _ in TORCH_FIELDS.values()) + tuple(k for k, _ in CUDA_FIELDS.values()) \
    + (DEVICE_FACT,)


def _typed(data: dict[str, Any], field: str, types: tuple[type, ...]) -> Any:
    value = data[field]
    # bool is an int in Python; a count of True is as wrong as a count of "1".
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
        raise Malformed(f"not a pyinfo object: '{field}' is {type(value).__name__}, expected {want}")
    return value


def _capabilities(devices: Any) -> list[str]:
    """[{"name": ..., "capability": [9, 0]}, ...] -> ["9.0", ...] (the gpu.list format)."""
    if not isinstance(devices, list):
        raise Malformed(f"not a pyinfo object: 'devices' is {type(devices).__name__}, expected list")
    caps = []
    for d in devices:
        cap = d.get("capability") if isinstance(d, dict) else None
        if not (isinstance(cap, list) and len(cap) == 2 and all(isinstance(x, int) for x in cap)):
            raise Malformed(f"not a pyinfo object: device entry {d!r:.60} has no [major, minor] capability")
        caps.append(f"{cap[0]}.{cap[1]}")
    return caps


def parse_pyinfo(data: Any) -> dict[str, Any]:
    """The object pyinfo printed -> {fact key: value or Unavailable(reason)}.

    Raises Malformed when the object is not what pyinfo writes (a hand-edited python.json)."""
    if not isinstance(data, dict):
        raise Malformed(f"not a pyinfo object (a JSON {type(data).__name__})")
    for required in ("python", "torch"):
        if required not in data:
            raise Malformed(f"not a pyinfo object: it has no '{required}' field")
    errors = _typed(data, "errors", DICT) if "errors" in data else {}
    packages = _typed(data, "packages", DICT) if "packages" in data else {}
    out: dict[str, Any] = {
        "python.version": _typed(data, "python", STR),
        "python.executable": _typed(data, "executable", STR) if "executable" in data
        else Unavailable("not recorded (python.json from an older perfstack)"),
        "python.packages": {str(k): str(v) for k, v in packages.items()},
        "python.errors": {str(k): str(v) for k, v in errors.items()},
        "python.torch": _typed(data, "torch", STR + NONE),
    }
    where = f"by {out['python.executable']}" if isinstance(out["python.executable"], str) else "by this interpreter"
    if out["python.torch"] is None:
        why = errors.get("torch")
        gone = Unavailable(f"torch is not importable {where}" + (f" ({why})" if why else ""))
        return {**out, **{k: gone for k in KEYS if k not in out}}

    if data.get("cuda_available") is False:
        no_cuda = "torch cannot use CUDA here, so it named no devices"
    elif "cuda_init" in errors:
        no_cuda = f"torch could not initialise CUDA: {errors['cuda_init']}"
    else:
        no_cuda = "not reported by pyinfo"

    def field(name: str, fact: str, types: tuple[type, ...], missing: str = "not reported by pyinfo") -> None:
        if name in data:
            out[fact] = _typed(data, name, types)
        else:
            err = errors.get(name)
            out[fact] = Unavailable(f"torch raised {err}" if err else missing)

    for name, (fact, types) in TORCH_FIELDS.items():
        field(name, fact, types)
    if out.get("python.torch_cuda") is None:  # CPU-only (or ROCm) build: it has no CUDA to ask about
        out["python.cuda_available"] = False
        cpu = Unavailable(f"torch {out['python.torch']} is not a CUDA build")
        return {**out, **{k: cpu for k in KEYS if k not in out}}
    for name, (fact, types) in CUDA_FIELDS.items():
        field(name, fact, types, no_cuda if name == "device_count" else "not reported by pyinfo")
    if isinstance(out["python.arch_list"], list):
        out["python.arch_list"] = [str(a) for a in out["python.arch_list"]]
    if "devices" in data:
        out[DEVICE_FACT] = _capabilities(data["devices"])
    else:
        out[DEVICE_FACT] = Unavailable(no_cuda)
    return out


@probe
def python_env(c: Collector) -> None:
    """Source: a child interpreter running perfstack.host.pyinfo (python.json in a bundle).
    Shell: python -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_arch_list())'"""
    source = c.host.python_source
    try:
        values = parse_pyinfo(c.host.python_info())
    except Unavailable as e:
        c.missing_all(KEYS, f"the Python stack could not be read: {e.reason}", source)
        return
    except Malformed as e:
        refused = c.host.bad_file("python.json", str(e))
        if refused is not None:
            raise refused from None
        c.missing_all(KEYS, f"{PYINFO} printed something that is {e}", source)
        return
    for key, value in values.items():
        if isinstance(value, Unavailable):
            c.missing(key, value.reason, source)
        else:
            c.put(key, value, source)


def parse_nccl_conf(text: str) -> dict[str, str]:
    """NAME=VALUE lines, read the way NCCL reads them: split at the first '=', no trimming, lines
    without '=' skipped. Only NCCL_* names are kept (anything else is not NCCL's to set)."""
    out: dict[str, str] = {}
    for line in text.split("\n"):
        name, sep, value = line.partition("=")
        if sep and name.startswith("NCCL_"):
            out.setdefault(name, value)  # NCCL never overwrites a variable that is already set
    return out


def _absent(reason: str) -> bool:
    # "not in bundle": a bundle recorded before this probe existed, or made by hand without the file.
    return reason.endswith(("absent", "absent (at capture)", "not in bundle"))


@probe
def nccl_conf(c: Collector) -> None:
    """Sources: $NCCL_CONF_FILE (NCCL >= 2.23) or ~/.nccl.conf, then /etc/nccl.conf. NCCL loads them
    in that order without overwriting, and a variable in the environment beats both.
    Shell: cat ~/.nccl.conf /etc/nccl.conf"""
    env = c.env() or {}
    user = env.get("NCCL_CONF_FILE") or (f"{env['HOME'].rstrip('/')}/.nccl.conf" if env.get("HOME") else None)
    paths = [p for p in (user, "/etc/nccl.conf") if p]
    merged: dict[str, dict[str, str]] = {}
    for path in paths:
        try:
            conf = c.parsed(path, parse_nccl_conf)
        except Unavailable as e:
            if _absent(e.reason):
                continue
            c.missing("nccl.conf", e.reason, path)
            return
        for name, value in conf.items():
            merged.setdefault(name, {"value": value, "file": path})
    c.put("nccl.conf", merged, ", ".join(paths))
