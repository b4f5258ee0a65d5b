"""An unfused optimizer's parameters, however the trace records them (a foreach op's tensor lists, a
per-parameter loop's operators, the backward's AccumulateGrad nodes), and what compiling the model leaves
of a step's launches: the optimizer step's, eager."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfstack.profile import busy
from perfstack.profile.summary import profile_run
from perfstack.profile.trace import CpuEvent

T = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
ADAM = ("aten::add", "aten::lerp_", "aten::mul_", "aten::addcmul_", "aten::sqrt", "aten::div", "aten::add_",
        "aten::addcdiv_")  # torch.optim.Adam(foreach=False): these, once per parameter, its shape first


def op(name: str, *dims: object) -> CpuEvent:
    return CpuEvent("op", name, 0.0, 1.0, 1, dims=list(dims))


def loop(shapes: list[list[int]], names: tuple[str, ...] = ADAM, steps: int = 1) -> list[CpuEvent]:
    return [op(n, s, s, []) for _ in range(steps) for s in shapes for n in names]


SHAPES = [[384, 64], [384], [1536, 384], [384, 1536]] * 5  # 20 parameter tensors
TOTAL = sum(a * (b[0] if b else 1) for a, *b in SHAPES)


def test_a_per_parameter_loop_counts_each_parameter_once():
    assert busy._params_updated(loop(SHAPES), 1) == TOTAL
    assert busy._params_updated(loop(SHAPES, steps=3), 3) == TOTAL  # per step
    # SGD with momentum: add_ twice per parameter (the gradient into the buffer, the buffer into the parameter)
    sgd = [o for s in SHAPES for o in (op("aten::mul_", s, []), op("aten::add_", s, s), op("aten::add_", s, s))]
    assert busy._params_updated(sgd, 1) == TOTAL
    assert busy._params_updated(loop(SHAPES[:5]), 1) == 0  # five calls: not a loop over parameters


def test_a_foreach_ops_tensor_list_holds_the_parameters():
    foreach = [op("aten::_foreach_lerp_", SHAPES, SHAPES, [])]
    assert busy._params_updated(foreach, 1) == TOTAL
    assert busy._params_updated([op("aten::_foreach_lerp_", [], [], [])], 1) == 0  # (torch 2.11: no shapes)


def test_the_parameters_of_a_foreach_adam_without_shapes_come_from_accumulate_grad():
    # GPT-2 (124 M parameters, the embedding tied to the head) trained with foreach AdamW on an H200 (torch 2.11):
    # its foreach ops record no shapes; the backward's AccumulateGrad nodes give each parameter's gradient
    run = profile_run([T / "validation" / "h200-holdout" / "gpt2.pt.trace.json.gz"])
    e = run.profile.waste.optimizer_not_fused
    assert e is not None and e.params == pytest.approx(124.44e6, rel=0.002)


def test_compiling_the_model_leaves_the_optimizer_steps_launches_eager():
    # a tiny MLP with foreach AdamW (H100): the whole step in one graph measured 87%; compiling the model
    # captures its forward and backward only, and the optimizer's launches stay
    run = profile_run([T / "h100" / "launch-bound.pt.trace.json.gz"], unprofiled_step_ms=3.729)
    p = run.profile
    assert p.launch.optimizer_launches_per_step == 8
    whole, model = p.whatif["launch-bound"].pct, p.whatif["compile-cudagraphs"].pct
    assert 70 < whole < 90 and 40 < model < whole - 10
