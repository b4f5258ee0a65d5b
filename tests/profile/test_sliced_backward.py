"""A tensor read one slice at a time in a loop (``profile/scatter.py``): the unrolled GRU decoder of the H200
hold-out library reads its inputs with ``x[:, t]`` over 384 time steps, so its backward fills and adds a
gradient of the whole 128×384×1024 tensor per time step; taken apart once with ``x.unbind(1)`` the script
measured 26.4% faster without the profiler (measured.json). Tensors sliced a few times each (a rotary
embedding's two halves in every layer) are not such a loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfstack.profile.summary import profile_run

H = Path(__file__).parents[1] / "fixtures" / "traces" / "validation" / "h200-holdout"
RUNS = {r["workload"]: r for r in json.loads((H / "measured.json").read_text())["runs"]}


def _run(name: str):
    r = RUNS[name]
    return profile_run([H / t for t in r["traces"]], unprofiled_step_ms=r["unprofiled_step_ms"])


def test_a_tensor_sliced_per_time_step_is_found_and_its_unbind_predicted():
    run = _run("rnn-decoder")
    e = run.profile.waste.sliced_backward
    assert e is not None and e.nodes_per_step == 384 and e.source_shape == "128×384×1024"
    assert e.source_bytes == 128 * 384 * 1024 * 4 and e.filled_bytes_per_step == 384 * e.source_bytes
    assert 60 < e.time_ms < 80 and e.fixed_ms < 1  # 384 fills and 383 adds of 192 MiB, against one stack
    f = {x.id: x for x in run.findings}["sliced-backward"]
    measured = RUNS["rnn-decoder"]["fixes"]["unbind"]["gain_pct"]
    assert abs(f.recoverable_pct - measured) <= 15 and "x.unbind(1)" in f.fix
    assert "384 slices per step of a 128×384×1024 tensor" in f.evidence


@pytest.mark.parametrize("name", ["llama", "hf-grad-ckpt", "gpt2"])
def test_tensors_sliced_a_few_times_each_are_not_a_loop(name):
    """Llama's rotary embedding slices q and k into halves in each of its layers (64 SliceBackward0 nodes of
    one shape per step, 2 per tensor): no finding."""
    run = _run(name)
    assert run.profile.waste.sliced_backward is None
    assert "sliced-backward" not in {f.id for f in run.findings}
