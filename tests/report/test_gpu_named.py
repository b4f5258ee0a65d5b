"""Reports of GPU work name the GPU the work describes, not 'no NVIDIA GPU seen': a profile Run the traced
device, an estimate the GPU it is for (and the model and settings), a trial the GPU the script ran on."""

from __future__ import annotations

import json
from pathlib import Path

from perfstack.cli.main import main
from perfstack.model import Run
from perfstack.report import html, markdown
from perfstack.report.views import build

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def test_a_profile_run_names_the_traced_gpu():
    view = build(Run.load(RUNS / "h100-profile-capture.json"))
    assert view.gpus == "NVIDIA H100 80GB HBM3 (the traced GPU)"
    assert "NVIDIA H100 80GB HBM3 (the traced GPU)" in html.render_run(view)


def test_an_estimate_names_its_gpu_model_and_settings(tmp_path, capsys):
    out = tmp_path / "e.json"
    assert main(["-q", "estimate", "infer", "--model", "llama-3-8b", "--gpu", "h200", "--batch", "16", "-o", str(out)]) == 0
    capsys.readouterr()
    view = build(Run.load(out))
    assert "H200" in view.gpus and "no NVIDIA GPU" not in view.gpus
    page, md = html.render_run(view), markdown.render_run(view)
    for text in (page, md):
        assert "llama-3-8b · infer · batch 16" in text


def test_a_machine_run_still_says_what_it_saw():
    assert build(Run()).gpus == "no NVIDIA GPU seen"
    run = Run.from_dict(json.loads((RUNS / "h100-doctor.json").read_text()))
    assert "H100" in build(run).gpus and "(the" not in build(run).gpus
