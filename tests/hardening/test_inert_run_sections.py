"""A Run's profile and estimates sections are typed when the Run is loaded: a wrong type deep inside
is exit 2 naming the field for report and diff, never an internal error in a renderer."""

from __future__ import annotations

import copy
import glob
import json
import random
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from perfstack.cli.main import main
from perfstack.errors import InputError
from perfstack.model import Run
from perfstack.profile.summary import profile_run

ROOT = Path(__file__).resolve().parents[2]
PROFILE_RUN = ROOT / "docs" / "examples" / "h100-profile-capture.run.json"
TRACES = ROOT / "tests" / "fixtures" / "traces"


@pytest.fixture(scope="module")
def estimate_runs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("estimates")
    out = {"infer": d / "infer.json", "train": d / "train.json"}
    assert main(["estimate", "infer", "-m", "gpt2", "-q", "-o", str(out["infer"])]) == 0
    assert main(["estimate", "train", "-m", "llama-3-8b", "--batch", "1", "--seq", "2048", "--tp", "2", "--dp", "2",
                 "-q", "-o", str(out["train"])]) == 0
    return out


def _mutated(src: Path, dst: Path, path: tuple, value: Any) -> Path:
    d = json.loads(src.read_text())
    node = d
    for k in path[:-1]:
        node = node[k]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    dst.write_text(json.dumps(d))
    return dst


_DELETE = object()

PROFILE_CASES = [
    (("profile", "steps", 0, "total_ms"), "12", "profile.steps[0].total_ms must be a number, not '12'"),
    (("profile", "steps", 1, "categories", "gemm"), None, "profile.steps[1].categories.gemm must be a number"),
    (("profile", "steps"), 5, "profile.steps must be a list of objects, not 5"),
    (("profile", "ops", 1, "tflops"), "fast", "profile.ops[1].tflops must be a number or null"),
    (("profile", "ops", 0, "pct_of_peak"), [], "profile.ops[0].pct_of_peak must be a number or null, not a list"),
    (("profile", "idle_gaps", 0, "duration_ms"), "2.0", "profile.idle_gaps[0].duration_ms must be a number"),
    (("profile", "idle_gaps", 2, "reason"), {"a": 1}, "profile.idle_gaps[2].reason must be a string"),
    (("profile", "kernel_classes"), "GEMM", "profile.kernel_classes must be a list"),
    (("profile", "kernel_classes", 0, "time_ms"), True, "profile.kernel_classes[0].time_ms must be a number or null"),
    (("profile", "breakdown_ms", "gemm"), "0.2", "profile.breakdown_ms.gemm must be a number"),
    (("profile", "mfu", "value"), "1.7%", "profile.mfu.value must be a number"),
    (("profile", "overhead", "method"), 3, "profile.overhead.method must be one of \"\", none, measured, estimated, not 3"),
    (("profile", "device_name"), ["H100"], "profile.device_name must be a string or null"),
    (("profile", "straggler"), {"rank": 1}, "profile.straggler.excess_ms is missing"),
    (("profile", "mfu", "value"), _DELETE, "profile.mfu.value is missing"),
]

ESTIMATE_CASES = [
    ("infer", ("estimates", "working", "ttft_s", "value"), "12", "estimates.working.ttft_s.value must be a number"),
    ("infer", ("estimates", "working", "weights_bytes", "label"), 7, "estimates.working.weights_bytes.label must be"),
    ("infer", ("estimates", "working", "kv_cache_bytes", "assumptions"), "none",
     "estimates.working.kv_cache_bytes.assumptions must be a list"),
    ("infer", ("estimates", "memory", "total_bytes"), "15 GB", "estimates.memory.total_bytes must be a number"),
    ("infer", ("estimates", "settings", "batch"), "8", "estimates.settings.batch must be an integer"),
    ("infer", ("estimates", "settings", "prompt"), _DELETE, "estimates.settings.prompt is missing"),
    ("infer", ("estimates", "fit", 0, "gpus_needed"), "2", "estimates.fit[0].gpus_needed must be an integer or null"),
    ("infer", ("estimates", "kind"), 3, "estimates.kind must be one of infer, train, not 3"),
    ("infer", ("estimates", "model"), "gpt2", "estimates.model must be a JSON object"),
    ("infer", ("estimates", "model", "name"), 2, "estimates.model.name must be a string, not 2"),
    ("infer", ("estimates", "settings"), ["batch"], "estimates.settings must be a JSON object, not a list"),
    ("infer", ("estimates", "settings"), _DELETE, "estimates.settings is missing"),
    ("infer", ("estimates", "fit", 0, "gpus_needed"), _DELETE, "estimates.fit[0].gpus_needed is missing"),
    ("infer", ("estimates", "fit"), 7, "estimates.fit must be a list of objects or null, not 7"),
    ("train", ("estimates", "settings", "seq"), _DELETE, "estimates.settings.seq is missing"),
    ("train", ("estimates", "settings", "grad_ckpt"), "no", "estimates.settings.grad_ckpt must be true or false"),
    ("train", ("estimates", "fit", 1, "fits"), _DELETE, "estimates.fit[1].fits is missing"),
    ("train", ("estimates", "capacity", "gpu_capacity_bytes"), {}, "estimates.capacity.gpu_capacity_bytes must be"),
]


def _refused(argv: list[str], capsys, field_message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err and field_message in err, err


@pytest.mark.parametrize("path,value,message", PROFILE_CASES, ids=[".".join(map(str, c[0][1:])) for c in PROFILE_CASES])
def test_report_and_diff_of_a_mistyped_profile_run_name_the_field(path, value, message, tmp_path, capsys):
    bad = _mutated(PROFILE_RUN, tmp_path / "bad.json", path, value)
    _refused(["report", str(bad)], capsys, message)
    _refused(["report", "-f", "html", "-o", str(tmp_path / "r.html"), str(bad)], capsys, message)
    _refused(["diff", str(PROFILE_RUN), str(bad)], capsys, message)


@pytest.mark.parametrize("kind,path,value,message", ESTIMATE_CASES, ids=[".".join(map(str, c[1][1:])) for c in ESTIMATE_CASES])
def test_report_and_diff_of_a_mistyped_estimate_run_name_the_field(kind, path, value, message, estimate_runs, tmp_path,
                                                                    capsys):
    bad = _mutated(estimate_runs[kind], tmp_path / "bad.json", path, value)
    _refused(["report", str(bad)], capsys, message)
    _refused(["report", "-f", "md", str(bad)], capsys, message)
    _refused(["diff", str(bad), str(estimate_runs[kind])], capsys, message)


def test_every_profile_run_perfstack_writes_loads_back():
    runs = [profile_run([f]) for f in sorted(glob.glob(str(TRACES / "h100" / "*.json.gz")))]
    runs.append(profile_run(sorted(glob.glob(str(TRACES / "h200x2" / "ddp-not-overlapped.rank*.json.gz")))))
    assert runs[-1].profile.straggler and len(runs) > 10
    for run in runs:
        d = json.loads(run.to_json())
        assert Run.from_dict(d).to_dict()["profile"] == d["profile"]


# -- a fuzz of types over real Runs: every mutation is refused naming its field, or renders -----------
_WRONG = ["12", None, True, [], {}, -1, 1.5, "x"]


def _leaves(v: Any, path: tuple = ()) -> Iterator[tuple]:
    if path:
        yield path
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _leaves(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v[:3]):
            yield from _leaves(x, path + (i,))


def _where(path: tuple) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


@pytest.mark.parametrize("which", ["profile", "infer", "train"])
def test_fuzzed_types_are_refused_by_field_or_rendered(which, estimate_runs, tmp_path, capsys):
    src = PROFILE_RUN if which == "profile" else estimate_runs[which]
    base = json.loads(src.read_text())
    section = "profile" if which == "profile" else "estimates"
    rng = random.Random(15)
    cases = [(p, w) for p in _leaves(base[section], (section,)) for w in _WRONG]
    rendered = refused = 0
    for path, value in rng.sample(cases, 120):
        d = copy.deepcopy(base)
        node = d
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        try:
            Run.from_dict(d)
        except InputError as e:  # refused: the message names the mutated field or one inside it
            assert e.message.startswith(_where(path)), (path, value, e.message)
            refused += 1
            continue
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(d))
        for argv in (["report", "-v", str(bad)], ["report", "-f", "md", str(bad)],
                     ["report", "-f", "html", "-o", str(tmp_path / "r.html"), str(bad)],
                     ["diff", str(src), str(bad)], ["diff", str(bad), str(src)]):
            assert main(argv) in (0, 1), (path, value, argv, capsys.readouterr().err[-300:])
        capsys.readouterr()
        rendered += 1
    assert refused > 30 and rendered > 5  # both outcomes are exercised


# -- numbers at the edge of finite: a Run may hold them, the charts must still draw ---------------
EDGE = [("profile", ("profile", "kernel_classes", 0, "tflops")), ("infer", ("estimates", "time", "ttft_s")),
        ("train", ("estimates", "time", "step_time_s")), ("profile", ("profile", "breakdown_ms", "gemm"))]


@pytest.mark.parametrize("value", [1e308, -1e308, 5e-324])
@pytest.mark.parametrize("which,path", EDGE, ids=[".".join(map(str, p[1:])) for _, p in EDGE])
def test_huge_finite_numbers_are_drawn_at_the_edge_of_a_chart(which, path, value, estimate_runs, tmp_path, capsys):
    src = PROFILE_RUN if which == "profile" else estimate_runs[which]
    bad = _mutated(src, tmp_path / "bad.json", path, value)
    page = tmp_path / "r.html"
    assert main(["report", "-f", "html", "-o", str(page), str(bad)]) == 0, capsys.readouterr().err[-300:]
    assert "<svg" in page.read_text()
    # every coordinate is a number: none became inf or nan on the way
    assert not re.search(r'="-?(inf|nan)', page.read_text())
