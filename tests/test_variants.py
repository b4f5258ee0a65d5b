"""The doctor on real recorded bundles, and on edited copies of them that each plant one known problem.

tests/fixtures/variants.py builds a healthy copy of a recorded bundle and one variant per problem;
here each variant must raise its check (at the severity the problem deserves, citing the planted
value), the healthy copy must raise none of them, and every recorded bundle must audit cleanly.
"""

from __future__ import annotations

import json

import pytest
from fixtures.variants import BASE, BASES, BUNDLES, VARIANTS, materialize

from perfstack.audit import audit
from perfstack.cli.main import main
from perfstack.host.bundle import BundleHost
from perfstack.model import Run
from perfstack.rules import load, select_checks

REQUIRED = {
    "thp-mode", "swappiness", "swap-enabled", "numa-balancing", "cpu-governor", "memlock-limit", "nofile-limit",
    "shm-size", "gpu-persistence-mode", "gpu-xid-errors", "gpu-ecc-errors", "gpu-clock-throttle", "gpu-power-cap",
    "mig-enabled", "pcie-link-downgraded", "gpu-numa-affinity", "driver-toolkit-mismatch", "torch-cuda-arch",
    "nccl-p2p-disabled", "nccl-debug-env", "tf32-override-env", "alloc-conf", "cgroup-memory-limit",
    "cgroup-cpu-quota", "io-scheduler",
}

# variant -> (the worst severity its check must report, text the evidence must carry: the planted value)
EXPECT: dict[str, tuple[str, str]] = {
    "thp-never": ("warning", "[never]"),
    "swappiness-60": ("warning", "vm.swappiness = 60"),
    "swapfile-8g": ("warning", "/swap.img: 0 B of 8.0 GiB"),
    "process-swapped": ("critical", "12 MiB in swap"),
    "numa-balancing-two-nodes": ("warning", "numa_balancing = 1 on a 2-node host"),
    "governor-powersave": ("warning", "powersave on CPUs 0-15"),
    "memlock-64k": ("critical", "soft 64 KiB"),
    "nofile-1024": ("info", "soft 1024"),
    "shm-64m": ("critical", "/dev/shm is 64 MiB"),
    "persistence-off": ("warning", "persistence mode Disabled"),
    "xid79-fallen-off-bus": ("critical", "Xid 79"),
    "xid13-app-fault": ("warning", "Xid 13 ×2"),
    "ecc-uncorrectable": ("critical", "2 uncorrectable ECC errors since the driver loaded"),
    "throttle-hw-slowdown": ("critical", "HW slowdown active"),
    "throttle-hw-thermal": ("critical", "HW thermal slowdown active"),
    "power-cap-500w": ("warning", "enforced power limit 500 W, default 700 W"),
    "mig-on": ("warning", "MIG Enabled"),
    "pcie-gen4-x8-busy": ("critical", "PCIe Gen4 x8, capable of Gen5 x16"),
    "gpu-numa-unknown-two-nodes": ("warning", "numa_node -1"),
    "driver-550-torch-cu130": ("critical", "driver 550.127.05 supports CUDA up to 12.4"),
    "torch-without-sm90": ("critical", "[sm_80 sm_86]"),
    "nccl-p2p-disable-2gpu": ("critical", "NCCL_P2P_DISABLE=1"),
    "nccl-debug-info": ("info", "NCCL_DEBUG=INFO"),
    "nccl-debug-in-etc-nccl-conf": ("info", "NCCL_DEBUG=INFO (from /etc/nccl.conf)"),
    "tf32-override-0": ("warning", "NVIDIA_TF32_OVERRIDE=0"),
    "alloc-conf-unset": ("info", "PYTORCH_CUDA_ALLOC_CONF is unset"),
    "alloc-conf-lowercase-true": ("warning", "expandable_segments:true"),
    "cgroup-memory-16g": ("info", "cgroup memory limit 16 GiB"),
    "cgroup-oom-killed": ("critical", "2 OOM kill(s)"),
    "cgroup-cpus-4": ("warning", "CFS quota allows 4 CPUs of the host's 16"),
    "nvme-bfq": ("warning", "nvme0n1: scheduler [bfq]"),
}

# A required check that fires on the healthy bundle with real, unedited data. Under a dense bf16
# loop the recorded GPUs sit at their 700 W board limit, and the driver reports that as the SW power
# cap being active; gpu-clock-throttle reports it as info ("normal for dense math"). Editing the
# reading away would hide real data, so only this exact finding is allowed.
HEALTHY_ALLOWED = {"gpu-clock-throttle": ("info", "at its full board power")}

RECORDED = {"h100-idle": 1, "h100-busy": 1, "h200x2-idle": 2, "h200x2-busy": 2, "h100x2-idle": 2,
            "cpu-only-container": None}


def internal_errors(run: Run) -> list[str]:
    return [f"{c.id}: {c.reason}" for c in run.checks
            if c.status == "not-checked" and c.reason.startswith("internal error")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every healthy bundle and variant, built once and audited with every check."""
    checks = select_checks()
    built = materialize(tmp_path_factory.mktemp("variants"))
    return {name: audit(BundleHost(path), checks, f"bundle {path}") for name, path in built.items()}


def test_variants_cover_every_required_check():
    assert {target for target, _ in VARIANTS.values()} >= REQUIRED
    assert set(EXPECT) == set(VARIANTS)
    assert {target for target, _ in VARIANTS.values()} <= set(load())  # no typo in a target id
    assert set(BASES) <= set(VARIANTS) and set(BASES.values()) | {BASE} <= set(RECORDED)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_fires_its_check(runs, name):
    target = VARIANTS[name][0]
    severity, planted = EXPECT[name]
    run = runs[name]
    assert not internal_errors(run)
    found = [f for f in run.findings if f.id == target]
    assert found, f"{target} did not fire on {name}: " + str([c for c in run.checks if c.id == target])
    worst = max(found, key=lambda f: f.severity.rank)
    assert worst.severity.value == severity, [(f.severity.value, f.evidence) for f in found]
    assert any(planted in f.evidence for f in found), [f.evidence for f in found]


@pytest.mark.parametrize("name", ["healthy"] + [f"healthy-{b}" for b in sorted(set(BASES.values()) - {BASE})])
def test_healthy_raises_none_of_the_required_checks(runs, name):
    run = runs[name]
    assert not internal_errors(run)
    fired = [f for f in run.findings if f.id in REQUIRED]
    unexpected = [(f.id, f.severity.value, f.evidence) for f in fired
                  if f.id not in HEALTHY_ALLOWED or f.severity.value != HEALTHY_ALLOWED[f.id][0]
                  or HEALTHY_ALLOWED[f.id][1] not in f.evidence]
    assert not unexpected
    statuses = {c.id: c.status for c in run.checks}
    assert {statuses[i] for i in REQUIRED - set(HEALTHY_ALLOWED)} <= {"passed", "not-applicable", "not-checked"}


def test_recorded_bundle_set_is_the_one_tested():
    assert {p.name for p in BUNDLES.iterdir() if p.is_dir()} == set(RECORDED)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_bundle_audits_cleanly(name):
    run = audit(BundleHost(BUNDLES / name), select_checks(), name)
    assert not internal_errors(run)
    assert not [c for c in run.checks if c.status == "not-checked" and "probe failed" in c.reason]
    count = run.facts.value("gpu.count")
    assert count == RECORDED[name] if RECORDED[name] else count in (None, 0)


def test_doctor_cli_on_recorded_h100(capsys):
    assert main(["doctor", "--bundle", str(BUNDLES / "h100-busy"), "--json", "--fail-on", "never"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert "H100" in run["facts"]["gpu.summary"]["value"]
    assert run["facts"]["gpu.count"]["value"] == 1


def test_doctor_cli_on_cpu_only_container(capsys):
    assert main(["doctor", "--bundle", str(BUNDLES / "cpu-only-container"), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    checks = load()
    status = {c["id"]: c["status"] for c in run["checks"]}
    gpu_checks = [i for i in status if checks[i].layer == "driver"]
    gpu_checks += ["pcie-link-downgraded", "gpu-p2p-topology", "nvlink-health", "pcie-aer-errors"]
    assert gpu_checks and {status[i] for i in gpu_checks} == {"not-applicable"}
    assert not [f for f in run["findings"] if f["id"] in gpu_checks]


def test_variants_script_refuses_a_nonempty_outdir(tmp_path):
    from fixtures.variants import main as variants_main
    (tmp_path / "x").write_text("")
    assert variants_main([str(tmp_path)]) == 2
    assert variants_main([]) == 2


def test_two_h100_bundle_reads_nvlink_between_its_gpus():
    """The 2xH100 bundle (NVLink NV18 between the two GPUs): topology and peer access are read, and
    neither the P2P nor the NVLink check finds fault with a healthy pair."""
    run = audit(BundleHost(BUNDLES / "h100x2-idle"), select_checks(), "h100x2-idle")
    status = {c.id: c.status for c in run.checks}
    assert status["gpu-p2p-topology"] == "passed" and status["nvlink-health"] == "passed", status
    assert "H100" in run.facts.value("gpu.summary")


def test_every_severity_found_is_on_its_checks_ladder(runs):
    """'perfstack explain' shows each check's ladder as read from its rule: every finding of every
    variant and healthy bundle must be on it, and the planted variants reach more than the defaults."""
    from perfstack.checks import ladder
    from perfstack.rules.registry import CHECKS
    seen: dict[str, set[str]] = {}
    for run in runs.values():
        for f in run.findings:
            seen.setdefault(f.id, set()).add(f.severity.value)
    off = {i: (sorted(s), [x.value for x in ladder(CHECKS[i])]) for i, s in seen.items()
           if i in CHECKS and not s <= {x.value for x in ladder(CHECKS[i])}}
    assert not off
    assert any(len(s) > 1 for s in seen.values())  # the test sees checks reporting more than one severity
