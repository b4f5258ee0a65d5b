"""Collectives: nccl-tests bus-bandwidth factors, sizes, the analytic results every rank checks,
and the process launcher (run with gloo on CPU: a failing rank must not hang the run)."""

import pytest

from perfstack.bench import collective_rank as rank
from perfstack.bench import collectives as c

KIB, MIB, GIB = c.KIB, c.MIB, c.GIB


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 2, 0.5), ("all_gather", 8, 0.875), ("reduce_scatter", 8, 0.875),
    ("all_to_all", 4, 0.75), ("broadcast", 8, 1.0), ("sendrecv", 2, 1.0), ("sendrecv", 1, 1.0),
    ("all_reduce", 1, 0.0)])
def test_busbw_factors_match_nccl_tests(op, n, factor):
    assert c.busbw_factor(op, n) == pytest.approx(factor)


def test_bandwidth_arithmetic():
    # nccl-tests: 1 GiB all_reduce on 8 ranks in 6.0 ms -> algbw 178.96, busbw 313.18 GB/s
    assert c.algbw_gbps(GIB, 6.0e-3) == pytest.approx(178.957, abs=1e-3)
    assert c.busbw_gbps("all_reduce", 8, GIB, 6.0e-3) == pytest.approx(313.175, abs=1e-3)
    with pytest.raises(ValueError):
        c.busbw_factor("reduce", 2)


def test_sizes():
    assert c.sizes("quick") == (4 * KIB, MIB, 64 * MIB, GIB)
    full = c.sizes("full")
    # nccl-tests -b 1K -e 1G -f 4, then 8 GiB
    assert full[:11] == tuple(KIB * 4**i for i in range(11)) and full[-1] == 8 * GIB and len(full) == 12


@pytest.mark.parametrize("text,want", [("1K,64M,1G", (KIB, 64 * MIB, GIB)), ("1g, 4KiB ,4k", (4 * KIB, GIB)),
                                       ("8G", (8 * GIB,)), ("100", (100,)), ("2MB", (2 * MIB,))])
def test_parse_sizes(text, want):
    assert c.parse_sizes(text) == want


@pytest.mark.parametrize("text", ["", "0", "1T", "-4K", "abc", "1K,,2K", "1.5M"])
def test_parse_sizes_rejects(text):
    with pytest.raises(ValueError):
        c.parse_sizes(text)


def test_counts_and_buffers():
    assert c.count_for(MIB, 2) == MIB // 4
    assert c.count_for(1000, 3) == 249  # 250 elements rounded down to whole chunks of 3 ranks
    assert c.buffer_elems("all_gather", 1024, 4) == (256, 1024)
    assert c.buffer_elems("reduce_scatter", 1024, 4) == (1024, 256)
    assert c.buffer_elems("all_reduce", 1024, 4) == (1024, 0)
    assert c.bytes_needed("all_to_all", 1024, 2) == (1024 * 3 + 2 * 1024) * 4


def test_one_rank_in_place_ops_move_no_data():
    assert [op for op in c.OPS if c.in_place(op)] == ["all_reduce", "broadcast"]
    assert not c.moves_data("all_reduce", 1) and not c.moves_data("broadcast", 1)
    assert c.moves_data("all_gather", 1) and c.moves_data("sendrecv", 1)
    assert all(c.moves_data(op, 2) for op in c.OPS)


@pytest.mark.parametrize("op", c.OPS)
@pytest.mark.parametrize("n", [2, 3, 8])
def test_analytic_results_match_a_simulated_collective(op, n):
    torch = pytest.importorskip("torch")
    count = c.count_for(4 * 1000, n)
    inputs = [c.make_input(torch, op, r, n, count) for r in range(n)]
    if op == "broadcast":
        assert not torch.equal(inputs[1], inputs[0])  # the check would catch a broadcast that did nothing
    outputs = c.simulate(torch, op, inputs)
    for r in range(n):
        assert torch.equal(outputs[r], c.expected(torch, op, r, n, count)), (op, n, r)


@pytest.mark.parametrize("op", c.OPS)
def test_wrong_data_fails_the_check(op):
    # The check each rank makes before timing, on what the collective would leave there: right on
    # every rank, then one element off by one on rank 1 (an off-by-one sum, a stale chunk).
    torch = pytest.importorskip("torch")
    n, count = 3, c.count_for(4 * 1000, 3)
    outputs = c.simulate(torch, op, [c.make_input(torch, op, r, n, count) for r in range(n)])
    assert [c.correct(torch, op, r, n, count, outputs[r]) for r in range(n)] == [True] * n
    outputs[1] = outputs[1].clone()
    outputs[1][7] += 1
    assert [c.correct(torch, op, r, n, count, outputs[r]) for r in range(n)] == [True, False, True]
    # and a rank the check flagged turns the figure into an error, not a bandwidth
    ms = {m.name: m for m in c.to_measurements({"meta": {}, "rows": [
        {"op": op, "requested_bytes": MIB, "bytes": MIB, "samples": [10e-6] * 5, "wrong_ranks": [1]}]}, n)}
    m = ms[f"collective.{op}.1MiB"]
    assert m.status == "error" and m.reason == "wrong result on ranks [1]"


def test_slowest_rank_per_repetition():
    assert rank.slowest([[1.0, 5.0, 2.0], [2.0, 1.0, 2.5]]) == [2.0, 5.0, 2.5]


def rows():
    return {"meta": {"nccl_version": "2.27.3"}, "rows": [
        {"op": "all_reduce", "requested_bytes": MIB, "bytes": MIB, "samples": [10e-6] * 5, "wrong_ranks": []},
        {"op": "all_reduce", "requested_bytes": GIB, "bytes": GIB, "samples": [3e-3] * 5, "wrong_ranks": []},
        {"op": "broadcast", "requested_bytes": GIB, "bytes": GIB, "samples": [3e-3] * 5, "wrong_ranks": [1]},
        {"op": "all_gather", "requested_bytes": GIB, "bytes": GIB, "skipped": "ranks [1]: no room"}]}


def test_measurements_from_rank0_rows():
    ms = {m.name: m for m in c.to_measurements(rows(), 2)}
    big = ms["collective.all_reduce.1GiB"]
    assert big.value == pytest.approx(GIB / 3e-3 / 1e9)  # factor 1.0 at n=2
    assert big.params["sweep"] and big.params["world_size"] == 2 and big.params["op"] == "all_reduce"
    assert big.params["busbw_gbps"] == pytest.approx(357.914, abs=1e-3)
    assert big.params["algbw_gbps"] == big.params["busbw_gbps"]
    best = ms["collective.all_reduce.best"]
    assert best.value == big.value and not best.params["sweep"] and best.params["bytes"] == GIB
    assert ms["collective.broadcast.1GiB"].status == "error" and "ranks [1]" in ms["collective.broadcast.1GiB"].reason
    assert ms["collective.broadcast.best"].status == "skipped"
    assert ms["collective.all_gather.1GiB"].status == "skipped"


def test_children_keep_nvlink_multicast_off():
    env = c.child_env({"NCCL_NVLS_ENABLE": "1", "PATH": "/bin"}, 1, 2, "/tmp/cfg.json")
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert (env["RANK"], env["WORLD_SIZE"], env["PATH"]) == ("1", "2", "/bin")
    assert env["PYTHONPATH"].split(":")[0].endswith("src")


def test_graph_workers_turn_nccls_graph_mixing_off_unless_the_user_chose():
    assert "NCCL_GRAPH_MIXING_SUPPORT" not in c.child_env({}, 0, 2, "/tmp/cfg.json")
    assert c.child_env({}, 0, 2, "/tmp/cfg.json", graph=True)["NCCL_GRAPH_MIXING_SUPPORT"] == "0"
    mine = c.child_env({"NCCL_GRAPH_MIXING_SUPPORT": "1"}, 0, 2, "/tmp/cfg.json", graph=True)
    assert mine["NCCL_GRAPH_MIXING_SUPPORT"] == "1"


@pytest.mark.slow
def test_gloo_run_on_cpu_checks_and_times_every_op():
    pytest.importorskip("torch")
    results, why = c.launch(c.Job(world=2, ops=c.OPS, sizes=(4 * KIB,), budget_s=0.01, backend="gloo"), deadline_s=90)
    assert why == "" and len(results["rows"]) == len(c.OPS)
    for row in results["rows"]:
        assert row["wrong_ranks"] == [] and len(row["samples"]) >= rank.MIN_REPS and min(row["samples"]) > 0


@pytest.mark.slow
def test_a_failing_rank_is_an_error_not_a_hang(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(c, "FAIL_GRACE_S", 1.0)
    results, why = c.launch(c.Job(world=2, ops=("all_reduce",), sizes=(4 * KIB,), budget_s=0.01, backend="gloo",
                                  fail_rank=1), deadline_s=60)
    assert results is None and why.startswith("rank 1 failed: RuntimeError: injected failure")


def sweep(n=2, graph=True):
    mode = "graph" if graph else "eager"
    return {"meta": {}, "rows": [
        {"op": "all_reduce", "requested_bytes": 4 * KIB, "bytes": 4 * KIB, "samples": [12e-6] * 5, "wrong_ranks": [],
         "ops_per_batch": 84, "mode": mode, "issue_s_per_op": None if graph else 30e-6},
        {"op": "all_reduce", "requested_bytes": 16 * MIB, "bytes": 16 * MIB, "samples": [100e-6] * 5,
         "wrong_ranks": [], "ops_per_batch": 10, "mode": mode},
        {"op": "all_reduce", "requested_bytes": GIB, "bytes": GIB, "samples": [GIB / 300e9] * 5, "wrong_ranks": [],
         "ops_per_batch": 1, "mode": mode}]}


def test_sweep_reports_time_per_call_and_how_it_was_batched():
    ms = {m.name: m for m in c.to_measurements(sweep(), 2)}
    small = ms["collective.all_reduce.4KiB"]
    assert small.params["time_us"] == pytest.approx(12.0) and small.params["ops_per_batch"] == 84
    assert small.params["timing"] == "graph" and "84 calls back to back" in small.notes[0]
    lat = ms["collective.all_reduce.latency"]
    assert lat.unit == "µs" and lat.value == pytest.approx(12.0) and lat.params["bytes"] == 4 * KIB


def test_eager_batches_paced_by_the_host_say_so():
    ms = {m.name: m for m in c.to_measurements(sweep(graph=False), 2)}
    assert any(n.startswith("host-bound") for n in ms["collective.all_reduce.4KiB"].notes)
    assert not any(n.startswith("host-bound") for n in ms["collective.all_reduce.1GiB"].notes)


def test_small_sizes_judged_by_latency_large_by_bandwidth():
    peak, practical = 450.0, 0.7
    ms = {m.name: m for m in c.to_measurements(sweep(), 2)}
    for m in ms.values():
        c.judge_sweep(m, peak, "NVLink", practical, "nvlink")
    small, mid, big = (ms[f"collective.all_reduce.{s}"] for s in ("4KiB", "16MiB", "1GiB"))
    # 4 KiB: 12 µs against 10 µs + 4096 B / 315 GB/s -> within 2x of the reference
    assert small.params["judged_by"] == "latency" and small.verdict == "below expected"
    assert mid.params["judged_by"] == "transition" and mid.verdict == "no reference"
    assert big.params["judged_by"] == "bandwidth" and big.verdict == "good"  # 300 of 450*0.7
    assert ms["collective.all_reduce.latency"].verdict == "below expected"
    slow = c.to_measurements(sweep(), 2)[0]
    slow.params["time_us"] = 40.0
    assert c.judge_sweep(slow, peak, "NVLink", practical, "nvlink").verdict == "low"


def test_one_rank_is_reported_not_judged():
    for m in c.to_measurements(sweep(n=1), 1):
        c.judge_sweep(m, None, "", 0.7, "unknown")
        assert m.verdict == "no reference"
