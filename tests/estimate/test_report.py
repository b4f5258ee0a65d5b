import io

from rich.console import Console

from perfstack.estimate import catalog, hardware, infer, train
from perfstack.model import Run
from perfstack.records.meta import RunMeta
from perfstack.report.estimate_text import render_estimate, render_models
from perfstack.report.views import build


def _render(est, verbose=False):
    buf = io.StringIO()
    render_estimate(build(Run(meta=RunMeta(command="estimate"), estimates=est)), Console(file=buf, width=140, no_color=True),
                    verbose=verbose)
    return buf.getvalue()


def test_infer_table_has_component_value_formula():
    est = infer.estimate(catalog.get("llama-3-70b"), hardware.resolve("h200", "bf16"),
                         infer.InferSettings(batch=1, prompt=4000, gen=96))
    out = _render(est)
    assert "component" in out and "formula" in out and "total per GPU" in out
    assert "N = L·[d·H_q·d_h" in out  # brackets printed literally, not taken for markup
    assert "needs tensor parallelism" in out and "h200×2" in out
    assert "GB" in out and "ms" in out


def test_verbose_shows_inputs_and_assumptions():
    est = train.estimate(catalog.get("gpt2"), hardware.resolve("a100-sxm4-80gb", "bf16"),
                         train.TrainSettings(batch=8, seq=1024, grad_ckpt=True))
    out = _render(est, verbose=True)
    assert "layer inputs" in out and "B=8" in out and "autocast" in out and "A100" in out


def test_models_table():
    buf = io.StringIO()
    render_models(Console(file=buf, width=200, no_color=True))
    out = buf.getvalue()
    assert "deepseek-v3" in out and "671.026 B" in out and "37.552 B" in out
