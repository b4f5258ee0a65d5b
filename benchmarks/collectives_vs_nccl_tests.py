"""perfstack's collectives side by side with nccl-tests, size by size, like with like.

Reads the logs nccl-tests' ``*_perf`` binaries wrote, ``<binary>.log`` (calls launched one by one,
nccl-tests' default) and ``<binary>.graph.log`` (``-G``: the calls captured in a CUDA graph and
replayed), runs perfstack's collectives over the same sizes with ``--world`` ranks, replayed from a
CUDA graph and issued eagerly, and prints one Markdown table per collective:

- graph against graph and eager against eager, as the ratio nccl-tests' time / perfstack's time
  (1.0: the same figure; the bar is 0.95; above 1/0.95 perfstack is faster, marked ▲, a sign the
  two did not time the same work);
- in-place ops (all_reduce, broadcast: torch's calls write over their input) against nccl-tests'
  in-place column, the others against its out-of-place column. With one rank an in-place op moves
  no data (NCCL returns at once): its times are printed, neither judged nor turned into bandwidth;
- each size judged on one pair: eager against eager where perfstack's eager calls are not
  host-bound (the calls queue faster than the GPU runs them, so both eager figures are the GPU's
  time), graph against graph elsewhere (at small sizes an eager figure is the issuing host's rate:
  Python's torch.distributed issues a call in 20-45 µs, nccl-tests' C loop in about 6 µs);
- nccl-tests run for several cycles (``-N``): each cycle's time is its average over ``-n`` calls,
  the figure is the median over cycles; perfstack's is the median over its batches. A size outside
  the bar is listed with both spreads;
- a copy check: one device-to-device ``copy_`` (a stream memcpy, what NCCL issues for a one-rank
  out-of-place call) timed from the stream and replayed from a CUDA graph, to tell a graph
  replay's own cost for large copies from NCCL's.

    python benchmarks/collectives_vs_nccl_tests.py --world 1 --logs DIR [--also-torch] [--out table.md]

``collectives_vs_nccl_tests.sh`` builds nccl-tests, writes the logs and calls this.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from perfstack.bench import batched, collectives, nccl_tests, timing
from perfstack.bench._gpu import size_label

BAR = 0.95
MODES = ("graph", "eager")
LOG_SUFFIX = {"eager": ".log", "graph": ".graph.log"}


def perfstack_rows(world: int, sizes: tuple[int, ...], graph: bool, budget_s: float,
                   backend: str, via: str = "nccl") -> tuple[dict[tuple[str, int], dict], dict]:
    job = collectives.Job(world=world, ops=collectives.OPS, sizes=sizes, budget_s=budget_s, backend=backend,
                          graph=graph, via=via)
    results, why = collectives.launch(job, deadline_s=540)
    if results is None:
        sys.exit(f"perfstack collectives failed: {why}")
    out = {}
    for row in results["rows"]:
        if row.get("skipped"):
            continue
        st = timing.summarize(row["samples"])
        med, issue = st["median"], row.get("issue_s_per_op")
        out[(row["op"], row["requested_bytes"])] = {
            "time_us": med * 1e6, "p10_us": st["p10"] * 1e6, "p90_us": st["p90"] * 1e6, "batches": st["n"],
            "busbw": collectives.busbw_gbps(row["op"], world, row["bytes"], med),
            "mode": row.get("mode"), "ops": row.get("ops_per_batch"), "wrong": row.get("wrong_ranks"),
            "issue_us": issue * 1e6 if issue is not None else None,
            "host_bound": batched.host_bound(issue, med), "why_eager": row.get("why_eager", "")}
    return out, results.get("meta", {})


def read_logs(logs: Path) -> tuple[dict[str, dict[tuple[str, int], nccl_tests.Sized]], dict[str, str]]:
    """{mode: {(op, size): figures}} from the logs found, and each mode's settings line."""
    ref: dict[str, dict[tuple[str, int], nccl_tests.Sized]] = {m: {} for m in MODES}
    settings: dict[str, str] = {}
    for mode in MODES:
        for binary, op in nccl_tests.OPS.items():
            log = logs / f"{binary}{LOG_SUFFIX[mode]}"
            if not log.is_file():
                print(f"warning: no {log}; {op} has no nccl-tests {mode} column", file=sys.stderr)
                continue
            text = log.read_text(errors="replace")
            settings.setdefault(mode, _settings(text))
            for size, fig in nccl_tests.by_size(nccl_tests.parse(text)).items():
                ref[mode][(op, size)] = fig
    return ref, settings


def nccl_release(code: str) -> str:
    """nccl-tests prints NCCL's version code: 22803 is 2.28.3 (major*10000 + minor*100 + patch since 2.9)."""
    n = int(code)
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}" if n >= 20900 else f"{n // 1000}.{n // 100 % 10}.{n % 100}"


def _settings(text: str) -> str:
    """nccl-tests' version and iteration settings from a log's header, for the table's caption."""
    ver = re.search(r"nccl-tests version (\S+).*?nccl-library=(\d+)", text)
    its = re.search(r"warmup iters: (\d+) iters: (\d+).*?graph: (\d+)", text)
    parts = []
    if ver:
        parts.append(f"nccl-tests {ver.group(1)}, NCCL {ver.group(2)}")
    if its:
        parts.append(f"-w {its.group(1)} -n {its.group(2)}" + (f" -G {its.group(3)}" if its.group(3) != "0" else ""))
    # "#  Rank  0 Group  0 Pid   1234 on host device  0 [...]": one process per GPU or one for all
    pids = set(re.findall(r"#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+(\d+)", text))
    if pids:
        parts.append("one process" if len(pids) == 1 else f"{len(pids)} processes")
    return ", ".join(parts)


def copy_check(sizes: tuple[int, ...], budget_s: float) -> list[dict[str, Any]]:
    """One ``dst.copy_(src)`` per size, timed from the stream and replayed from a CUDA graph, in
    batches of the length the collectives use and of 20 (nccl-tests' -n); µs per copy (median)."""
    import torch

    if not torch.cuda.is_available():
        return []
    timer = timing.CudaTimer(torch)
    out = []
    for size in sizes:
        fn = _copier(torch, size)
        for _ in range(3):
            timer.call(fn)
        est = timing.summarize(batched.per_op(timer.samples(batched.Batch(None, fn, 4, False), 3, None), 4))["median"]
        row: dict[str, Any] = {"size": size}
        for ops in dict.fromkeys((batched.ops_per_batch(est), 20)):
            reps = timing.plan_reps(est * ops, budget_s, 10, 200)
            for mode in MODES:
                b = batched.Batch(torch if mode == "graph" else None, fn, ops, graph=mode == "graph")
                timer.call(b)
                t = timing.summarize(batched.per_op(timer.samples(b, reps, None), ops))["median"]
                row[f"{mode}_{ops}"] = t * 1e6
                del b
        out.append(row)
        del fn
        torch.cuda.empty_cache()
    return out


def _copier(torch: Any, size: int) -> Any:
    src = torch.empty(size // 4, device="cuda").uniform_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def _ratio(nt: float | None, me: float | None) -> float | None:
    return nt / me if nt is not None and me is not None and me > 0 else None


def _mark(r: float | None) -> str:
    if r is None:
        return "—"
    return f"{r:.2f}" + (" ✗" if r < BAR else " ▲" if r > 1 / BAR else "")


def judged_on(op: str, world: int, eager: dict | None, nt_eager: Any) -> str:
    """Which pair a size is judged on: 'none' (one rank, in place), 'eager' where perfstack's eager
    calls are not host-bound and nccl-tests has an eager figure, else 'graph'."""
    if not collectives.moves_data(op, world):
        return "none"
    if eager is not None and nt_eager is not None and not eager["host_bound"]:
        return "eager"
    return "graph"


def build(world: int, sizes: tuple[int, ...], ref: dict, ours: dict, settings: dict[str, str],
          meta: dict, copies: list[dict[str, Any]], via_torch: dict | None = None) -> tuple[str, dict[str, Any]]:
    how = ("NCCL called directly on a communicator of its own" if meta.get("via") == "nccl" else
           "through torch.distributed" + (f" ({meta['via_why_not_nccl']})" if meta.get("via_why_not_nccl") else ""))
    lines = [f"perfstack collectives vs nccl-tests, {world} rank(s)", "",
             f"- nccl-tests eager: {settings.get('eager', 'no logs')}; graph: {settings.get('graph', 'no logs')}",
             (f"- perfstack: torch {meta.get('torch', '?')}, NCCL {meta.get('nccl_version', '?')}, {how}, one process "
              "per GPU; median over batches of back-to-back calls between two CUDA events"),
             ("- µs per call; ratio = nccl-tests time / perfstack time (bar 0.95: ✗ below it; ▲ perfstack more than "
             "5% faster); in-place ops (all_reduce, broadcast) against nccl-tests' in-place column, the others "
             "against its out-of-place column; nccl-tests figures are medians over its cycles"),
             ("- graph replays on both sides with NCCL_GRAPH_MIXING_SUPPORT=0 (what perfstack's graph-replaying workers "
              "set; collectives_vs_nccl_tests.sh passes it to nccl-tests' -G runs)"),
             ("- judged on: eager vs eager where perfstack's eager calls are not host-bound, graph vs graph elsewhere; "
             "'host' marks a perfstack eager figure set by Python issuing the calls, not by NCCL")]
    theirs = {nccl_release(m.group(1)) for m in re.finditer(r"NCCL (\d+)", " ".join(settings.values()))}
    ours_nccl = str(meta.get("nccl_version", "?"))
    if theirs and theirs != {ours_nccl}:
        lines.append(f"- **not like with like**: nccl-tests ran on NCCL {', '.join(sorted(theirs))}, perfstack (PyTorch) "
                     f"on NCCL {ours_nccl}; small-message latency differs between NCCL releases")
    lines.append("")
    counts = {"judged": [0, 0], "graph": [0, 0], "eager": [0, 0], "either": [0, 0], "none": 0, "faster": 0}
    outside: list[str] = []
    for op in collectives.OPS:
        col = "in-place" if collectives.in_place(op) else "out-of-place"
        lines += [f"### {op} (nccl-tests {col})", "",
                  ("| size | nccl-tests graph | perfstack graph | ratio | nccl-tests eager | perfstack eager | ratio "
                  "| judged on | busbw GB/s nccl-tests / perfstack |" + (" torch.distributed graph |" if via_torch else "")),
                  "|---|---|---|---|---|---|---|---|---|" + ("---|" if via_torch else "")]
        for size in sizes:
            key, nkey = (op, size), (op, _nccl_size(size, world))
            nt = {m: ref[m].get(nkey) for m in MODES}
            me = {m: ours.get(m, {}).get(key) for m in MODES}
            nt_t = {m: (None if nt[m] is None else nt[m].time_us_in_place if collectives.in_place(op) else nt[m].time_us)
                    for m in MODES}
            r = {m: _ratio(nt_t[m], me[m]["time_us"] if me[m] else None) for m in MODES}
            on = judged_on(op, world, me["eager"], nt_t["eager"])
            if on == "none":
                counts["none"] += 1
            else:
                for m in MODES:
                    if r[m] is not None and (m == "graph" or not me[m]["host_bound"]):
                        counts[m][1] += 1
                        counts[m][0] += r[m] >= BAR
                        if r[m] < BAR:
                            outside.append(_why(op, size, m, nt[m], nt_t[m], me[m], col))
                if any(x is not None for x in r.values()):
                    counts["either"][1] += 1
                    counts["either"][0] += any(x is not None and x >= BAR for x in r.values())
                if r[on] is not None:
                    counts["judged"][1] += 1
                    counts["judged"][0] += r[on] >= BAR
                    counts["faster"] += r[on] > 1 / BAR
            cells = [size_label(size)]
            for m in MODES:
                cells.append(f"{nt_t[m]:.2f}" if nt_t[m] is not None else "—")
                mine = "—" if me[m] is None else f"{me[m]['time_us']:.2f}" + (" host" if me[m]["host_bound"] else "")
                cells += [mine, _mark(r[m]) if on != "none" else "—"]
            cells += [{"none": "not judged", "eager": "**eager**", "graph": "**graph**"}[on], _busbw(op, world, on, nt, me)]
            if via_torch is not None:
                t = via_torch.get(key)
                cells.append(f"{t['time_us']:.2f}" if t else "—")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    j, g, e = counts["judged"], counts["graph"], counts["eager"]
    lines += [f"**{j[0]} of {j[1]} sizes within the bar** on the pair each is judged on"
              + (f" ({counts['faster']} of them with perfstack more than 5% faster)" if counts["faster"] else ""),
              f"- graph vs graph, every size that moves data: {g[0]} of {g[1]}",
              f"- eager vs eager, sizes where perfstack's eager calls are not host-bound: {e[0]} of {e[1]}",
              f"- graph vs graph or eager vs eager (either): {counts['either'][0]} of {counts['either'][1]}"]
    if counts["none"]:
        lines.append(f"- {counts['none']} sizes not judged: with one rank all_reduce and broadcast are in place "
                     "and NCCL moves no data; both tools then time the call's overhead (eager: the host's; "
                     "graph: an empty replay), and no bandwidth is printed")
    if via_torch is not None:
        lines.append("- torch.distributed graph: the same calls made through torch.distributed (`--via torch`), "
                     "replayed from a CUDA graph: what the process group adds per call")
    if outside:
        lines += ["", "Outside the bar, with each tool's spread:", ""] + [f"- {w}" for w in outside]
    if copies:
        lines += ["", "### copy check: one device-to-device copy_ from the stream and from a CUDA graph", "",
                  "| size | calls per batch | stream µs | graph replay µs | graph / stream |", "|---|---|---|---|---|"]
        for c in copies:
            for k in sorted({int(x.split("_")[1]) for x in c if x.startswith("eager_")}):
                s, gr = c[f"eager_{k}"], c[f"graph_{k}"]
                lines.append(f"| {size_label(c['size'])} | {k} | {s:.2f} | {gr:.2f} | {gr / s:.2f} |")
        lines += ["", ("With one rank NCCL turns an out-of-place all_gather, reduce_scatter or all_to_all into one "
                  "stream memcpy; where graph / stream is above 1.05 here, a graph replay of those collectives is "
                  "slower for the driver's reason, not NCCL's: such sizes are judged on eager vs eager, where perfstack's eager "
                  "calls are not host-bound.")]
    notes = sorted({r["why_eager"] for m in ours.values() for r in m.values() if r.get("why_eager")})
    lines += [f"note: {n}" for n in notes]
    raw = {"world": world, "counts": counts, "copy_check": copies, "perfstack_meta": meta,
           "perfstack_via_torch_graph": {f"{k[0]}/{k[1]}": v for k, v in (via_torch or {}).items()},
           "nccl_tests": {m: {f"{k[0]}/{k[1]}": v.__dict__ for k, v in rows.items()} for m, rows in ref.items()},
           "perfstack": {m: {f"{k[0]}/{k[1]}": v for k, v in rows.items()} for m, rows in ours.items()}}
    return "\n".join(lines), raw


def _busbw(op: str, world: int, on: str, nt: dict, me: dict) -> str:
    if on == "none":
        return "— (no data moves)"
    if collectives.busbw_factor(op, world) == 0:
        return "— (one rank: no bus traffic)"
    a, b = nt.get(on), me.get(on)
    if not (a and b):
        return "—"
    return f"{a.busbw_in_place if collectives.in_place(op) else a.busbw:.1f} / {b['busbw']:.1f}"


def _why(op: str, size: int, mode: str, nt: Any, nt_t: float, me: dict, col: str) -> str:
    lo, hi = nt.time_us_in_place_range if col == "in-place" else nt.time_us_range
    return (f"{op} {size_label(size)} {mode}: nccl-tests {nt_t:.2f} µs (cycles {lo:.2f}–{hi:.2f}, {nt.cycles} cycles), "
            f"perfstack {me['time_us']:.2f} µs (p10–p90 {me['p10_us']:.2f}–{me['p90_us']:.2f}, "
            f"{me['batches']} batches of {me['ops']} calls)")


def _nccl_size(size: int, world: int) -> int:
    """The size nccl-tests prints for a requested size: its element count is rounded down to whole
    chunks of ``world`` ranks, as perfstack's is."""
    return collectives.count_for(size, world) * collectives.ELEM


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, required=True, help="ranks (GPUs) perfstack uses; nccl-tests' -g")
    ap.add_argument("--logs", type=Path, required=True,
                    help="directory of <binary>.log (eager) and <binary>.graph.log (-G) files from nccl-tests")
    ap.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M,4M,16M,64M,256M,1G")
    ap.add_argument("--budget", type=float, default=0.15, help="seconds of timed batches per size")
    ap.add_argument("--copy-check", default="16M,64M,256M,1G",
                    help="sizes of the stream vs graph copy check ('' to skip)")
    ap.add_argument("--backend", default="nccl", help="nccl; gloo runs the script's plumbing on CPUs")
    ap.add_argument("--via", choices=("nccl", "torch"), default="nccl",
                    help="how perfstack issues the calls: NCCL directly (default) or through torch.distributed")
    ap.add_argument("--also-torch", action="store_true",
                    help="add a column of the calls made through torch.distributed, graph-replayed")
    ap.add_argument("--out", type=Path, help="also write the tables (Markdown) and raw figures (.json) here")
    args = ap.parse_args()

    sizes = collectives.parse_sizes(args.sizes)
    ref, settings = read_logs(args.logs)
    ours: dict[str, dict] = {}
    meta: dict = {}
    for mode in MODES:
        if args.backend != "nccl" and mode == "graph":
            continue
        t0 = time.monotonic()
        ours[mode], meta = perfstack_rows(args.world, sizes, mode == "graph", args.budget, args.backend, args.via)
        print(f"perfstack collectives ({mode}) took {time.monotonic() - t0:.0f} s", file=sys.stderr)
    via_torch = None
    if args.also_torch and args.backend == "nccl":
        via_torch, _ = perfstack_rows(args.world, sizes, True, args.budget, args.backend, "torch")
    copies = []
    if args.copy_check and args.backend == "nccl":
        copies = copy_check(collectives.parse_sizes(args.copy_check), args.budget)
    text, raw = build(args.world, sizes, ref, ours, settings, meta, copies, via_torch)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
