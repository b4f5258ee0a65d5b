"""perfstack loadtest beside NVIDIA AIPerf and a minimal referee client: the same server, requests and load.

    python benchmarks/loadtest_vs_aiperf.py URL --model NAME --tokenizer DIR [--aiperf PATH] [--concurrency 4]
        [--requests 40] [--isl 64] [--osl 32] [--rounds 3] [--workload single|multi-turn|trace]
        [--turns 3] [--trace FILE] [--no-referee] [--no-aiperf] [--out DIR]

Workloads:

- ``single``: numbered prompts of --isl tokens (made with the tokenizer), --osl tokens asked, at --concurrency.
- ``multi-turn``: conversations of --turns turns at --concurrency; each turn resends the history. perfstack
  makes them (``--turns``); AIPerf gets the same user turns as a ``multi_turn`` file (it puts the model's
  live answers in the history, perfstack stand-ins of the asked length: the prompts grow alike).
- ``trace``: a mooncake-style JSONL trace replayed at its recorded times (``--trace`` FILE, or a synthetic one
  of --requests requests with Poisson gaps at --rate and shared blocks); AIPerf replays it with
  ``--custom-dataset-type mooncake_trace --fixed-schedule``.

The referee is a minimal client, one aiohttp event loop that stamps each chunk as it reads it and does
nothing else, fed the very requests perfstack sends (it imports perfstack's workload only to build them).
Each tool is judged by its distance from the referee, not from the other tool: a client starved of CPU
reads late, and the referee shares the host with the same starvation, so run it where the clients have
free cores (taskset), and read the ``waited for a CPU`` column perfstack reports.

Rounds alternate (AIPerf, perfstack, referee, AIPerf, ...) so that drift in the server hits all; the table
shows the median over rounds of each tool's figure and its ratio to the referee's.

Names differ: AIPerf's "inter_token_latency" is per request (e2e - TTFT) / (tokens - 1), which vLLM and
perfstack call TPOT; AIPerf's "inter_chunk_latency" is the pooled gap between chunks, perfstack's ITL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FIGURES = {"ttft_p50": "median TTFT (ms)", "tpot_p50": "median TPOT (ms; AIPerf: ITL)",
           "itl_p50": "median ITL (ms; AIPerf: inter-chunk)", "e2e_p50": "median E2E (ms)",
           "out_tok_s": "output tokens/s", "req_s": "requests/s"}


# -- the requests, built once for every tool ---------------------------------------------------
def single_prompts(path: Path, tokenizer: str, n: int, isl: int, seed: int = 0) -> None:
    from perfstack.loadtest import workload

    tok = workload.load_tokenizer(tokenizer)
    it = workload.synthetic(isl, 1, seed=seed, tokenizer=tok).cycle()
    with path.open("w") as f:
        for _ in range(n):
            f.write(json.dumps({"text": next(it).text}) + "\n")


def synthetic_trace(path: Path, n: int, rate: float, isl: int, osl: int, block: int = 512, seed: int = 0) -> None:
    """A mooncake-style trace: Poisson arrivals, prompts of about --isl tokens over shared leading blocks."""
    rng = random.Random(seed)
    t, next_id = 0.0, 1000
    with path.open("w") as f:
        for _ in range(n):
            blocks = max(1, -(-isl // block))
            shared = [rng.randrange(4)] if blocks > 1 else []  # one of four common first blocks
            ids = shared + list(range(next_id, next_id + blocks - len(shared)))
            next_id += blocks
            f.write(json.dumps({"timestamp": round(t * 1e3), "input_length": isl, "output_length": osl,
                                "hash_ids": ids}) + "\n")
            t += rng.expovariate(rate)


def conversations(a: argparse.Namespace) -> list[list[Any]]:
    """perfstack's own conversations (the Prompt of every turn), as its --turns makes them."""
    from perfstack.loadtest import workload

    tok = workload.load_tokenizer(a.tokenizer)
    n_conv = max(1, a.requests // a.turns)
    wl = workload.synthetic(a.isl, a.osl, seed=0, tokenizer=tok, turns=a.turns, conversations=n_conv)
    prompts = [wl.more(i) for i in range(n_conv * a.turns)]
    return [[prompts[t * n_conv + c] for t in range(a.turns)] for c in range(n_conv)]


# -- AIPerf -----------------------------------------------------------------------------------
HUB_NAME = "local/tokenizer"


def hub_entry(folder: Path, cache: Path) -> str:
    """A hub-cache entry for a local tokenizer folder (links to its files), and its repository id.

    AIPerf 0.13 loads tokenizers in offline mode in some of its processes (the trace's prompt builder forces it),
    and offline it looks the name up as a hub repository id, refusing a local folder; a cache entry is found
    either way."""
    snap = cache / f"models--{HUB_NAME.replace('/', '--')}" / "snapshots" / "local"
    snap.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        if f.is_file() and not (snap / f.name).exists():
            (snap / f.name).symlink_to(f.resolve())
    refs = snap.parent.parent / "refs"
    refs.mkdir(exist_ok=True)
    (refs / "main").write_text("local")
    return HUB_NAME


def aiperf(exe: str, a: argparse.Namespace, data: Path, out: Path) -> dict:
    env, tokenizer = dict(os.environ), a.tokenizer
    if Path(a.tokenizer).is_dir():
        env["HF_HUB_CACHE"] = str(out.parent / "hub")
        tokenizer = hub_entry(Path(a.tokenizer), Path(env["HF_HUB_CACHE"]))
    cmd = [exe, "profile", "--model", a.model, "--url", a.url, "--endpoint-type", "chat", "--streaming",
           "--tokenizer", tokenizer, "--artifact-dir", str(out), "--ui", "none", "--random-seed", "0",
           "--input-file", str(data),
           # the output length as `max_tokens`, which every server honours (not all read max_completion_tokens)
           "--use-legacy-max-tokens"]
    if a.workload == "trace":
        cmd += ["--custom-dataset-type", "mooncake_trace", "--fixed-schedule"]
    elif a.workload == "multi-turn":
        cmd += ["--custom-dataset-type", "multi_turn", "--concurrency", str(a.concurrency), "--conversation-num",
                str(max(1, a.requests // a.turns)), "--osl", str(a.osl), "--osl-stddev", "0"]
    else:
        cmd += ["--custom-dataset-type", "single_turn", "--concurrency", str(a.concurrency), "--request-count",
                str(a.requests), "--warmup-request-count", str(a.concurrency), "--osl", str(a.osl),
                "--osl-stddev", "0"]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode:
        raise RuntimeError(f"aiperf failed ({p.returncode}; its log: {out}/logs/aiperf.log): {p.stderr[-2000:]}")
    d = json.loads((out / "profile_export_aiperf.json").read_text())
    return {"ttft_p50": d["time_to_first_token"]["p50"], "tpot_p50": d["inter_token_latency"]["p50"],
            "itl_p50": d["inter_chunk_latency"]["p50"], "e2e_p50": d["request_latency"]["p50"],
            "out_tok_s": d["output_token_throughput"]["avg"], "req_s": d["request_throughput"]["avg"]}


# -- perfstack --------------------------------------------------------------------------------
def perfstack(a: argparse.Namespace, data: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "perfstack", "-q", "loadtest", a.url, "--model", a.model, "--tokenizer",
           a.tokenizer, "-o", str(out), "--json"]
    if a.workload == "trace":
        cmd += ["--trace", str(data)]
    elif a.workload == "multi-turn":
        cmd += ["--turns", str(a.turns), "--input-len", str(a.isl), "--output-len", str(a.osl), "--concurrency",
                str(a.concurrency), "--requests", str(max(1, a.requests // a.turns) * a.turns), "--warmup", "0"]
    else:
        cmd += ["--prompts", str(data), "--output-len", str(a.osl), "--concurrency", str(a.concurrency),
                "--requests", str(a.requests), "--warmup", str(a.concurrency)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    lv = json.loads(out.read_text())["loadtest"]["levels"][0]
    s = lv["summary"]
    got = {"ttft_p50": s["ttft"]["median"], "tpot_p50": s["tpot"]["median"], "itl_p50": s["itl"]["median"],
           "e2e_p50": s["e2e"]["median"], "out_tok_s": s["output_throughput"], "req_s": s["request_throughput"],
           "cpu_wait": (lv.get("client") or {}).get("cpu_wait_fraction")}
    if a.workload != "single":
        # like for like: AIPerf and the referee divide by first send -> last end; perfstack's own rates are over
        # the window the load was held (a trace's arrivals, the conversations in flight), kept as window_*
        reqs = [r for r in lv["requests"] if r.get("e2e_ms") is not None]
        span = max(r["start_s"] + r["e2e_ms"] / 1e3 for r in reqs) - min(r["start_s"] for r in reqs)
        got.update(window_tok_s=got["out_tok_s"], window_req_s=got["req_s"],
                   out_tok_s=sum(r.get("output_tokens") or 0 for r in reqs) / span, req_s=len(reqs) / span)
    return got


# -- the referee: one loop, a stamp per chunk read, nothing else ---------------------------------
async def _one(session: Any, url: str, body: dict, out: list[dict]) -> None:
    t0 = time.perf_counter()
    stamps: list[float] = []
    tokens = None
    async with session.post(url, json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        async for line in resp.content:
            now = time.perf_counter()
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            c = json.loads(line[5:])
            if c.get("usage"):
                tokens = c["usage"].get("completion_tokens")
            if any((ch.get("delta") or {}).get("content") for ch in c.get("choices") or []):
                stamps.append(now)
    end = time.perf_counter()
    if stamps:
        out.append({"start": t0, "end": end, "ttft": (stamps[0] - t0) * 1e3, "e2e": (end - t0) * 1e3,
                    "gaps": [(b - x) * 1e3 for x, b in zip(stamps, stamps[1:])], "tokens": tokens or len(stamps)})


EXACT = {"min_tokens": True, "ignore_eos": True}  # dropped when the server refuses them, as perfstack does


def _body(model: str, messages: list[dict], osl: int) -> dict:
    b = {"model": model, "messages": messages, "stream": True, "max_tokens": osl, "temperature": 0.0,
         "stream_options": {"include_usage": True}}
    if EXACT:
        b.update(min_tokens=osl, ignore_eos=True)
    return b


async def _referee(a: argparse.Namespace, data: Path) -> list[dict]:
    import aiohttp

    from perfstack.loadtest import trace

    url = a.url.rstrip("/") + "/v1/chat/completions"
    out: list[dict] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as s:
        try:
            await _one(s, url, _body(a.model, [{"role": "user", "content": "w5 w6"}], 4), [])
        except RuntimeError:
            EXACT.clear()  # the server refuses ignore_eos/min_tokens: lengths are the model's own, for every tool
        if a.workload == "trace":
            wl, _ = trace.load(str(data))
            t0, tasks = time.perf_counter(), []
            for at, p in zip(wl.arrivals or [], wl.prompts):
                await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
                tasks.append(asyncio.ensure_future(_one(s, url, _body(a.model, [
                    {"role": "user", "content": p.text}], p.max_tokens), out)))
            await asyncio.gather(*tasks)
            return out
        if a.workload == "multi-turn":
            queue = conversations(a)

            async def talk() -> None:
                while queue:
                    conv = queue.pop(0)
                    for p in conv:
                        msgs = [{"role": r, "content": c} for r, c in p.history] + [{"role": "user", "content": p.text}]
                        await _one(s, url, _body(a.model, msgs, p.max_tokens), out)
            await asyncio.gather(*(talk() for _ in range(a.concurrency)))
            return out
        texts = [json.loads(line)["text"] for line in data.read_text().splitlines()]
        warm, texts = texts[:a.concurrency], texts[a.concurrency:]
        await asyncio.gather(*(_one(s, url, _body(a.model, [{"role": "user", "content": t}], a.osl), [])
                               for t in warm))

        async def loop() -> None:
            while texts:
                await _one(s, url, _body(a.model, [{"role": "user", "content": texts.pop(0)}], a.osl), out)
        await asyncio.gather(*(loop() for _ in range(a.concurrency)))
    return out


def referee(a: argparse.Namespace, data: Path) -> dict:
    recs = asyncio.run(_referee(a, data))
    span = max(r["end"] for r in recs) - min(r["start"] for r in recs)
    tpot = [(r["e2e"] - r["ttft"]) / (r["tokens"] - 1) for r in recs if r["tokens"] > 1]
    return {"ttft_p50": statistics.median(r["ttft"] for r in recs), "tpot_p50": statistics.median(tpot),
            "itl_p50": statistics.median(g for r in recs for g in r["gaps"]),
            "e2e_p50": statistics.median(r["e2e"] for r in recs),
            "out_tok_s": sum(r["tokens"] for r in recs) / span, "req_s": len(recs) / span}


def _data(a: argparse.Namespace, work: Path) -> Path:
    if a.workload == "trace":
        if a.trace:
            return Path(a.trace)
        path = work / "trace.jsonl"
        synthetic_trace(path, a.requests, a.rate, a.isl, a.osl)
        return path
    if a.workload == "multi-turn":
        path = work / "multi_turn.jsonl"  # AIPerf's multi_turn file: the user turns of the same conversations
        with path.open("w") as f:
            for c, conv in enumerate(conversations(a)):
                f.write(json.dumps({"session_id": f"conv-{c}", "turns": [{"text": p.text} for p in conv]}) + "\n")
        return path
    path = work / "prompts.jsonl"
    single_prompts(path, a.tokenizer, a.requests + a.concurrency, a.isl)
    return path


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
    ap.add_argument("--workload", choices=("single", "multi-turn", "trace"), default="single")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--trace", help="a mooncake-style JSONL trace (default: a synthetic one)")
    ap.add_argument("--rate", type=float, default=4.0, help="the synthetic trace's mean requests/s")
    ap.add_argument("--no-referee", dest="referee", action="store_false")
    ap.add_argument("--no-aiperf", dest="aiperf_on", action="store_false", help="perfstack and the referee only")
    ap.add_argument("--out", help="keep every tool's output here (default: a temporary folder)")
    a = ap.parse_args()
    work = Path(a.out) if a.out else Path(tempfile.mkdtemp())
    work.mkdir(parents=True, exist_ok=True)
    data = _data(a, work)
    tools = (["aiperf"] if a.aiperf_on else []) + ["perfstack"] + (["referee"] if a.referee else [])
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    for r in range(a.rounds):
        if "aiperf" in tools:
            try:
                runs["aiperf"].append(aiperf(a.aiperf, a, data, work / f"aiperf{r}"))
            except RuntimeError as e:  # the others still run: perfstack against the referee
                print(e, flush=True)
                tools.remove("aiperf")
                del runs["aiperf"]
        runs["perfstack"].append(perfstack(a, data, work / f"perfstack{r}.json"))
        if a.referee:
            runs["referee"].append(referee(a, data))
        print(f"round {r + 1}: " + "; ".join(f"{t} {runs[t][-1]}" for t in tools), flush=True)
    ref = "referee" if a.referee else tools[0]
    print(f"\n{a.workload}: {a.concurrency} streams, {a.requests} requests of {a.isl} -> {a.osl} tokens, median of "
          f"{a.rounds} alternating rounds; ratios to the {ref}")
    print("| figure | " + " | ".join(tools) + " | " + " | ".join(f"{t} / {ref}" for t in tools if t != ref)
          + " |\n|" + "---|" * (1 + len(tools) + len(tools) - 1))
    for k, label in FIGURES.items():
        med = {t: statistics.median(x[k] for x in runs[t]) for t in tools}
        print(f"| {label} | " + " | ".join(f"{med[t]:.2f}" for t in tools) + " | "
              + " | ".join(f"{med[t] / med[ref]:.3f}" for t in tools if t != ref) + " |")
    # the server's own speed drifts between runs; a tool's spread across its rounds shows how much
    print("\nspread across rounds (max / min): " + "; ".join(
        f"{t} " + ", ".join(f"{k} {max(x[k] for x in runs[t]) / min(x[k] for x in runs[t]):.2f}"
                            for k in ("tpot_p50", "out_tok_s")) for t in tools))
    waits = [x.get("cpu_wait") for x in runs["perfstack"] if x.get("cpu_wait") is not None]
    if waits:
        print(f"\nperfstack's client waited for a CPU {max(waits):.1%} of a level at most (above a few percent the "
              "host's contention is in every tool's figures)")


if __name__ == "__main__":
    main()
