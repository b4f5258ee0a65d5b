"""What torch.distributed adds to one small NCCL call, graph-replayed and eager, per ProcessGroupNCCL setting.

    python benchmarks/torch_nccl_call_cost.py [--world 2] [--bytes 1024] [--out FILE.json]

At latency-bound sizes nccl-tests times a bare ``ncclAllReduce`` loop; perfstack times the same
collective through ``torch.distributed``, whose process group does bookkeeping per call (work
objects, the flight recorder, start/end CUDA events for the watchdog). Inside a CUDA graph the
events become graph nodes the GPU executes between the NCCL kernels. This script times an all_reduce
of ``--bytes`` bytes on ``--world`` GPUs under each setting in VARIANTS, a fresh process group per
setting (the variables are read when it is created), and prints microseconds per call for graph
replay and for eager issue, plus the node types of the captured graph.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import tempfile

VARIANTS = {
    "default": {},
    "no flight recorder, no timing events": {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0", "TORCH_NCCL_ENABLE_TIMING": "0"},
}
CALLS = 20
REPLAYS = 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, world: int, nbytes: int, port: int, env: dict, result_path: str) -> None:
    os.environ.update(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0",
                      TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    x = torch.ones(nbytes // 4, device="cuda")

    def timed(fn, reps: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3  # µs

    for _ in range(20):
        dist.all_reduce(x)
    eager = min(timed(lambda: [dist.all_reduce(x) for _ in range(CALLS)], 10) / (10 * CALLS) for _ in range(5))
    g = torch.cuda.CUDAGraph()
    if hasattr(g, "enable_debug_mode"):
        g.enable_debug_mode()  # keeps the graph's description for debug_dump
    with torch.cuda.graph(g):
        for _ in range(CALLS):
            dist.all_reduce(x)
    nodes: dict[str, int] = {}
    try:
        dot = result_path + f".rank{rank}.dot"
        g.debug_dump(dot)
        # cudaGraphDebugDotPrint labels each node with its type first: label="{KERNEL\n| ..."
        for kind in re.findall(r'label="\{?([A-Z_]+)', open(dot, encoding="utf-8", errors="replace").read()):
            nodes[kind] = nodes.get(kind, 0) + 1
    except Exception as e:  # a build without graph debug support
        nodes = {"unavailable": str(e)[:120]}
    g.replay()
    graph = min(timed(g.replay, REPLAYS // 10) / (REPLAYS // 10 * CALLS) for _ in range(10))
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"graph_us": graph, "eager_us": eager, "nodes": nodes}, f)
    dist.destroy_process_group()


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
            rows[name] = {**json.load(open(f.name)), "env": env}
            dot = f.name + ".rank0.dot"
            if args.out and os.path.exists(dot):  # the default setting's graph, node by node
                os.replace(dot, f"{os.path.splitext(args.out)[0]}.{len(rows)}.dot")
        r = rows[name]
        print(f"{name:42s} graph {r['graph_us']:7.2f} µs/call   eager {r['eager_us']:7.2f} µs/call   "
              f"nodes {r['nodes']}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"world": args.world, "bytes": args.bytes, "calls_per_graph": CALLS, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
