"""The fixed sets of words a Run's records hold (what bounds a step, how the profiler's overhead was found, what
became of a fleet's node, why an all-reduce ran, what became of a finding in a diff...) are checked when the Run
is read: a word outside the set is refused naming the field, exit 2 through ``perfstack report``, instead of a
report that renders it as if it were known. The sets are the words the code writes (a Literal in the record,
named by the writer too), so every Run perfstack writes still loads."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from fixtures.fleet_runs import fleet

from perfstack.cli.main import main
from perfstack.errors import InputError
from perfstack.fleet import analyze, summarize
from perfstack.model import Run
from perfstack.records.diff import Diff
from perfstack.records.fleet import Comms, Group, Point, Suspect
from perfstack.records.meta import RunMeta

FIXTURES = Path(__file__).parent / "fixtures"
TRACE = FIXTURES / "traces" / "h100" / "fp32-matmul.pt.trace.json.gz"
FIXED = FIXTURES / "traces" / "h100" / "fp32-matmul-fixed.pt.trace.json.gz"


@pytest.fixture(scope="module")
def profile_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("profile")
    for trace, name in ((TRACE, "before.json"), (FIXED, "after.json")):
        assert main(["profile", "--trace", str(trace), "-o", str(d / name), "-q"]) == 0
    return d / "before.json", d / "after.json"


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], d: dict[str, Any], message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def _op_with_bound(p: dict[str, Any]) -> str:
    return f"ops[{next(i for i, o in enumerate(p['ops']) if 'bound' in o)}]"


@pytest.mark.parametrize("where, word, message", [
    ("timeline.bound", "disk", "profile.timeline.bound must be one of gpu, cpu, syncs or null, not 'disk'"),
    ("timeline.attribution", "guessed", "profile.timeline.attribution must be one of \"\", launch, the GPU-side "
                                        "ProfilerStep spans, timestamp (the CPU step windows), not 'guessed'"),
    ("overhead.method", "guessed", "profile.overhead.method must be one of \"\", none, measured, estimated"),
    ("OP.bound", "network", ".bound must be one of compute, memory or null, not 'network'"),
])
def test_a_profile_word_outside_its_set_is_refused_naming_the_field(profile_runs, tmp_path, capsys, where, word,
                                                                    message):
    d = json.loads(profile_runs[0].read_text())
    p = d["profile"]
    section, key = where.split(".")
    if section == "OP":
        section = _op_with_bound(p)
        p["ops"][int(section[4:-1])][key] = word
    else:
        p[section][key] = word
    _refused(tmp_path, capsys, d, message)


def test_every_word_a_profile_writes_loads(profile_runs):
    for path in profile_runs:
        run = Run.load(path)
        assert run.profile is not None and run.profile.timeline is not None
        assert run.profile.timeline.bound in ("gpu", "cpu", "syncs") and run.profile.timeline.attribution
        assert run.profile.overhead is not None and run.profile.overhead.method in ("none", "measured", "estimated")
        assert any(o.bound for o in run.profile.ops)


def _fleet_run() -> dict[str, Any]:
    runs = fleet("h200x2-bench-full", 3, seed=3, gpus=2)
    nodes = [summarize(Run.from_dict(d), f"{d['meta']['fleet']['node']}.gpu{d['meta']['fleet']['gpu']}")
             for d in runs]
    a = analyze(nodes)
    a.comms = Comms(backend="nccl", method="pairs", names={"m1": "node000", "m2": "node001"},
                    groups=[Group(machines=["m1", "m2"], why="fleet",
                                  points=[Point(bytes=1 << 20, time_us=40.0, busbw_gbps=26.2, samples=8)])],
                    suspects=[Suspect(kind="node", machines=["m2"], busbw_gbps=10.0, median_gbps=26.2, text="slow")])
    d = Run(meta=RunMeta(command="fleet report")).to_dict()
    d["fleet"] = json.loads(json.dumps(a.to_dict()))
    return d


@pytest.mark.parametrize("path, word, message", [
    (("members", 0, "status"), "lost", "fleet.members[0].status must be one of ok, failed, other version, not 'lost'"),
    (("comms", "method"), "ring", "fleet.comms.method must be one of pairs, bisection, not 'ring'"),
    (("comms", "groups", 0, "why"), "hunch", "fleet.comms.groups[0].why must be one of fleet, pair, half, probe, "
                                             "confirm, not 'hunch'"),
    (("comms", "suspects", 0, "kind"), "rack", "fleet.comms.suspects[0].kind must be one of node, link, not 'rack'"),
])
def test_a_fleet_word_outside_its_set_is_refused_naming_the_field(tmp_path, capsys, path, word, message):
    d = _fleet_run()
    assert Run.from_dict(copy.deepcopy(d)).to_dict() == d  # the words the fleet writes load back
    node = d["fleet"]
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = word
    _refused(tmp_path, capsys, d, message)


@pytest.mark.parametrize("path, word, message", [
    (("findings", 0, "status"), "gone", "diff.findings[0].status must be one of fixed, introduced, unchanged, "
                                        "not checked after, not checked before, not 'gone'"),
    (("profile", "step_basis"), "guessed", "diff.profile.step_basis must be one of profiled, without the profiler"),
])
def test_a_saved_diff_with_a_word_outside_its_set_is_refused_naming_the_field(profile_runs, tmp_path, path, word,
                                                                               message):
    out = tmp_path / "diff.json"
    assert main(["diff", str(profile_runs[0]), str(profile_runs[1]), "-f", "json", "-o", str(out)]) == 0
    d = json.loads(out.read_text())
    assert Diff.from_dict(copy.deepcopy(d)).to_dict() == d  # the words the diff writes load back
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = word
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace(".", r"\.")):
        Diff.from_dict(d)
