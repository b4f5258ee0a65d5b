"""Golden outputs: every rendered output of perfstack, from the recorded fixtures, written to a folder and
compared with an earlier folder.

A change that must not move any output (a refactoring of the records, of the renderers' seams) runs this
before and after and compares:

    python benchmarks/golden_outputs.py /tmp/golden-before            # on the commit before
    python benchmarks/golden_outputs.py /tmp/golden-after --compare /tmp/golden-before

``--compare DIR`` prints each file that differs (or exists on one side only) with an excerpt of the unified
diff, and exits 1 on any difference.

What is rendered, each in every format it has (text, md, html, json):

- doctor, from each recorded bundle (tests/fixtures/bundles): the terminal text, the Run (json), the HTML page;
  Markdown through ``report -f md`` of the saved Run (doctor has no Markdown of its own);
- profile --trace, from each recorded trace (tests/fixtures/traces/h100, h200x2; the two ranks of a DDP run
  together): the same four;
- report, of every saved Run (tests/fixtures/runs, and the Runs made here) in the four formats;
- diff, of pairs (doctor H100 vs 2xH200, bench H100 vs 2xH200, each profile trace vs its -fixed twin, two load
  tests), in the four formats;
- estimate infer and train, from built-in model configs: text, json, html, and Markdown through report;
  and a hand-made estimates tree (report of a Run that holds one);
- loadtest: report of a saved load-test Run (built here from seeded request records, as the load-test report
  tests build theirs) in the four formats;
- fleet: ``fleet report`` of a directory of node Runs (tests/fixtures/fleet_runs.py: copies of the recorded
  Runs with seeded spread and planted faults), then of the saved fleet Run, and report of that Run in the
  four formats.

The Runs made here (by doctor, profile, estimate, the load test and fleet) are kept under ``inputs/`` and are
compared too: they are the json format of those commands.

Masked, because they must vary from one run to the next and nothing else does (every mask is applied to
every file, and is listed here):

- times of day (ISO 8601 timestamps: a Run's ``meta.created``), as ``<time>``;
- perfstack's version and the Python version (``meta.tool_version``, ``meta.python`` and wherever a report
  shows them), as ``<version>`` and ``<python>``;
- how long a command took (``meta.elapsed_s`` in JSON, "elapsed_s" rows in text, Markdown and HTML), as
  ``<elapsed>``;
- the absolute path of the output folder (where the Runs made here are read from), as ``<out>``.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import os
import platform
import random
import re
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures")  # relative to ROOT: the paths a Run records are the same in every checkout
FORMATS = ("text", "md", "html", "json")
EXT = {"text": "txt", "md": "md", "html": "html", "json": "json"}


def _setup() -> None:
    os.chdir(ROOT)
    os.environ["COLUMNS"] = "140"  # the terminal renderers lay out at a fixed width
    os.environ.pop("NO_COLOR", None)
    sys.path.insert(0, str(ROOT / "tests"))  # fixtures.fleet_runs


def _cli(argv: list[str]) -> tuple[int, str]:
    """perfstack's CLI in this process: (exit code, stdout; stderr too where it did not finish: a format a
    view does not have is an answer as well, and an error is part of the output to keep)."""
    from perfstack.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    if rc not in (0, 1):
        print(f"note: perfstack {' '.join(argv)} exited {rc}", file=sys.stderr)
        return rc, out.getvalue() + err.getvalue()
    return rc, out.getvalue()


class Golden:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.inputs = out / "inputs"
        self.inputs.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, text: str) -> None:
        (self.out / name).write_text(text, encoding="utf-8")

    def cmd(self, name: str, argv: list[str]) -> None:
        """The stdout of one command, saved as ``name``; the exit code heads it."""
        rc, text = _cli(argv)
        self.write(name, f"# exit {rc}\n{text}")

    def report(self, stem: str, run: Path) -> None:
        for fmt in FORMATS:
            self.cmd(f"report-{stem}.{EXT[fmt]}", ["report", str(run), "-f", fmt, "--no-color"])

    def diff(self, stem: str, before: Path, after: Path) -> None:
        for fmt in FORMATS:
            self.cmd(f"diff-{stem}.{EXT[fmt]}", ["diff", str(before), str(after), "-f", fmt, "--no-color"])

    def job(self, stem: str, argv: list[str]) -> Path:
        """A command that writes a Run: its text (stdout), the Run (json, kept as an input), its HTML page,
        and its Markdown through report."""
        run, page = self.inputs / f"{stem}.json", self.out / f"{stem}.html"
        self.cmd(f"{stem}.txt", [*argv, "--no-color", "-o", str(run), "--html", str(page)])
        self.report(stem, run)
        return run


def doctor(g: Golden) -> dict[str, Path]:
    runs = {}
    for b in sorted(p for p in (FIXTURES / "bundles").iterdir() if p.is_dir()):
        runs[b.name] = g.job(f"doctor-{b.name}", ["doctor", "--bundle", str(b), "--fail-on", "never"])
    return runs


# the two ranks of a DDP run are read together, as one multi-rank profile
_RANKS = re.compile(r"\.rank\d+\.pt\.trace\.json\.gz$")


def profile(g: Golden) -> dict[str, Path]:
    runs = {}
    for machine in ("h100", "h200x2"):
        traces = sorted((FIXTURES / "traces" / machine).glob("*.pt.trace.json.gz"))
        groups: dict[str, list[Path]] = {}
        for t in traces:
            groups.setdefault(_RANKS.sub("", t.name).replace(".pt.trace.json.gz", ""), []).append(t)
        for name, files in groups.items():
            stem = f"{machine}-{name}"
            runs[stem] = g.job(f"profile-{stem}", ["profile", "--trace", *map(str, files), "--fail-on", "never"])
    return runs


ESTIMATES = {
    "infer-llama-3-8b-h100": ["infer", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--batch", "8"],
    "infer-llama-3-70b-tp4": ["infer", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "4", "--weights", "fp8"],
    "train-llama-3-8b": ["train", "--model", "llama-3-8b", "--gpu", "h100-sxm"],
    "train-gpt2-zero": ["train", "--model", "gpt2", "--gpu", "a100-sxm4-80gb", "--dp", "8", "--zero", "2"],
}

# A hand-made estimates section (a tree of {value, unit, formula} leaves), as a user writes one.
TREE = {"memory": {"weights": {"value": 16.06e9, "unit": "B", "formula": "params * 2"},
                   "kv_cache": {"value": 1.07e9, "unit": "B", "formula": "2 * L * kv * d_h * seq * 2"}},
        "latency": {"decode_memory_bound": {"value": 0.0048, "unit": "s", "formula": "bytes / bandwidth"}},
        "notes": ["by hand"]}


def estimate(g: Golden) -> None:
    for stem, argv in ESTIMATES.items():
        g.job(f"estimate-{stem}", ["estimate", *argv])
    tree = g.inputs / "estimate-tree.json"
    tree.write_text(json.dumps({"schema_version": 1, "meta": {"command": "estimate"}, "estimates": TREE}))
    g.report("estimate-tree", tree)


def loadtest_run(seed: int, ttft_ms: float) -> dict[str, Any]:
    """A load-test Run from seeded request records: three levels of a server that saturates at 4 streams."""
    from perfstack.loadtest import metrics, sweep
    from perfstack.records.loadtest import Level, LoadTest, Request, Slo
    from perfstack.model import Run
    from perfstack.records.meta import RunMeta
    rng = random.Random(seed)
    slo = Slo(ttft_ms=100.0, itl_ms=30.0)

    def level(streams: int) -> Level:
        reqs, t = [], 0.0
        for _ in range(60):
            ttft = ttft_ms * max(1, streams / 4) * rng.lognormvariate(0, 0.05)
            gaps = [10.0 * max(1, streams / 8) * rng.lognormvariate(0, 0.05) for _ in range(15)]
            reqs.append(Request(start_s=t, ttft_ms=ttft, e2e_ms=ttft + sum(gaps), itl_ms=gaps, output_tokens=16,
                                input_tokens=8))
            t += (ttft + sum(gaps)) / 1e3 / streams
        return Level(mode="concurrency", load=streams, requests=reqs, summary=metrics.summarize(reqs, slo))

    levels = [level(s) for s in (1, 4, 16)]
    lt = LoadTest(url="http://127.0.0.1:8000", api="chat", model="tiny", levels=levels, slo=slo,
                  workload={"kind": "synthetic", "input_len": 8, "output_len": 16, "ignore_eos": True})
    lt.sweep = sweep.summary(levels, slo, None)
    run = Run(meta=RunMeta(tool="perfstack", command="loadtest", created="2026-01-01T00:00:00+00:00",
                           source=lt.url))
    run.loadtest = lt
    return run.to_dict()


def loadtest(g: Golden) -> None:
    paths = []
    for name, seed, ttft in (("before", 1, 40.0), ("after", 2, 80.0)):
        p = g.inputs / f"loadtest-{name}.json"
        p.write_text(json.dumps(loadtest_run(seed, ttft), indent=2) + "\n")
        g.report(f"loadtest-{name}", p)
        paths.append(p)
    g.diff("loadtest", *paths)


def fleet(g: Golden) -> None:
    from fixtures.fleet_runs import fleet as make_fleet
    from fixtures.fleet_runs import set_fact, slow, write
    plant = {3: lambda d: slow(d, 0.75, ("hbm",)), 6: lambda d: set_fact(d, "driver.version", "550.54.15")}
    nodes = g.inputs / "fleet-nodes"
    shutil.rmtree(nodes, ignore_errors=True)
    write(make_fleet("h100-doctor-bench", 10, seed=21, plant=plant), nodes)
    saved, page = g.inputs / "fleet.json", g.out / "fleet.html"
    g.cmd("fleet.txt", ["fleet", "report", str(nodes), "--no-color", "--fail-on", "never", "-o", str(saved),
                        "--html", str(page)])
    g.cmd("fleet.json", ["fleet", "report", str(nodes), "--json", "--fail-on", "never"])
    g.cmd("fleet-saved.txt", ["fleet", "report", str(saved), "--no-color", "--fail-on", "never"])
    g.report("fleet", saved)


def render(out: Path) -> int:
    out = out.resolve()
    _setup()
    if out.exists():
        shutil.rmtree(out)
    g = Golden(out)
    for run in sorted((FIXTURES / "runs").glob("*.json")):
        g.report(run.stem, run)
    doctors = doctor(g)
    g.diff("doctor-h100-vs-h200x2", FIXTURES / "runs" / "h100-doctor.json", FIXTURES / "runs" / "h200x2-doctor.json")
    g.diff("bundle-h100-idle-vs-busy", doctors["h100-idle"], doctors["h100-busy"])
    g.diff("bench-h100-vs-h200x2", FIXTURES / "runs" / "h100-bench-full.json",
           FIXTURES / "runs" / "h200x2-bench-full.json")
    profiles = profile(g)
    for stem, run in profiles.items():
        fixed = profiles.get(f"{stem}-fixed")
        if fixed is not None:
            g.diff(f"profile-{stem}", run, fixed)
    estimate(g)
    loadtest(g)
    fleet(g)
    _mask_all(out)
    n = sum(1 for p in out.rglob("*") if p.is_file())
    print(f"{n} files in {out}")
    return n


def _masks(out: Path) -> list[tuple[re.Pattern[str], str]]:
    from perfstack import __version__
    return [
        (re.compile(re.escape(str(out))), "<out>"),
        (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?"), "<time>"),
        (re.compile(r'("elapsed_s":\s*)[0-9.eE+-]+'), r"\1<elapsed>"),
        (re.compile(r"(elapsed_s[^0-9]{1,20}?)[0-9][0-9.]*"), r"\1<elapsed>"),
        (re.compile(r"\b" + re.escape(__version__) + r"\b"), "<version>"),
        (re.compile(r"\b" + re.escape(platform.python_version()) + r"\b"), "<python>"),
    ]


def _mask_all(out: Path) -> None:
    masks = _masks(out)
    for p in out.rglob("*"):
        if p.is_file():
            text = p.read_text(encoding="utf-8")
            for pat, repl in masks:
                text = pat.sub(repl, text)
            p.write_text(text, encoding="utf-8")


def compare(new: Path, old: Path, excerpt: int = 20) -> int:
    """Print each file that differs between ``old`` and ``new``; the number of them."""
    files = lambda d: {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()}  # noqa: E731
    a, b = files(old), files(new)
    differ = 0
    for name in sorted(a | b):
        if name not in b or name not in a:
            print(f"only in {'the old' if name in a else 'the new'} folder: {name}")
            differ += 1
            continue
        x, y = (old / name).read_text(encoding="utf-8"), (new / name).read_text(encoding="utf-8")
        if x != y:
            differ += 1
            lines = list(difflib.unified_diff(x.splitlines(), y.splitlines(), f"old/{name}", f"new/{name}", lineterm="", n=1))
            print(f"differs: {name}")
            cut = [ln if len(ln) <= 240 else ln[:240] + " ..." for ln in lines[:excerpt]]  # HTML is long lines
            print("\n".join(cut) + ("\n..." if len(lines) > excerpt else ""))
    print(f"{len(a)} files before, {len(b)} after, {differ} differ")
    return differ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, help="the folder to render into (replaced)")
    ap.add_argument("--compare", type=Path, metavar="DIR", help="a folder rendered before: print what differs")
    args = ap.parse_args(argv)
    old = args.compare.resolve() if args.compare else None
    out = args.out.resolve()
    render(out)
    return 1 if old is not None and compare(out, old) else 0


if __name__ == "__main__":
    raise SystemExit(main())
