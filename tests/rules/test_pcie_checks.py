from fakes import facts
from test_driver import HEALTHY, gpu, gpus, recorded, run

from perfstack.host import Unavailable

NODES = [{"id": 0, "cpus": [0, 1], "mem_total_kib": 1}, {"id": 1, "cpus": [2, 3], "mem_total_kib": 1}]


def test_link_downgraded_under_load_is_critical_with_the_loss():
    f = gpus(gpu(pcie_gen=4, pcie_width=8, utilization_gpu=95))
    (hit,) = run("pcie-link-downgraded", f)[0]
    assert hit.severity.value == "critical" and hit.subject == "gpu0"
    assert "PCIe Gen4 x8, capable of Gen5 x16, while 95% busy (about 4× less host-GPU bandwidth)" in hit.evidence


def test_lower_generation_at_idle_is_info_with_the_recheck():
    (hit,) = run("pcie-link-downgraded", gpus(gpu(pcie_gen=1, utilization_gpu=0)))[0]
    assert hit.severity.value == "info" and "re-check under load" in hit.evidence
    assert "nvidia-smi -q -d PCIE" in hit.fix


def test_narrower_link_at_idle_is_a_warning():
    (hit,) = run("pcie-link-downgraded", gpus(gpu(pcie_width=8, utilization_gpu=0)))[0]
    assert hit.severity.value == "warning"


def test_host_slot_below_gpu_generation_warns():
    f = gpus(gpu(pcie_gen=4, pcie_gen_max=4, pcie_gen_gpu_max=5, pcie_gen_host_max=4, utilization_gpu=0))
    (hit,) = run("pcie-link-downgraded", f)[0]
    assert hit.severity.value == "warning" and "slot/CPU supports PCIe Gen4, the GPU Gen5" in hit.evidence


def test_link_healthy_and_sysfs_fallback():
    assert run("pcie-link-downgraded", recorded("smi_load.xml", nvml=False))[1].status == "passed"
    driverless = {k: None for k in ("pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max")}
    f = gpus(gpu(**driverless, sysfs_pcie_gen=3, sysfs_pcie_gen_max=5, sysfs_pcie_width=16,
                 sysfs_pcie_width_max=16, utilization_gpu=50))
    (hit,) = run("pcie-link-downgraded", f)[0]
    assert hit.severity.value == "critical" and "Gen3 x16, capable of Gen5 x16" in hit.evidence


def test_link_not_checked_without_link_data():
    blank = {k: None for k in HEALTHY if "pcie" in k}
    _, res = run("pcie-link-downgraded", gpus(gpu(**blank)))
    assert res.status == "not-checked" and "PCIe link" in res.reason
    _, res = run("pcie-link-downgraded", facts(gpu__count=1, gpu__list=Unavailable("probe failed")))
    assert res.status == "not-checked"


def test_numa_unknown_on_two_nodes_warns_with_the_map():
    f = gpus(gpu(numa_node=0), gpu(index=1, numa_node=None), numa__nodes=NODES)
    (hit,) = run("gpu-numa-affinity", f)[0]
    assert hit.severity.value == "warning" and "GPU0→0, GPU1→?" in hit.evidence
    assert run("gpu-numa-affinity", gpus(gpu(numa_node=0), numa__nodes=NODES))[1].status == "passed"
    assert run("gpu-numa-affinity", gpus(gpu(), numa__nodes=NODES[:1]))[1].status == "not-applicable"
    _, res = run("gpu-numa-affinity", gpus(gpu(), numa__nodes=Unavailable("no sysfs node dir")))
    assert res.status == "not-checked" and "no sysfs node dir" in res.reason


def topo(*rows):
    """pcie.topology as probes/pcie.py gives it, from 'GPU0 GPU1 PIX' style pair lines."""
    devices = sorted({d for a, b, _ in rows for d in (a, b)})
    links = {d: {} for d in devices}
    for a, b, path in rows:
        links[a][b] = links[b][a] = path
    return {"devices": devices, "links": links, "cpu_affinity": {}, "numa_affinity": {}, "nics": {}}


def test_p2p_topology():
    pcie_only = topo(("GPU0", "GPU1", "PIX"), ("GPU0", "GPU2", "SYS"), ("GPU1", "GPU2", "SYS"))
    (hit,) = run("gpu-p2p-topology", gpus(gpu(), gpu(index=1), gpu(index=2), pcie__topology=pcie_only))[0]
    assert "2 GPU pair(s)" in hit.evidence and "GPU0–GPU2 SYS" in hit.evidence
    mixed = topo(("GPU0", "GPU1", "NV18"), ("GPU0", "GPU2", "NODE"), ("GPU1", "GPU2", "NODE"))
    assert "1 pair(s) are on NVLink" in run("gpu-p2p-topology", gpus(gpu(), pcie__topology=mixed))[0][0].evidence
    nvlink = topo(("GPU0", "GPU1", "NV18"), ("GPU0", "NIC0", "SYS"), ("GPU1", "NIC0", "SYS"))
    assert run("gpu-p2p-topology", gpus(gpu(), pcie__topology=nvlink))[1].status == "passed"
    one = {"devices": ["GPU0"], "links": {"GPU0": {}}}
    assert run("gpu-p2p-topology", gpus(gpu(), pcie__topology=one))[1].status == "not-applicable"
    assert run("gpu-p2p-topology", gpus(gpu(), pcie__topology=Unavailable("x")))[1].status == "not-checked"
    _, res = run("gpu-p2p-topology", facts(gpu__count=0, pcie__topology=Unavailable("nvidia-smi: command not found")))
    assert (res.status, res.reason) == ("not-applicable", "no NVIDIA GPU")


def test_nvlink_health():
    f = gpus(gpu(nvlink_active=18, nvlink_links=18), gpu(index=1, nvlink_active=16, nvlink_links=18))
    (hit,) = run("nvlink-health", f)[0]
    assert hit.subject == "gpu1" and "16 of 18 NVLinks active; peers of the same model have 18" in hit.evidence
    same = gpus(gpu(nvlink_active=18, nvlink_links=18), gpu(index=1, nvlink_active=18, nvlink_links=18))
    assert run("nvlink-health", same)[1].status == "passed"
    assert run("nvlink-health", gpus(gpu()))[1].status == "not-applicable"


def aer(sev, n, bus="0000:00:06.0"):
    return {"bus_id": bus, "severity": sev, "type": "Physical Layer", "count": n}


def test_aer_errors():
    (hit,) = run("pcie-aer-errors", gpus(gpu(), kernel_log__aer=[aer("uncorrected-nonfatal", 1)]))[0]
    assert hit.severity.value == "critical" and hit.subject == "gpu0"
    assert run("pcie-aer-errors", gpus(gpu(), kernel_log__aer=[aer("corrected", 12)]))[0][0].severity.value == "warning"
    assert run("pcie-aer-errors", gpus(gpu(), kernel_log__aer=[aer("corrected", 2)]))[0][0].severity.value == "info"
    nic = [aer("uncorrected-fatal", 1, bus="0000:00:05.0")]
    assert run("pcie-aer-errors", gpus(gpu(), kernel_log__aer=nic))[1].status == "passed"
    assert run("pcie-aer-errors", gpus(gpu(), kernel_log__aer=Unavailable("root")))[1].status == "not-checked"


def dev(bus="0000:00:06.0", desc="NVIDIA Corporation GH100 [H100 SXM5 80GB]", **kw):
    """One pcie.lspci entry as probes/pcie.py gives it (healthy unless changed)."""
    d = {"bus_id": bus, "kind": "3D controller", "description": desc, "access_denied": False,
         "max_payload_cap": 256, "max_payload": 256, "max_read_request": 512, "aspm": "Disabled"}
    return dict(d, **kw)


DENIED = dev(access_denied=True, max_payload_cap=None, max_payload=None, max_read_request=None, aspm=None)


def test_aspm():
    (hit,) = run("pcie-aspm", facts(pcie__lspci=[dev(aspm="L1 Enabled", max_payload=128), dev("0000:00:05.0", "ConnectX-7")], pcie__aspm_policy="default"))[0]
    assert hit.severity.value == "info" and "0000:00:06.0" in hit.evidence and "L1 Enabled" in hit.evidence
    (hit,) = run("pcie-aspm", facts(pcie__lspci=Unavailable("lspci: command not found"), pcie__aspm_policy="powersave"))[0]
    assert "ASPM policy powersave" in hit.evidence
    f = facts(pcie__lspci=[DENIED], pcie__aspm_policy="default")
    assert run("pcie-aspm", f)[1].status == "passed"
    _, res = run("pcie-aspm", facts(pcie__lspci=[DENIED], pcie__aspm_policy=Unavailable("absent")))
    assert res.status == "not-checked" and "needs root" in res.reason


def test_max_payload():
    (hit,) = run("pcie-max-payload", facts(pcie__lspci=[dev(aspm="L1 Enabled", max_payload=128), dev("0000:00:05.0", "ConnectX-7")]))[0]
    assert hit.subject == "0000:00:06.0" and "MaxPayload 128 bytes, device supports 256" in hit.evidence
    _, res = run("pcie-max-payload", facts(pcie__lspci=[DENIED]))
    assert res.status == "not-checked" and "needs root" in res.reason
    assert run("pcie-max-payload", facts(pcie__lspci=Unavailable("x")))[1].status == "not-checked"
