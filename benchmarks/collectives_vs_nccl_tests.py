"""perfstack's collectives side by side with nccl-tests, size by size.

Reads the logs nccl-tests' ``*_perf`` binaries wrote (one file per binary, named after it), runs
perfstack's collectives over the same sizes with ``--world`` ranks (CUDA graph replay, and eager
batches unless ``--modes graph``), and prints one Markdown table per collective: the out-of-place
time per call and bus bandwidth of nccl-tests, perfstack's, and their ratio (nccl-tests' time over
perfstack's: 1.0 means the same figure; the bar is 0.95). With one rank the bus bandwidth is 0 for
most collectives and the time per call is what is compared.

    python benchmarks/collectives_vs_nccl_tests.py --world 1 --logs DIR [--out table.md]

``collectives_vs_nccl_tests.sh`` builds nccl-tests, writes the logs and calls this.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from perfstack.bench import collectives, nccl_tests, timing
from perfstack.bench._gpu import size_label

BAR = 0.95


def perfstack_rows(world: int, sizes: tuple[int, ...], graph: bool, budget_s: float,
                   backend: str) -> dict[tuple[str, int], dict]:
    results, why = collectives.launch(world, collectives.OPS, sizes, budget_s, backend, deadline_s=540, graph=graph)
    if results is None:
        sys.exit(f"perfstack collectives failed: {why}")
    out = {}
    for row in results["rows"]:
        if row.get("skipped"):
            continue
        med = timing.summarize(row["samples"])["median"]
        out[(row["op"], row["requested_bytes"])] = {
            "time_us": med * 1e6, "busbw": collectives.busbw_gbps(row["op"], world, row["bytes"], med),
            "mode": row.get("mode"), "ops": row.get("ops_per_batch"), "wrong": row.get("wrong_ranks"),
            "why_eager": row.get("why_eager", "")}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, required=True, help="ranks (GPUs) perfstack uses; nccl-tests' -g")
    ap.add_argument("--logs", type=Path, required=True, help="directory of <binary>.log files from nccl-tests")
    ap.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M,4M,16M,64M,256M,1G")
    ap.add_argument("--modes", default="graph,eager", help="perfstack timing modes to run (graph, eager)")
    ap.add_argument("--budget", type=float, default=0.15, help="seconds of timed batches per size")
    ap.add_argument("--backend", default="nccl", help="nccl; gloo runs the script's plumbing on CPUs")
    ap.add_argument("--out", type=Path, help="also write the tables (Markdown) and raw figures (.json) here")
    args = ap.parse_args()

    sizes = collectives.parse_sizes(args.sizes)
    ref: dict[tuple[str, int], nccl_tests.Row] = {}
    for binary, op in nccl_tests.OPS.items():
        log = args.logs / f"{binary}.log"
        if not log.is_file():
            print(f"warning: no {log}; {op} has no nccl-tests column", file=sys.stderr)
            continue
        for r in nccl_tests.parse(log.read_text(errors="replace")):
            ref[(op, r.size)] = r

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    ours: dict[str, dict] = {}
    for mode in modes:
        t0 = time.monotonic()
        ours[mode] = perfstack_rows(args.world, sizes, mode == "graph", args.budget, args.backend)
        print(f"perfstack collectives ({mode}) took {time.monotonic() - t0:.0f} s", file=sys.stderr)

    first = modes[0]
    lines = [f"perfstack collectives vs nccl-tests, {args.world} rank(s); nccl-tests out-of-place, "
             f"perfstack {first} (ratio = nccl-tests time / perfstack time; bar {BAR})", ""]
    met = total = 0
    for op in collectives.OPS:
        head = "| size | nccl-tests µs | nccl-tests busbw | perfstack µs | perfstack busbw | ratio |"
        head += "".join(f" {m} µs |" for m in modes[1:])
        lines += [f"### {op}", "", head, "|" + "---|" * (head.count("|") - 1)]
        for size in sizes:
            nt, me = ref.get((op, _nccl_size(op, size, args.world))), ours[first].get((op, size))
            ratio = nt.time_us / me["time_us"] if nt and me and me["time_us"] > 0 else None
            if ratio is not None:
                total += 1
                met += ratio >= BAR
            cells = [size_label(size),
                     f"{nt.time_us:.2f}" if nt else "—", f"{nt.busbw:.2f}" if nt else "—",
                     f"{me['time_us']:.2f}" if me else "—", f"{me['busbw']:.2f}" if me else "—",
                     (f"{ratio:.2f}" + ("" if ratio >= BAR else " ✗")) if ratio is not None else "—"]
            for m in modes[1:]:
                other = ours[m].get((op, size))
                cells.append(f"{other['time_us']:.2f}" if other else "—")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"{met} of {total} sizes within the bar (ratio ≥ {BAR})")
    eager_notes = sorted({r["why_eager"] for m in ours.values() for r in m.values() if r.get("why_eager")})
    lines += [f"note: {n}" for n in eager_notes]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(
            {"world": args.world, "nccl_tests": {f"{k[0]}/{k[1]}": v.__dict__ for k, v in ref.items()},
             "perfstack": {m: {f"{k[0]}/{k[1]}": v for k, v in rows.items()} for m, rows in ours.items()}},
            indent=1))
    return 0


def _nccl_size(op: str, size: int, world: int) -> int:
    """The size nccl-tests prints for a requested size: its element count is rounded down to whole
    chunks of ``world`` ranks, as perfstack's is."""
    return collectives.count_for(size, world) * collectives.ELEM


if __name__ == "__main__":
    raise SystemExit(main())
