"""Dense GEMM throughput per dtype against the SKU's dense tensor-core peak.

Per dtype: the reference shape (8192³; 4096³ for FP32 in the quick suite) as "gemm.<dtype>.ref",
a search over a few large shapes within a time budget as "gemm.<dtype>.best" (bf16 only in the
quick suite), and bf16 8192³ vs 8191³ as "gemm.bf16.aligned" / "gemm.bf16.misaligned": a
dimension that is not a multiple of 8/16 elements drops cuBLAS onto slower kernels. The aligned
figure is the bf16 reference measurement itself, and the misaligned one is measured right after
it, so the two see the same clocks and temperature.

FLOPs = 2·M·N·K (one multiply-add is two operations). Operands are random (zeros draw less power
and run faster, flattering the figure). No L2 flush: the operands of these shapes are 32 MiB to
1 GiB each, far beyond a 50 MB L2, and a GEMM this large is compute-bound (thousands of FLOPs per
byte), so what the previous repetition left in L2 cannot change its time measurably.
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from perfstack.bench import BenchContext, Suite, _gpu, benchmark, timing
from perfstack.model import Measurement

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
# bf16 (the headline) first: minutes of GEMMs heat the GPU, and at its power cap a hot H100 clocks
# lower (the same 8192³ bf16 GEMM measured ~790 TFLOP/s first and ~690 after 20 s of FP32/TF32).
RUN_ORDER = ("bf16", "fp16", "fp8", "tf32", "fp32")
Shape = tuple[int, int, int]  # (M, N, K): A is M×K, B is K×N
REF: Shape = (8192, 8192, 8192)
REF_FP32_QUICK: Shape = (4096, 4096, 4096)
# Most promising first, so a search cut short by its budget has still tried the likely winners.
SEARCH_QUICK: tuple[Shape, ...] = ((4096, 4096, 8192), (8192, 8192, 8192), (8192, 8192, 16384),
                                   (4096, 4096, 16384), (16384, 16384, 8192), (8192, 8192, 4096))
SEARCH_FULL: tuple[Shape, ...] = SEARCH_QUICK + ((16384, 16384, 16384), (16384, 16384, 4096), (4096, 4096, 4096),
                                                 (4096, 8192, 8192), (8192, 4096, 16384))
SEARCH_BUDGET_S: dict[Suite, float] = {"quick": 4.0, "full": 10.0}  # per dtype
# The same window per shape in both suites, so quick and full give the same figure for a shape.
PER_SHAPE: dict[Suite, timing.Budget] = {"quick": {"budget_s": 0.25, "warmup_s": 0.1}, "full": {"budget_s": 0.25, "warmup_s": 0.1}}
ELEM_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
OUT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2}  # fp8 GEMMs write bf16
MISALIGNED: Shape = (8191, 8191, 8191)


def flops(shape: Shape) -> int:
    m, n, k = shape
    return 2 * m * n * k


def tflops(shape: Shape, seconds: float) -> float:
    return flops(shape) / seconds / 1e12


def bytes_needed(dtype: str, shape: Shape) -> int:
    """Device memory for A, B and C (fp8 also needs the bf16 operands it is converted from)."""
    m, n, k = shape
    operands = (m * k + k * n) * ELEM_BYTES[dtype]
    staging = (m * k + k * n) * 2 if dtype == "fp8" else 0
    return operands + staging + m * n * OUT_BYTES[dtype]


def shape_label(shape: Shape) -> str:
    return "x".join(str(d) for d in shape)


def ref_shape(dtype: str, suite: Suite) -> Shape:
    return REF_FP32_QUICK if dtype == "fp32" and suite == "quick" else REF


def search_plan(dtype: str, suite: Suite) -> tuple[Shape, ...]:
    """The shapes searched for ``dtype``: bf16 only in the quick suite, every dtype in the full one."""
    if suite == "quick":
        return SEARCH_QUICK if dtype == "bf16" else ()
    return SEARCH_FULL


class Search:
    """Shape-search bookkeeping: what was measured (reusing the reference shape's samples), what was
    skipped and why, when the budget ran out, and which shape won."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.budget_s, self.clock, self.t0 = budget_s, clock, clock()
        self.results: dict[Shape, list[float]] = {}
        self.skipped: dict[Shape, str] = {}
        self.not_tried: list[Shape] = []

    def record(self, shape: Shape, samples: list[float]) -> None:
        self.results[shape] = samples

    def wants(self, shape: Shape) -> bool:
        if shape in self.results or shape in self.skipped:
            return False
        if self.clock() - self.t0 > self.budget_s:
            self.not_tried.append(shape)
            return False
        return True

    def table(self) -> list[tuple[Shape, float]]:
        """(shape, TFLOP/s from the median), best first."""
        rows = [(s, tflops(s, timing.summarize(x)["median"])) for s, x in self.results.items() if x]
        return sorted(rows, key=lambda r: -r[1])

    def best(self) -> Shape | None:
        rows = self.table()
        return rows[0][0] if rows else None


@contextmanager
def fp32_precision(torch: Any, dtype: str) -> Iterator[None]:
    """'highest' for true FP32, 'high' (TF32 tensor cores) for tf32; restored afterwards."""
    if dtype not in ("fp32", "tf32"):
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest" if dtype == "fp32" else "high")
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.set_float32_matmul_precision(old)


def fp8_support(torch: Any, device: int) -> str:
    """'' when e4m3 GEMMs run here, else why not."""
    if not (hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")):
        return f"this torch ({torch.__version__}) has no float8_e4m3fn/_scaled_mm"
    cc = torch.cuda.get_device_capability(device)
    if tuple(cc) < (8, 9):
        return f"FP8 tensor cores need compute capability 8.9 or newer; this GPU is {cc[0]}.{cc[1]}"
    return ""


def make_gemm(torch: Any, dtype: str, shape: Shape, device: int) -> Callable[[], Any]:
    """A closure running one GEMM of ``shape`` on random operands."""
    m, n, k = shape
    dev = f"cuda:{device}"
    if dtype == "fp8":
        f8 = torch.float8_e4m3fn
        a = torch.randn(m, k, dtype=torch.bfloat16, device=dev).to(f8)
        b = torch.randn(n, k, dtype=torch.bfloat16, device=dev).to(f8).t()  # column-major, as cuBLASLt wants
        one = torch.ones((), dtype=torch.float32, device=dev)
        # Per-tensor scales of 1.0; fast accumulation is how the FP8 peak is reached on Hopper.
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                        use_fast_accum=True)
    tdt = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(m, k, dtype=tdt, device=dev)
    b = torch.randn(k, n, dtype=tdt, device=dev)
    c = torch.empty(m, n, dtype=tdt, device=dev)
    return lambda: torch.mm(a, b, out=c)


def time_shape(torch: Any, dtype: str, shape: Shape, device: int, suite: Suite, min_reps: int) -> list[float] | str:
    """Raw seconds per GEMM, or the reason this shape was not run."""
    need = bytes_needed(dtype, shape)
    free = _gpu.free_bytes(torch, device)
    if not _gpu.fits(need, free):
        return f"{shape_label(shape)} {_gpu.no_room(need, free)}"
    try:
        with fp32_precision(torch, dtype):
            fn = make_gemm(torch, dtype, shape, device)
            return timing.measure(fn, timing.CudaTimer(torch), min_reps=min_reps, max_reps=1000, **PER_SHAPE[suite])
    except RuntimeError as e:
        if _gpu.is_oom(e):
            return f"{shape_label(shape)} ran out of GPU memory"
        raise


def params(dtype: str, shape: Shape, **extra: Any) -> dict[str, Any]:
    m, n, k = shape
    p: dict[str, Any] = {"dtype": dtype, "m": m, "n": n, "k": k, "flops": flops(shape)}
    if dtype == "fp32":
        p["matmul_precision"] = "highest"
    elif dtype == "tf32":
        p["matmul_precision"] = "high"
    elif dtype == "fp8":
        p.update(fp8="e4m3fn", op="torch._scaled_mm", use_fast_accum=True, out_dtype="bf16")
    return {**p, **extra}


def figure(name: str, dtype: str, shape: Shape, samples: list[float], **extra: Any) -> Measurement:
    return _gpu.measurement("gemm", name, samples, lambda s: tflops(shape, s), "TFLOP/s", params(dtype, shape, **extra))


@benchmark("gemm", needs_cuda=True, host_bound=False, doc="""Dense matrix-multiply throughput (TFLOP/s) per dtype — FP32, TF32,
           BF16, FP16, FP8 — at 8192³, the best of a shape search, and 8192³ vs 8191³ in BF16, against the
           SKU's dense tensor-core peak.""")
def run(ctx: BenchContext) -> list[Measurement]:
    import torch

    dev = ctx.device
    entry = _gpu.device_entry(torch, ctx.facts, dev)
    spec = _gpu.spec_for(entry)
    out: list[Measurement] = []
    with _gpu.on_device(torch, dev):
        for dtype in RUN_ORDER:
            ctx.progress(f"gemm {dtype}")
            with _gpu.sampled(entry.get("index", dev)) as tel:
                block = _one_dtype(torch, ctx, dtype, spec)
            out += _gpu.finish(block, tel)
    for m in out:
        dtype = m.params.get("dtype", "bf16")
        _gpu.judged(m, _gpu.peak_tflops(spec, dtype), _gpu.source(spec, f"dense {dtype} peak"),
                    _gpu.practical(f"gemm_{dtype}"))
    _gpu.add_notes(out, _gpu.spec_notes(spec, entry))
    return out


def _one_dtype(torch: Any, ctx: BenchContext, dtype: str, spec: Any) -> list[Measurement]:
    dev, suite = ctx.device, ctx.suite
    ref = ref_shape(dtype, suite)
    if dtype == "fp8" and (why := fp8_support(torch, dev)):
        kinds = ("ref", "best") if search_plan(dtype, suite) else ("ref",)
        return [_gpu.skip("gemm", f"gemm.fp8.{k}", why, "TFLOP/s", {"dtype": "fp8"}) for k in kinds]
    out: list[Measurement] = []
    search = Search(SEARCH_BUDGET_S[suite])
    got = time_shape(torch, dtype, ref, dev, suite, min_reps=20)
    if isinstance(got, str):
        out.append(_gpu.skip("gemm", f"gemm.{dtype}.ref", got, "TFLOP/s", params(dtype, ref)))
        search.skipped[ref] = got
    else:
        search.record(ref, got)
        out.append(figure(f"gemm.{dtype}.ref", dtype, ref, got))
    if dtype == "bf16":
        out += _alignment(torch, ctx, got)
    plan = search_plan(dtype, suite)
    if not plan:
        return out
    for shape in plan:
        if not search.wants(shape):
            continue
        got = time_shape(torch, dtype, shape, dev, suite, min_reps=10)
        if isinstance(got, str):
            search.skipped[shape] = got
        else:
            search.record(shape, got)
    table = search.table()
    for shape, _ in table:  # sweep points (shown with -v)
        out.append(figure(f"gemm.{dtype}.{shape_label(shape)}", dtype, shape, search.results[shape], sweep=True))
    best = search.best()
    if best is None:
        out.append(_gpu.skip("gemm", f"gemm.{dtype}.best", "; ".join(search.skipped.values()) or "no shape ran",
                             "TFLOP/s", {"dtype": dtype}))
        return out
    notes = [f"best of {len(table)} shapes searched"]
    if search.not_tried:
        notes.append(f"search budget ({search.budget_s:.0f} s) ran out before "
                     f"{', '.join(shape_label(s) for s in search.not_tried)}")
    if search.skipped:
        notes.append("skipped: " + "; ".join(search.skipped.values()))
    m = figure(f"gemm.{dtype}.best", dtype, best, search.results[best],
               shapes=[[*s, round(v, 1)] for s, v in table])
    m.notes = notes + m.notes
    out.append(m)
    return out


def _alignment(torch: Any, ctx: BenchContext, aligned: list[float] | str) -> list[Measurement]:
    """bf16 8192³ (the reference samples, or why they are missing) vs 8191³ measured right after."""
    if isinstance(aligned, str):
        return [_gpu.skip("gemm", f"gemm.bf16.{label}", f"the 8192³ reference did not run: {aligned}", "TFLOP/s",
                          params("bf16", shape)) for label, shape in (("aligned", REF), ("misaligned", MISALIGNED))]
    out = [figure("gemm.bf16.aligned", "bf16", REF, aligned, same_as="gemm.bf16.ref")]
    r = time_shape(torch, "bf16", MISALIGNED, ctx.device, ctx.suite, min_reps=20)
    if isinstance(r, str):
        return out + [_gpu.skip("gemm", "gemm.bf16.misaligned", r, "TFLOP/s", params("bf16", MISALIGNED))]
    out.append(figure("gemm.bf16.misaligned", "bf16", MISALIGNED, r))
    a, m = out[0].value, out[1].value
    if a and m:
        note = (f"8191³ runs at {m / a:.0%} of the 8192³ throughput ({m:,.0f} vs {a:,.0f} TFLOP/s); "
                "keep GEMM dimensions multiples of 16 (pad vocab, hidden and batch sizes)")
        for x in out:
            x.notes.insert(0, note)
            x.params["misaligned_ratio"] = round(m / a, 4)
    return out
