"""What one small all_reduce costs per call, through torch.distributed and straight to NCCL, eager and
graph-replayed, under a few NCCL/ProcessGroupNCCL settings; and the node types of each captured graph.

    python benchmarks/nccl_call_cost.py [--world 2] [--bytes 1024] [--out FILE.json]

The collectives benchmark calls NCCL directly (perfstack.bench.nccl_lib) so that a small message
measures what nccl-tests measures. This script shows where the time per call goes: each VARIANTS
entry runs in fresh processes (the variables are read when communicators are created); each rank
times ``--bytes`` all_reduce calls issued back to back between two CUDA events, eagerly and replayed
from a CUDA graph of CALLS calls, through ``dist.all_reduce`` and through the direct communicator,
and counts the node types of each graph (cudaGraphDebugDotPrint). Prints µs per call.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import socket
import sys
import tempfile

VARIANTS = {
    "default": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"},
    "NCCL_GRAPH_MIXING_SUPPORT=0": {"NCCL_GRAPH_MIXING_SUPPORT": "0"},
    "no flight recorder, no timing events": {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0", "TORCH_NCCL_ENABLE_TIMING": "0"},
}
CALLS = 20  # per graph, as nccl-tests -n 20 -G
REPLAYS = 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_types(graph, dot: str) -> dict:
    """Count of each node type in a captured graph (cudaGraphDebugDotPrint labels a node with its type)."""
    try:
        graph.debug_dump(dot)
        text = open(dot, encoding="utf-8", errors="replace").read()
    except Exception as e:  # a build without graph debug support
        return {"unavailable": str(e)[:120]}
    nodes: dict[str, int] = {}
    for kind in re.findall(r'label="\{?([A-Z_]+)', text):
        nodes[kind] = nodes.get(kind, 0) + 1
    return nodes


def rank_main(rank: int, world: int, nbytes: int, port: int, env: dict, result_path: str) -> None:
    os.environ.update(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0",
                      TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    import time

    import torch
    import torch.distributed as dist

    from perfstack.bench import collective_rank

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    x = torch.ones(nbytes // 4, device=device)
    comm, why = collective_rank.open_direct(torch, dist, device, rank, world)
    paths = {"torch": lambda: dist.all_reduce(x)}
    if comm:
        paths["direct"] = collective_rank.direct(torch, comm, "all_reduce", x, None)
        handle = torch.cuda.current_stream().cuda_stream
        ptr, count = x.data_ptr(), x.numel()
        paths["direct, stream looked up once"] = lambda: comm.all_reduce(ptr, ptr, count, handle)
    res: dict = {"direct_unavailable": why or None}

    def timed(fn, reps: int) -> tuple[float, float]:
        """(GPU µs, host issue µs) for ``reps`` calls of fn."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        issue = time.perf_counter() - t0
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3, issue * 1e6

    t0 = time.perf_counter()
    for _ in range(1000):
        torch.cuda.current_stream()
    res["current_stream_us"] = (time.perf_counter() - t0) * 1e3
    for name, fn in paths.items():
        for _ in range(20):
            fn()
        eager = [timed(fn, CALLS) for _ in range(20)]
        row = {"eager_us": min(g for g, _ in eager) / CALLS, "issue_us": min(h for _, h in eager) / CALLS}
        if name != "direct, stream looked up once":  # a graph captures on its own stream
            for calls in (CALLS, 10 * CALLS):
                g = torch.cuda.CUDAGraph()
                dump = rank == 0 and calls == CALLS and hasattr(g, "enable_debug_mode")
                if dump:
                    g.enable_debug_mode()  # keeps the graph's description for debug_dump
                with torch.cuda.graph(g):
                    for _ in range(calls):
                        fn()
                g.replay()
                reps = max(1, REPLAYS * CALLS // calls)
                row[f"graph{calls}_us"] = min(timed(g.replay, reps)[0] / (reps * calls) for _ in range(5))
                if dump:
                    row["nodes"] = node_types(g, f"{result_path}.{name}.dot")
        res[name] = row
    with open(f"{result_path}.rank{rank}", "w") as f:
        json.dump(res, f)
    torch.cuda.synchronize()
    dist.barrier()
    os._exit(0)  # skip teardown: only the figures matter, and a communicator's teardown can wait on peers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch.multiprocessing as mp

    rows = {}
    for name, env in VARIANTS.items():
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            mp.spawn(rank_main, args=(args.world, args.bytes, free_port(), env, f.name), nprocs=args.world)
            rows[name] = {"env": env, **{f"rank{r}": json.load(open(f"{f.name}.rank{r}")) for r in range(args.world)}}
            if args.out:
                for dot in glob.glob(f"{f.name}.*.dot"):
                    shutil.move(dot, f"{os.path.splitext(args.out)[0]}.{len(rows)}.{dot[len(f.name) + 1:]}")
        r0 = rows[name]["rank0"]
        print(f"{name}: torch.cuda.current_stream() {r0['current_stream_us']:.2f} µs", flush=True)
        for path, r in r0.items():
            if isinstance(r, dict):
                print(f"  {path:32s} eager {r['eager_us']:6.2f} (issue {r['issue_us']:6.2f})  graph of {CALLS} "
                      f"{r.get(f'graph{CALLS}_us', float('nan')):6.2f}  of {10 * CALLS} "
                      f"{r.get(f'graph{10 * CALLS}_us', float('nan')):6.2f} µs/call  nodes {r.get('nodes')}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"world": args.world, "bytes": args.bytes, "calls_per_graph": CALLS, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
