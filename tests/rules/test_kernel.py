from fakes import facts

from perfstack.host import Unavailable
from perfstack.rules import CHECKS, load, run_check

load()


def ids(findings):
    return [f.id for f in findings]


def test_swappiness_fires_above_10():
    found, res = run_check(CHECKS["swappiness"], facts(kernel__swappiness=60))
    assert res.status == "found" and found[0].evidence == "vm.swappiness = 60"
    assert found[0].sources == ["test:kernel.swappiness"]
    assert any("vm.swappiness=10" in c for c in found[0].fix_commands)


def test_swappiness_quiet_at_10():
    assert run_check(CHECKS["swappiness"], facts(kernel__swappiness=10))[1].status == "passed"


def test_swappiness_not_checked_when_missing():
    _, res = run_check(CHECKS["swappiness"], facts(kernel__swappiness=Unavailable("permission denied")))
    assert res.status == "not-checked" and "permission denied" in res.reason


def test_thp_never_warns_always_with_defrag_is_info():
    found, _ = run_check(CHECKS["thp-mode"], facts(kernel__thp_enabled="never"))
    assert found[0].severity.value == "warning"
    found, _ = run_check(CHECKS["thp-mode"], facts(kernel__thp_enabled="always", kernel__thp_defrag="always"))
    assert found[0].severity.value == "info"
    assert run_check(CHECKS["thp-mode"], facts(kernel__thp_enabled="madvise"))[1].status == "passed"
