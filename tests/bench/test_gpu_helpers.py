"""Pure parts of the GPU benchmarks' shared helpers: sizes, free-memory checks, which gpu.list entry
is this device, the PCIe link, the spec lookups, telemetry notes and building Measurements."""

import os

import pytest

from perfstack.bench import _gpu
from perfstack.model import Fact, Facts, Run

GIB, MIB = _gpu.GIB, _gpu.MIB


def gpus(*entries):
    return Facts({"gpu.list": Fact("gpu.list", list(entries), "test")})


def test_size_labels():
    assert [_gpu.size_label(n) for n in (4096, 64 * 1024, MIB, 256 * MIB, GIB, 1000)] == \
        ["4KiB", "64KiB", "1MiB", "256MiB", "1GiB", "1000B"]


def test_fits_leaves_headroom_and_unknown_free_is_optimistic():
    assert _gpu.fits(GIB, 2 * GIB)
    assert not _gpu.fits(2 * GIB, 2 * GIB)  # nothing left for cuBLAS workspace and friends
    assert not _gpu.fits(GIB, GIB + _gpu.RESERVE_BYTES - 1)
    assert _gpu.fits(GIB, GIB + _gpu.RESERVE_BYTES)
    assert _gpu.fits(100 * GIB, None)
    assert "needs 2.00 GiB" in _gpu.no_room(2 * GIB, GIB) and "1.00 GiB free" in _gpu.no_room(2 * GIB, GIB)


def test_largest_fitting_counts_every_buffer():
    sizes = [4 * GIB, 2 * GIB, GIB]
    assert _gpu.largest_fitting(sizes, 2, 80 * GIB) == 4 * GIB
    assert _gpu.largest_fitting(sizes, 2, 5 * GIB) == 2 * GIB  # 2 × 4 GiB does not fit in 5
    assert _gpu.largest_fitting(sizes, 2, GIB) is None


def test_gpu_entry_matches_bus_id_before_position():
    f = gpus({"index": 0, "pci_bus_id": "0000:19:00.0", "name": "A"},
             {"index": 1, "pci_bus_id": "0000:3b:00.0", "name": "B"})
    assert _gpu.gpu_entry(f, 0, "0000:3b:00.0")["name"] == "B"  # CUDA_VISIBLE_DEVICES=1
    assert _gpu.gpu_entry(f, 1)["name"] == "B"
    assert _gpu.gpu_entry(f, 5) == {}
    assert _gpu.gpu_entry(Facts(), 0) == {}


def test_bus_id_from_torch_properties():
    class Props:
        pci_domain_id, pci_bus_id, pci_device_id = 0, 0x19, 0
    assert _gpu.bus_id(Props()) == "0000:19:00.0"
    assert _gpu.bus_id(object()) is None


def test_pcie_link_prefers_nvml_then_sysfs():
    entry = {"pcie_gen_max": None, "sysfs_pcie_gen_max": 4, "pcie_width_max": 16, "pcie_gen": 1, "pcie_width": 16}
    link = _gpu.pcie_link(entry)
    assert (link["gen_max"], link["width_max"], link["gen"]) == (4, 16, 1)
    notes = _gpu.link_notes(link)
    assert notes and "Gen1 x16" in notes[0] and "max Gen4 x16" in notes[0]
    assert _gpu.link_notes(_gpu.pcie_link({"pcie_gen_max": 5, "pcie_width_max": 16, "pcie_gen": 5,
                                           "pcie_width": 16})) == []


def test_recorded_h100_facts_give_the_spec_and_the_link_peak(fixtures):
    facts = Run.load(fixtures / "runs" / "h100-doctor.json").facts
    entry = _gpu.gpu_entry(facts, 0)
    spec = _gpu.spec_for(entry)
    assert spec is not None and spec.id == "h100-sxm"
    assert _gpu.peak_tflops(spec, "bf16") == pytest.approx(989.4)
    assert _gpu.peak_tflops(None, "bf16") is None
    link = _gpu.pcie_link(entry)
    assert _gpu.pcie_peak(link["gen_max"], link["width_max"]) == pytest.approx(63.02, abs=0.01)
    assert _gpu.pcie_peak(None, 16) is None
    assert _gpu.l2_bytes(spec) == 50_000_000
    assert _gpu.l2_bytes(None) == _gpu.DEFAULT_L2_BYTES
    assert "H100" in _gpu.source(spec, "dense bf16 peak")


def test_unknown_gpu_has_no_spec_and_says_so():
    assert _gpu.spec_for({"name": "NVIDIA Imaginary 9000"}) is None
    assert _gpu.spec_for(None) is None
    assert "not in the spec table" in _gpu.spec_notes(None, {"name": "X"})[0]


def test_practical_ceilings_come_from_the_spec_table():
    assert _gpu.practical("gemm_bf16") == pytest.approx(0.8)
    assert _gpu.practical("pcie_pinned") == pytest.approx(0.85)
    assert _gpu.practical("no_such_key") is None


def test_limiting_reasons_ignore_idle():
    assert _gpu.limiting_reasons(0x1) == []  # gpu_idle
    assert _gpu.limiting_reasons(0x4 | 0x40) == ["power cap", "thermal (hardware)"]
    assert _gpu.limiting_reasons({"error": "Not Supported"}) == []


def test_telemetry_notes_count_other_processes():
    me = os.getpid()
    assert _gpu.telemetry_notes({"compute_pids": [me]}, {"compute_pids": [me]}) == []
    busy = _gpu.telemetry_notes({"compute_pids": [me, 4242]}, {"compute_pids": [me]})
    assert len(busy) == 1 and "1 other process" in busy[0]
    # In a container NVML lists host PIDs: ours is not among them, so one PID is taken to be ours.
    assert _gpu.telemetry_notes({"compute_pids": [98765]}, {}) == []
    assert "1 other" in _gpu.telemetry_notes({"compute_pids": [98765, 98766]}, {})[0]
    assert _gpu.telemetry_notes({"error": "NVML could not start"}, {"error": "x"}) == []
    throttled = _gpu.telemetry_notes({}, {"clocks_event_reasons": 0x4, "sm_clock_mhz": 1650})
    assert throttled == ["clocks limited at the end of the run by power cap (SM 1650 MHz)"]


def test_measurement_keeps_samples_and_takes_the_median():
    m = _gpu.measurement("hbm", "hbm.copy", [0.002, 0.001, 0.003], lambda s: 1.0 / s, "GB/s", {"x": 1})
    assert m.value == pytest.approx(500.0)  # 1 / median 0.002
    assert m.samples == [0.002, 0.001, 0.003] and m.stats["n"] == 3 and m.method_version == 1
    assert any("noisy" in n for n in m.notes)
    tel = {"before": {"sm_clock_mhz": 1980}, "after": {"sm_clock_mhz": 1755}, "notes": ["clocks limited"]}
    _gpu.finish([m], tel)
    assert m.telemetry == {"before": {"sm_clock_mhz": 1980}, "after": {"sm_clock_mhz": 1755}}
    assert "clocks limited" in m.notes
    s = _gpu.skip("hbm", "hbm.read", "no room")
    _gpu.finish([s], tel)
    assert s.status == "skipped" and s.telemetry == {}
    assert _gpu.judged(s, 100.0, "x", 0.9).verdict == ""


def _gemm(tflops_per_sample):
    """A GEMM measurement as gemm.figure builds it: per-sample times for 1e12 FLOPs, value at the median."""
    import statistics
    from perfstack.model import Measurement
    samples = [1e12 / (t * 1e12) for t in tflops_per_sample]
    return Measurement(bench="gemm", name="gemm.tf32.ref", value=1e12 / statistics.median(samples) / 1e12,
                       unit="TFLOP/s", samples=samples)


# what _gpu.sampled hands finish for a run that ended at the power cap: the clock-event bit and its note
CAP_MASK = 1 << _gpu.EVENT_BITS.index("sw_power_cap")
CAPPED = {"after": {"clocks_event_reasons": CAP_MASK},
          "notes": ["clocks limited at the end of the run by power cap (SM 1590 MHz)"]}


def test_a_run_the_power_cap_slowed_midway_names_its_fastest_sample():
    # measured on an H100: TF32 ~408 TFLOP/s for its first samples, ~364 once the cap lowered the clocks
    m = _gpu.finish([_gemm([396, 401, 408, 398, 381] + [364] * 15)], CAPPED)[0]
    note = [n for n in m.notes if n.startswith("power cap bit")]
    assert len(note) == 1 and "fastest sample 408 TFLOP/s" in note[0] and "median 364" in note[0]


def test_no_step_in_the_samples_or_no_cap_adds_nothing():
    steady = _gpu.finish([_gemm([405, 407, 408, 406] * 5)], CAPPED)[0]
    assert not any(n.startswith("power cap bit") for n in steady.notes)
    uncapped = _gpu.finish([_gemm([408] * 4 + [364] * 16)], {"after": {"clocks_event_reasons": 0}, "notes": []})[0]
    assert not any(n.startswith("power cap bit") for n in uncapped.notes)
