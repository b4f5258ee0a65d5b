"""perfstack loadtest beside NVIDIA AIPerf: the same server, prompts, lengths and concurrency, alternating.

    python benchmarks/loadtest_vs_aiperf.py URL --model NAME --tokenizer DIR [--aiperf PATH] [--concurrency 4]
        [--requests 40] [--isl 64] [--osl 32] [--rounds 3]

Both read the same prompt file (numbered texts of --isl tokens made with the tokenizer) and ask for --osl
tokens. Rounds alternate (AIPerf, perfstack, AIPerf, ...) so that drift in the server hits both; the
table shows the median over rounds of each tool's figure and the ratio perfstack / AIPerf.

Names differ: AIPerf's "inter_token_latency" is per request (e2e - TTFT) / (tokens - 1), which vLLM and
perfstack call TPOT; AIPerf's "inter_chunk_latency" is the pooled gap between chunks, perfstack's ITL.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def prompts(path: Path, tokenizer: str, n: int, isl: int, seed: int = 0) -> None:
    from perfstack.loadtest import workload

    tok = workload.load_tokenizer(tokenizer)
    wl = workload.synthetic(isl, 1, seed=seed, tokenizer=tok)
    it = wl.cycle()
    with path.open("w") as f:
        for _ in range(n):
            f.write(json.dumps({"text": next(it).text}) + "\n")


def aiperf(exe: str, a: argparse.Namespace, data: Path, out: Path) -> dict:
    cmd = [exe, "profile", "--model", a.model, "--url", a.url, "--endpoint-type", "chat", "--streaming",
           "--concurrency", str(a.concurrency), "--request-count", str(a.requests),
           "--warmup-request-count", str(a.concurrency), "--input-file", str(data), "--custom-dataset-type",
           "single_turn", "--osl", str(a.osl), "--osl-stddev", "0", "--tokenizer", a.tokenizer,
           "--artifact-dir", str(out), "--ui", "none", "--random-seed", "0"]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        sys.exit(f"aiperf failed ({p.returncode}): {p.stderr[-2000:]}")
    d = json.loads((out / "profile_export_aiperf.json").read_text())
    return {"ttft_p50": d["time_to_first_token"]["p50"], "tpot_p50": d["inter_token_latency"]["p50"],
            "itl_p50": d["inter_chunk_latency"]["p50"], "e2e_p50": d["request_latency"]["p50"],
            "out_tok_s": d["output_token_throughput"]["avg"], "req_s": d["request_throughput"]["avg"]}


def perfstack(a: argparse.Namespace, data: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "perfstack", "-q", "loadtest", a.url, "--model", a.model, "--prompts", str(data),
           "--output-len", str(a.osl), "--concurrency", str(a.concurrency), "--requests", str(a.requests),
           "--warmup", str(a.concurrency), "--tokenizer", a.tokenizer, "-o", str(out), "--json"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    s = json.loads(out.read_text())["loadtest"]["levels"][0]["summary"]
    return {"ttft_p50": s["ttft"]["median"], "tpot_p50": s["tpot"]["median"], "itl_p50": s["itl"]["median"],
            "e2e_p50": s["e2e"]["median"], "out_tok_s": s["output_throughput"], "req_s": s["request_throughput"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--aiperf", default="aiperf")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--isl", type=int, default=64)
    ap.add_argument("--osl", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    data = work / "prompts.jsonl"
    prompts(data, a.tokenizer, a.requests + a.concurrency, a.isl)
    runs: dict[str, list[dict]] = {"aiperf": [], "perfstack": []}
    for r in range(a.rounds):
        runs["aiperf"].append(aiperf(a.aiperf, a, data, work / f"aiperf{r}"))
        runs["perfstack"].append(perfstack(a, data, work / f"perfstack{r}.json"))
        print(f"round {r + 1}: aiperf {runs['aiperf'][-1]}\n         perfstack {runs['perfstack'][-1]}", flush=True)
    names = {"ttft_p50": "median TTFT (ms)", "tpot_p50": "median TPOT (ms; AIPerf: ITL)",
             "itl_p50": "median ITL (ms; AIPerf: inter-chunk)", "e2e_p50": "median E2E (ms)",
             "out_tok_s": "output tokens/s", "req_s": "requests/s"}
    print(f"\n{a.concurrency} streams, {a.requests} requests of {a.isl} -> {a.osl} tokens, median of {a.rounds} "
          "alternating rounds")
    print(f"| figure | AIPerf | perfstack | perfstack / AIPerf |\n|---|---|---|---|")
    for k, label in names.items():
        x = statistics.median(r[k] for r in runs["aiperf"])
        y = statistics.median(r[k] for r in runs["perfstack"])
        print(f"| {label} | {x:.2f} | {y:.2f} | {y / x:.3f} |")


if __name__ == "__main__":
    main()
