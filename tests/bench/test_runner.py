import pytest

from perfstack import bench
from perfstack.bench import BenchContext, run, select
from perfstack.bench.verdict import judge, lower_is_better
from perfstack.errors import CannotRunHere, UsageError
from perfstack.model import Facts, Measurement


def ctx(**kw):
    return BenchContext(suite="quick", facts=Facts(), **kw)


def test_selection_and_bad_names():
    names = [b.name for b in select([], "quick", None)]
    assert "host" in names and "storage" not in names and "collectives" not in names
    assert "collectives" in [b.name for b in select([], "full", None)]
    with pytest.raises(UsageError, match="unknown benchmark gemmm"):
        select(["gemmm"], "quick", None)
    with pytest.raises(UsageError, match="needs a path"):
        select(["storage"], "quick", None)


def test_gpu_benches_skipped_without_cuda_and_host_still_runs(monkeypatch):
    monkeypatch.setattr(bench, "cuda_devices", lambda: (0, "torch is a CPU-only build"))
    calls = []
    fake = bench.Benchmark("fakehost", False, "", lambda c: calls.append(1) or [Measurement("fakehost", "x", 1.0, "u")])
    gpu = bench.Benchmark("fakegpu", True, "", lambda c: pytest.fail("must not run"))
    out = run([gpu, fake], ctx())
    assert out[0].status == "skipped" and "no CUDA device" in out[0].reason
    assert out[1].value == 1.0 and calls == [1]


def test_only_gpu_benches_without_cuda_cannot_run_here(monkeypatch):
    monkeypatch.setattr(bench, "cuda_devices", lambda: (0, "no CUDA device"))
    gpu = bench.Benchmark("fakegpu", True, "", lambda c: [])
    with pytest.raises(CannotRunHere, match="needs a CUDA device"):
        run([gpu], ctx())


def test_a_failing_benchmark_costs_only_its_figures(monkeypatch):
    def boom(c):
        raise RuntimeError("CUDA error: out of memory")
    out = run([bench.Benchmark("boom", False, "", boom),
               bench.Benchmark("ok", False, "", lambda c: [Measurement("ok", "ok", 2.0, "u")])], ctx())
    assert out[0].status == "error" and "out of memory" in out[0].reason
    assert out[1].value == 2.0


def test_multi_gpu_bench_skipped_on_one_gpu(monkeypatch):
    monkeypatch.setattr(bench, "cuda_devices", lambda: (1, ""))
    out = run([bench.Benchmark("p2pfake", True, "", lambda c: [], min_gpus=2)], ctx())
    assert out[0].status == "skipped" and "needs 2 GPUs" in out[0].reason


def test_verdicts():
    m = judge(Measurement("gemm", "g", 780.0, "TFLOP/s"), 989.4, "datasheet", 0.8)
    assert m.fraction == pytest.approx(0.788, abs=1e-3) and m.verdict == "good"
    assert judge(Measurement("gemm", "g", 600.0, "TFLOP/s"), 989.4, "", 0.8).verdict == "below expected"
    assert judge(Measurement("gemm", "g", 100.0, "TFLOP/s"), 989.4, "", 0.8).verdict == "low"
    assert judge(Measurement("host", "h", 20.0, "GB/s"), None, "", None).verdict == "no reference"
    assert lower_is_better(Measurement("launch", "l", 1.5, "us"), 2.0, "").verdict == "good"
    assert lower_is_better(Measurement("launch", "l", 9.0, "us"), 2.0, "").verdict == "low"


def test_table_shows_reasons_literally():
    """Reasons and notes carry text like "perfstack[bench]" that must not be read as markup."""
    import io

    from rich.console import Console

    from perfstack.model import Run
    from perfstack.report.bench_text import render_measurements
    from perfstack.report.views import build
    m = Measurement("host", "host", None, "", status="skipped", reason="numpy is not installed: pip install 'perfstack[bench]'")
    console = Console(file=io.StringIO(), width=200, color_system=None)
    render_measurements(build(Run(measurements=[m])), console)
    assert "perfstack[bench]" in console.file.getvalue()
