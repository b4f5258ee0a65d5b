"""Benchmarks: what this machine really delivers, against the SKU's physical peak.

Each module registers one or more benchmarks with ``@benchmark``. A benchmark is a function of a
``BenchContext`` returning Measurements; it imports torch (or numpy) inside the function, so
perfstack works where they are absent. The runner handles selection, the no-CUDA case, progress
and errors: one benchmark failing costs only its own figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

from perfstack.discover import import_submodules
from perfstack.errors import CannotRunHere, UsageError
from perfstack.model import Facts, Measurement

# The order benchmarks run and are listed in: compute, then memory, the host link, launch cost, then the
# multi-GPU, host and storage figures. A registered benchmark missing here stops ``load`` loudly.
ORDER = ("gemm", "hbm", "h2d", "d2h", "launch", "p2p", "collectives", "host", "storage")
Suite = Literal["quick", "full"]
SUITES: tuple[Suite, ...] = ("quick", "full")


def suite_named(name: str) -> Suite:
    """The suite of that name (a command-line value); UsageError for any other."""
    for suite in SUITES:
        if suite == name:
            return suite
    raise UsageError(f"unknown suite {name}", hint="choose quick or full")


@dataclass
class BenchContext:
    suite: Suite
    facts: Facts  # the doctor's facts: GPU name, PCIe link, NUMA nodes, ...
    device: int = 0
    storage_path: str | None = None
    progress: Callable[[str], None] = lambda _msg: None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def full(self) -> bool:
        return self.suite == "full"


@dataclass(frozen=True)
class Benchmark:
    name: str
    needs_cuda: bool
    doc: str
    run: Callable[[BenchContext], list[Measurement]]
    in_quick: bool = True  # part of the default quick suite
    min_gpus: int = 1
    # Its figures depend on the host as well as the GPU: CPU time (launching from Python, staging a
    # pageable copy), host memory bandwidth or the PCIe root (DMA from host memory). Two of these
    # running at once on one machine slow each other, so fleet bench runs them with nothing else on
    # the machine; GPU-only work (GEMM, HBM) on different GPUs does not interfere and runs in parallel.
    host_bound: bool = False


BENCHMARKS: dict[str, Benchmark] = {}


def benchmark(name: str, *, needs_cuda: bool, doc: str, host_bound: bool, in_quick: bool = True,
              min_gpus: int = 1) -> Callable[[Callable[[BenchContext], list[Measurement]]], Any]:
    """``host_bound`` has no default: each benchmark says whether the host's CPUs, memory or PCIe root
    are part of what it measures (see ``Benchmark.host_bound``)."""
    def register(fn: Callable[[BenchContext], list[Measurement]]) -> Callable[[BenchContext], list[Measurement]]:
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name} registered twice")
        BENCHMARKS[name] = Benchmark(name, needs_cuda, " ".join(doc.split()), fn, in_quick, min_gpus, host_bound)
        return fn
    return register


def load() -> dict[str, Benchmark]:
    """Every benchmark, in ``ORDER``: each module of this package registers its own with ``@benchmark``."""
    import_submodules(__name__)
    if set(ORDER) != set(BENCHMARKS) or len(ORDER) != len(set(ORDER)):
        raise ValueError(f"benchmarks and ORDER differ: {sorted(set(ORDER) ^ set(BENCHMARKS))}")
    return {name: BENCHMARKS[name] for name in ORDER}


def cuda_devices() -> tuple[int, str]:
    """(number of CUDA devices, why none) without failing when torch is absent or broken."""
    try:
        import torch
    except ImportError:
        return 0, "torch is not installed"
    except Exception as e:  # a broken install
        return 0, f"torch failed to import: {e}"
    try:
        if not torch.cuda.is_available():
            return 0, "no CUDA device" + ("" if torch.version.cuda else " (torch is a CPU-only build)")
        return torch.cuda.device_count(), ""
    except Exception as e:
        return 0, f"CUDA unusable: {e}"


def select(names: Iterable[str], suite: str, storage_path: str | None) -> list[Benchmark]:
    benches = load()
    names = list(names)
    unknown = [n for n in names if n not in benches]
    if unknown:
        raise UsageError(f"unknown benchmark {', '.join(unknown)}", hint=f"choose from: {', '.join(benches)}")
    suite_named(suite)
    if names:
        chosen = [benches[n] for n in names]
    else:
        chosen = [b for b in benches.values() if (b.in_quick or suite == "full") and b.name != "storage"]
        if storage_path:
            chosen.append(benches["storage"])
    if any(b.name == "storage" for b in chosen) and not storage_path:
        raise UsageError("the storage benchmark needs a path", hint="perfstack bench storage --path /data/shard-000")
    return chosen


def skipped(b: Benchmark, reason: str) -> Measurement:
    return Measurement(bench=b.name, name=b.name, value=None, unit="", status="skipped", reason=reason)


def run(chosen: list[Benchmark], ctx: BenchContext) -> list[Measurement]:
    """Run the chosen benchmarks; GPU ones are reported skipped where there is no CUDA device,
    and asking only for GPU benchmarks on such a machine is CannotRunHere."""
    n_gpus, why = cuda_devices() if any(b.needs_cuda for b in chosen) else (0, "")
    if chosen and all(b.needs_cuda for b in chosen) and n_gpus == 0:
        raise CannotRunHere(f"benchmark {', '.join(b.name for b in chosen)} needs a CUDA device: {why}",
                            hint="run 'perfstack bench host' for the host benchmarks, or run on the GPU machine")
    out: list[Measurement] = []
    for b in chosen:
        if b.needs_cuda and n_gpus < b.min_gpus:
            no_gpu = why if why.startswith("no CUDA device") else f"no CUDA device ({why})"
            out.append(skipped(b, no_gpu if n_gpus == 0 else
                               f"needs {b.min_gpus} GPUs, this machine has {n_gpus}"))
            continue
        ctx.progress(b.name)
        try:
            out += b.run(ctx)
        except (UsageError, CannotRunHere):
            raise
        except Exception as e:  # one benchmark failing costs only its own figures
            out.append(Measurement(bench=b.name, name=b.name, value=None, unit="", status="error",
                                   reason=f"{type(e).__name__}: {e}"[:500]))
    return out
