from fakes import facts

from perfstack.rules import CHECKS, load, run_check

load()


def res(name, value, peak, expected=None, **extra):
    return {name: dict(value=value, unit="GB/s", peak=peak, fraction=value / peak if peak else None,
                       expected_fraction=expected, verdict="", params={}, notes=[], telemetry=extra.get("telemetry", {}))}


def test_no_bench_results_is_not_applicable():
    _, r = run_check(CHECKS["h2d-bandwidth-low"], facts())
    assert r.status == "not-applicable" and "doctor --bench" in r.reason


def test_h2d_low_names_the_downgraded_link():
    f = facts(bench__results=res("h2d.pinned.best", 12.0, 63.0, 0.85),
              gpu__list=[{"pcie_gen": 4, "pcie_width": 8, "pcie_gen_max": 5, "pcie_width_max": 16, "numa_node": 0}])
    (finding,), r = run_check(CHECKS["h2d-bandwidth-low"], f)
    assert finding.severity.value == "critical"  # 12/63 = 19% of peak, 22% of the practical ceiling
    assert "link at Gen4 x8 of Gen5 x16" in finding.evidence and "12.0 GB/s" in finding.evidence


def test_h2d_healthy_is_quiet():
    f = facts(bench__results=res("h2d.pinned.best", 55.0, 63.0, 0.85))
    assert run_check(CHECKS["h2d-bandwidth-low"], f)[1].status == "passed"


def test_gemm_low_cites_telemetry():
    r = res("gemm.bf16.best", 400.0, 989.4, 0.8, telemetry={"after": {"sm_clock_mhz": 1100, "power_w": 350.0}})
    (finding,), _ = run_check(CHECKS["gemm-throughput-low"], facts(bench__results=r))
    assert "sm_clock_mhz 1100" in finding.evidence
    assert run_check(CHECKS["gemm-throughput-low"], facts(bench__results=res("gemm.bf16.best", 780.0, 989.4, 0.8)))[
        1].status == "passed"


def test_hbm_and_collectives():
    (f1,), _ = run_check(CHECKS["hbm-bandwidth-low"], facts(bench__results=res("hbm.copy", 1500.0, 3350.0, 0.9)))
    assert f1.severity.value == "warning"
    f = facts(bench__results=res("collective.all_reduce.best", 20.0, 450.0), env={"NCCL_P2P_DISABLE": "1"})
    (f2,), _ = run_check(CHECKS["collective-bandwidth-low"], f)
    assert f2.severity.value == "critical" and "NCCL_P2P_DISABLE=1" in f2.evidence
