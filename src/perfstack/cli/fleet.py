"""perfstack fleet: the doctor or the benchmarks on every node of a Ray cluster, or the analysis of
Runs and bundles gathered any other way; which nodes, GPUs and settings stand out, and why."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from rich.console import Console

from perfstack import outfile
from perfstack.cli import output
from perfstack.audit import FAIL_ON
from perfstack.bench import SUITES
from perfstack.errors import PerfstackError, UsageError
from perfstack.fleet.analysis import analyze
from perfstack.records.fleet import FleetAnalysis
from perfstack.fleet.output import fleet_run
from perfstack.model import Run, Severity
from perfstack.records.meta import FanOut, TaskCost

DEFAULT_TIMEOUT = {"doctor": 300.0, "bench": 1800.0}


def _ids(values: list[str] | None) -> tuple[str, ...]:
    return tuple(v.strip() for item in values or [] for v in item.split(",") if v.strip())


def _outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the fleet Run as one JSON document")
    p.add_argument("-o", "--output", metavar="FILE", help="also save the fleet Run (the analysis) as JSON")
    p.add_argument("--html", metavar="FILE", help="also write the HTML report (heat map, drift table)")
    p.add_argument("--fail-on", choices=FAIL_ON, default="critical",
                   help="exit 1 when a node is flagged at or above this severity (default: critical)")


def _ray_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--address", default="auto", help="the Ray cluster (default: auto, the one this machine is in)")
    p.add_argument("--timeout", type=float, metavar="S",
                   help=f"seconds to wait for each node's result (default {DEFAULT_TIMEOUT[what]:g})")
    p.add_argument("--no-ship", action="store_true",
                   help="use the perfstack installed on each node (default, when perfstack runs from a checkout: "
                        "ship a wheel of it to the nodes in Ray's runtime environment)")
    p.add_argument("--save-runs", metavar="DIR", help="save every node's Run in DIR ('perfstack fleet report DIR' "
                                                      "reads them back)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("fleet", parents=[common], help="doctor/bench on every node (Ray) or over gathered Runs; "
                                                       "drift and outliers",
                       description="Run the doctor or the benchmarks on every node of a Ray cluster, or read Runs "
                                   "and bundles gathered by any scheduler, and say which nodes, GPUs and settings "
                                   "stand out from the rest of their SKU.")
    fs = p.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND")
    d = fs.add_parser("doctor", parents=[common], help="audit every node of the Ray cluster, in parallel")
    _ray_args(d, "doctor")
    d.add_argument("--select", action="append", metavar="IDS", help="only these check ids or layers")
    d.add_argument("--ignore", action="append", metavar="IDS", help="skip these check ids or layers")
    _outputs(d)
    d.set_defaults(func=run_doctor)
    b = fs.add_parser("bench", parents=[common], help="benchmark every GPU of every node of the Ray cluster, then "
                                                       "the all-reduce between its machines")
    b.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: the suite)")
    b.add_argument("--suite", choices=SUITES, default="quick", help="quick (default) or full")
    _ray_args(b, "bench")
    b.add_argument("--no-allreduce", action="store_true",
                   help="skip the all-reduce between machines (run by default when the cluster has 2 or more "
                        "machines: the fleet's bus bandwidth, node pairs, a bisection to the slow node)")
    b.add_argument("--allreduce-timeout", type=float, default=60.0, metavar="S",
                   help="seconds each machine gets to join an all-reduce's rendezvous (default 60)")
    _outputs(b)
    b.set_defaults(func=run_bench)
    r = fs.add_parser("report", parents=[common], help="analyse a directory of Runs or bundles gathered any way")
    r.add_argument("paths", nargs="+", metavar="RUNS_DIR", help="directories of node Runs (*.json) or bundles, or files")
    _outputs(r)
    r.set_defaults(func=run_report)
    p.set_defaults(func=lambda args, out, err: _usage(p))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _check(args: argparse.Namespace) -> None:
    outfile.check_all(args.output, args.html)  # before the work: a typo costs a second, not a fleet's audit
    if getattr(args, "timeout", None) is not None and not args.timeout > 0:
        raise UsageError(f"--timeout {args.timeout:g}: give a positive number of seconds")
    if getattr(args, "allreduce_timeout", None) is not None and not args.allreduce_timeout > 0:
        raise UsageError(f"--allreduce-timeout {args.allreduce_timeout:g}: give a positive number of seconds")


def _emit(result: Run, analysis: FleetAnalysis, args: argparse.Namespace, out: Console, err: Console) -> int:
    """The fleet Run out as every command's Run goes (output.emit_run), with the fleet's own views; the
    exit code by the worst flagged node."""
    from perfstack.report.fleet_html import render_fleet_html
    from perfstack.report.fleet_text import render_fleet
    from perfstack.report.fleet_view import fleet_view
    view = fleet_view(analysis, result.meta)
    output.emit_run(result, args, out, err, lambda: render_fleet(view, out, verbose=args.verbose > 0),
                    html=lambda: render_fleet_html(view))
    worst = analysis.worst()
    if args.fail_on == "never" or worst is None:
        return 0
    return 1 if Severity(worst).rank >= Severity(args.fail_on).rank else 0


def run_report(args: argparse.Namespace, out: Console, err: Console) -> int:
    from perfstack.fleet.gather import entries, gather
    _check(args)
    t0 = time.perf_counter()
    saved = _saved_fleet_run(args.paths)
    if saved is not None:  # re-render a saved fleet Run, as 'perfstack report' does for the others
        from perfstack.fleet.output import analysis_of
        return _emit(saved, analysis_of(saved, args.paths[0]), args, out, err)
    paths = entries(args.paths)
    show = err.is_terminal and not args.quiet
    with err.status(f"reading {len(paths)} Runs and bundles…") if show else _null():
        nodes = gather(paths)
    analysis = analyze(nodes)
    _saved_allreduce(paths, analysis, err)
    source = "Runs in " + ", ".join(str(p) for p in args.paths)
    return _emit(fleet_run(analysis, "report", source, time.perf_counter() - t0), analysis, args, out, err)


def _saved_fleet_run(paths: list[str]) -> Run | None:
    """The fleet Run when the one path given is a file holding one, else None."""
    if len(paths) != 1 or not Path(paths[0]).is_file():
        return None
    run = output.load_run(paths[0])
    return run if run.meta.command == "fleet" else None


SAVED_FLEET_RUN = "fleet.json"  # what --save-runs writes beside the node Runs: the all-reduce lives only there


def _saved_allreduce(paths: list[Path], analysis: FleetAnalysis, err: Console) -> None:
    """The all-reduce between machines of a saved fleet Run among the files (``fleet*.json``, as
    ``--save-runs`` writes it), into the analysis: it is measured across machines, so no node's Run
    holds it. The newest such Run when there are several; one that cannot be read is a warning."""
    from perfstack.fleet import allreduce
    found = []
    for p in paths:
        if not (p.is_file() and p.name.startswith("fleet") and p.suffix == ".json"):
            continue
        try:
            run = output.load_run(str(p))
            saved = run.fleet.comms if run.fleet is not None and run.meta.command == "fleet" else None
            if saved is not None:
                found.append((run.meta.created or "", p, saved))
        except PerfstackError as e:
            err.print(f"warning: {p}: the all-reduce record was not read: {e.message}", markup=False)
    if found:
        created, p, comms = max(found, key=lambda x: x[0])
        allreduce.attach(analysis, comms)
        analysis.notes.append(f"the all-reduce between machines is the one recorded in {p.name}")


def _null() -> AbstractContextManager[None]:
    from contextlib import nullcontext
    return nullcontext()


def _fan(args: argparse.Namespace, out: Console, err: Console, what: str) -> int:
    from perfstack.fleet import collect, ship
    from perfstack.fleet.jobs import DoctorJob
    from perfstack.fleet.ray_engine import NAME_ANOTHER, NodeResult, connect

    _check(args)
    if args.save_runs and Path(args.save_runs).is_file():
        raise UsageError(f"--save-runs {args.save_runs} is a file", hint="give a directory")
    t0 = time.perf_counter()
    timeout = args.timeout or DEFAULT_TIMEOUT[what]
    shipped: list[str] = []

    def env(build: Path) -> dict[str, Any] | None:
        made = ship.runtime_env(not args.no_ship, build)
        shipped.extend(Path(p).name for p in (made or {}).get("py_modules", []))
        return made

    with tempfile.TemporaryDirectory(prefix="perfstack-wheel-") as build:
        # The wheel is uploaded by ray.init, within connect: it may go once the cluster is joined.
        ray, cluster = connect(args.address, runtime_env=lambda: env(Path(build)))
    if not args.quiet:
        err.print(f"fleet {what}: Ray cluster at {cluster.address} ({cluster.found}); {NAME_ANOTHER}",
                  markup=False, highlight=False, soft_wrap=True)
        if shipped:
            err.print(f"fleet {what}: this perfstack goes to the nodes as {shipped[0]} in Ray's runtime environment "
                      "(--no-ship: use the perfstack installed on each node)", markup=False, highlight=False,
                      soft_wrap=True)

    def progress(res: NodeResult) -> None:
        if args.quiet:
            return
        where = res.node + (f" gpu{res.gpu}" if res.gpu is not None else "") + (f" ({res.part})" if res.part else "")
        if res.error:
            err.print(f"[red]✗[/red] {where}: {res.error}", markup=True, highlight=False, soft_wrap=True)
        elif args.verbose or not err.is_terminal:
            err.print(f"✓ {where} ({res.job_s or 0:.1f} s)", markup=False, highlight=False)

    with err.status(f"fleet {what} on the Ray cluster…") if err.is_terminal and not args.quiet else _null():
        if what == "doctor":
            results = collect.doctor(ray, DoctorJob(_ids(args.select), _ids(args.ignore)), timeout, progress)
        else:
            results = collect.bench(ray, args.suite, tuple(args.names), timeout, progress)
    if args.save_runs:
        written = collect.save_runs(results, args.save_runs)
        err.print(f"saved {len(written)} node Runs in {args.save_runs}", markup=False)
    analysis = analyze(collect.summaries(results))
    if what == "bench" and not args.no_allreduce:
        _allreduce(ray, analysis, args, err)
    overheads = [r.overhead_s for r in results if r.overhead_s is not None]
    fanout = FanOut(tasks=len(results), failed=sum(1 for r in results if r.error),
                    overhead_s_median=round(statistics.median(overheads), 4) if overheads else None,
                    overhead_s_max=round(max(overheads), 4) if overheads else None,
                    per_task=[TaskCost(node=r.node, gpu=r.gpu, part=r.part, machine=r.machine, job_s=r.job_s,
                                       overhead_s=r.overhead_s)
                              for r in results])
    result = fleet_run(analysis, what, f"Ray cluster at {cluster.address}", time.perf_counter() - t0,
                       {"fanout": fanout})
    if args.save_runs:  # with the node Runs, so 'fleet report DIR' shows the all-reduce as well
        outfile.write(Path(args.save_runs) / SAVED_FLEET_RUN, result.to_json() + "\n")
    return _emit(result, analysis, args, out, err)


def _allreduce(ray: object, analysis: FleetAnalysis, args: argparse.Namespace, err: Console) -> None:
    """The all-reduce between machines after the benchmarks (nothing else of the fleet runs then), into
    the analysis; a failure of the whole step is a note, never the end of the bench."""
    from perfstack.fleet import allreduce, allreduce_ray
    with err.status("all-reduce between machines…") if err.is_terminal and not args.quiet else _null():
        comms = allreduce_ray.run(ray, join_timeout_s=args.allreduce_timeout)
    if comms is None:
        analysis.notes.append("one machine: no all-reduce between machines was measured")
        return
    allreduce.attach(analysis, comms)


def run_doctor(args: argparse.Namespace, out: Console, err: Console) -> int:
    return _fan(args, out, err, "doctor")


def run_bench(args: argparse.Namespace, out: Console, err: Console) -> int:
    return _fan(args, out, err, "bench")


def report_fleet_run(run: Run, fmt: str, args: argparse.Namespace, out: Console, err: Console) -> int:
    """'perfstack report FLEET.json': the fleet's own views (text or HTML)."""
    from perfstack.fleet.output import analysis_of
    from perfstack.report.fleet_text import render_fleet
    from perfstack.report.fleet_view import fleet_view
    view = fleet_view(analysis_of(run, args.run_file), run.meta)
    if fmt == "html":
        from perfstack.report.fleet_html import render_fleet_html
        output.write_document(render_fleet_html(view), args.output, out, err, "the HTML report")
    elif fmt == "md":
        raise UsageError("a fleet Run has no Markdown view", hint="use -f text, -f html or -f json")
    elif args.output:
        text = output.text_file(lambda c: render_fleet(view, c, args.verbose > 0), 140)
        output.write_document(text, args.output, out, err, "the report")
    else:
        render_fleet(view, out, verbose=args.verbose > 0)
    return 0


def diff_fleet_runs(before: Run, after: Run, args: argparse.Namespace, fmt: str, out: Console, err: Console) -> int:
    """'perfstack diff' of two fleet Runs: nodes newly flagged or cleared, drift, outliers and findings that
    appeared or went, SKU medians that moved. With --fail-on-regression, exit 1 when a node is newly flagged."""
    import json

    from perfstack.fleet.compare import diff_fleets
    from perfstack.fleet.output import analysis_of
    from perfstack.report.fleet_diff import render_fleet_diff
    d = diff_fleets(analysis_of(before, args.before), analysis_of(after, args.after))
    if fmt == "json":
        output.write_document(json.dumps(d.to_dict(), indent=2, default=str), args.output, out, err, "the diff")
    elif fmt in ("md", "html"):
        raise UsageError(f"a fleet diff has no {fmt} view", hint="use -f text or -f json")
    elif args.output:
        text = output.text_file(lambda c: render_fleet_diff(d, args.before, args.after, c), 140)
        output.write_document(text, args.output, out, err, "the diff")
    else:
        render_fleet_diff(d, args.before, args.after, out)
    return 1 if args.fail_on_regression is not None and d.newly_flagged else 0
