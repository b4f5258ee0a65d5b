"""The side-by-side table of benchmarks/collectives_vs_nccl_tests.py compares like with like: in-place
ops with nccl-tests' in-place column, graph with graph, eager with eager; one-rank in-place ops are
not judged and get no bandwidth; each size is judged on eager where perfstack's eager calls are not
host-bound, on graph elsewhere."""

import importlib.util
from pathlib import Path

import pytest

from perfstack.bench import collectives, nccl_tests

ROOT = Path(__file__).parents[2]
KIB, GIB = 1024, 1024**3


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("collectives_vs_nccl_tests",
                                                  ROOT / "benchmarks" / "collectives_vs_nccl_tests.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _line(size, t_oop, t_in, busbw=0.0):
    return f"{size} {size // 4} float none -1 {t_oop} 1.0 {busbw} 0 {t_in} 1.0 {busbw} 0"


def _ref(text_by_op):
    return {op: nccl_tests.by_size(nccl_tests.parse(t)) for op, t in text_by_op.items()}


def _mine(t, host_bound=False, ops=10):
    return {"time_us": t, "p10_us": t * 0.99, "p90_us": t * 1.01, "batches": 40, "busbw": 0.0, "ops": ops,
            "host_bound": host_bound, "why_eager": ""}


def test_one_rank_table_is_like_for_like(script):
    sizes = (KIB, GIB)
    logs = {
        # nccl-tests at one rank: an in-place all_reduce does nothing (1 µs), out-of-place is a copy
        ("eager", "all_reduce"): "\n".join([_line(KIB, 7.0, 0.5), _line(GIB, 713.0, 1.0)]),
        ("graph", "all_reduce"): "\n".join([_line(KIB, 1.5, 0.4), _line(GIB, 880.0, 0.5)]),
        ("eager", "all_gather"): "\n".join([_line(KIB, 7.8, 0.6), _line(GIB, 714.0, 1.1), _line(GIB, 716.0, 1.1)]),
        ("graph", "all_gather"): "\n".join([_line(KIB, 1.3, 0.4), _line(GIB, 884.0, 0.5)]),
    }
    ref = {m: {} for m in script.MODES}
    for (mode, op), text in logs.items():
        for size, fig in nccl_tests.by_size(nccl_tests.parse(text)).items():
            ref[mode][(op, size)] = fig
    ours = {
        "graph": {("all_reduce", KIB): _mine(0.5), ("all_reduce", GIB): _mine(0.5),
                  ("all_gather", KIB): _mine(1.2), ("all_gather", GIB): _mine(883.0, ops=2)},
        "eager": {("all_reduce", KIB): _mine(30.0, True), ("all_reduce", GIB): _mine(30.0, True),
                  ("all_gather", KIB): _mine(30.0, True), ("all_gather", GIB): _mine(712.0, ops=2)},
    }
    copies = [{"size": GIB, "eager_2": 712.0, "graph_2": 883.0}]
    text, raw = script.build(1, sizes, ref, ours, {"eager": "-n 20", "graph": "-n 20 -G 10"}, {}, copies)
    rows = {ln.split(" | ")[0] + "@" + op: ln for op, block in _blocks(text).items() for ln in block}

    ar = rows["| 1GiB@all_reduce"]
    cells = [x.strip() for x in ar.strip("| ").split(" | ")]
    assert cells[3] == cells[6] == "—" and cells[7] == "not judged" and "no data moves" in cells[8]
    assert cells[1] == "0.50" and cells[4] == "1.00"  # nccl-tests' in-place column, not its out-of-place copy

    ag_small, ag_big = rows["| 1KiB@all_gather"], rows["| 1GiB@all_gather"]
    assert "**graph**" in ag_small and "30.00 host" in ag_small  # host-bound eager: judged on graph
    assert "**eager**" in ag_big and "715.00" in ag_big  # median of the two eager cycles
    assert "1.00 |" in ag_big and "one rank: no bus traffic" in ag_big

    assert raw["counts"]["none"] == 4  # all_reduce and broadcast at both sizes
    assert raw["counts"]["judged"] == [2, 2]
    assert "4 sizes not judged" in text
    assert "graph / stream" in text and "1.24" in text
    assert "3200916" not in text


def test_a_size_outside_the_bar_is_listed_with_both_spreads(script):
    ref = {"eager": {("sendrecv", 64 * 1024**2): nccl_tests.by_size(nccl_tests.parse("\n".join(
               _line(64 * 1024**2, t, t, 1175.0) for t in (57.1, 55.0, 60.2))))[64 * 1024**2]},
           "graph": {}}
    ours = {"eager": {("sendrecv", 64 * 1024**2): _mine(62.0)}, "graph": {}}
    text, raw = script.build(1, (64 * 1024**2,), ref, ours, {}, {}, [])
    assert raw["counts"]["judged"] == [0, 1]
    assert "0.92 ✗" in text
    assert "sendrecv 64MiB eager: nccl-tests 57.10 µs (cycles 55.00–60.20, 3 cycles)" in text
    assert "p10–p90 61.38–62.62, 40 batches of 10 calls" in text


def test_every_collective_has_a_table(script):
    text, _ = script.build(2, (KIB,), {"eager": {}, "graph": {}}, {"eager": {}, "graph": {}}, {}, {}, [])
    assert all(f"### {op} " in text for op in collectives.OPS)


def _blocks(text):
    out, op = {}, None
    for ln in text.splitlines():
        if ln.startswith("### "):
            op = ln.split()[1]
            out[op] = []
        elif op and ln.startswith("| ") and not ln.startswith("| size"):
            out[op].append(ln)
    return out
