"""The GPUs as the NVIDIA driver reports them: identity, health, clocks, power, PCIe link, NUMA node.

Two sources, merged per GPU by PCI bus id: ``nvidia-smi -q -x`` and NVML (nvidia-ml-py). NVML
wins field by field where both answer; either alone is enough. Every per-GPU field is a value
or None ("this driver/GPU did not say"). sysfs adds the NUMA node and a second view of the link.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, Callable

from perfstack.errors import InputError
from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe

KEYS = ("driver.version", "driver.cuda_version", "gpu.count", "gpu.list", "gpu.summary")
SMI = ("nvidia-smi", "-q", "-x")
# nvidia-smi -q on an 8-GPU host takes a few seconds; a GPU that fell off the bus can hang it.
SMI_TIMEOUT = 45.0
NA = {"", "n/a", "not supported", "not available", "unknown", "unknown error", "none",
      "insufficient permissions", "requested functionality has been deprecated"}
# Bit i of NVML's clocks-event mask, named as nvidia-smi names them (without the prefix).
EVENT_BITS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
              "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clocks_setting")
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
GTS_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


# -- value helpers (shared by the XML and NVML readers) -------------------------------------
def norm_bus_id(text: Any) -> str | None:
    """'00000000:19:00.0' (nvidia-smi, NVML) or '0000:19:00' (Xid lines) -> '0000:19:00.0'."""
    if not isinstance(text, str):
        return None
    m = re.fullmatch(r"(?:PCI:)?(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?",
                     text.strip())
    if not m:
        return None
    dom, bus, dev, fn = m.groups()
    return f"{int(dom or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn or '0'}"


def _text(el: ET.Element | None, path: str) -> str | None:
    """The stripped text at ``path``; None for absent, N/A, [Not Supported] and friends."""
    node = el.find(path) if el is not None else None
    if node is None or node.text is None:
        return None
    t = node.text.strip()
    return None if t.strip("[]").strip().lower() in NA else t


def _leading_number(s: str | None) -> float | None:
    """The number an nvidia-smi value starts with: '350.00 W' -> 350.0, '32.0 GT/s PCIe' -> 32.0; None without one."""
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", s) if s else None
    return float(m.group(1)) if m else None


def _int(s: str | None) -> int | None:
    v = _leading_number(s)
    return int(v) if v is not None else None


def _flag(s: str | None) -> bool | None:
    """Enabled/Disabled, Active/Not Active, Yes/No -> bool."""
    if s is None:
        return None
    return {"enabled": True, "active": True, "yes": True, "disabled": False, "not active": False,
            "no": False}.get(s.lower())


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


# -- nvidia-smi -q -x -----------------------------------------------------------------------
def parse_smi_xml(text: str) -> dict[str, Any]:
    """``nvidia-smi -q -x`` -> {"driver_version", "cuda_version", "attached_gpus", "gpus": [...]}."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise Malformed(f"not valid XML (line {e.position[0]})") from None
    if root.tag != "nvidia_smi_log":
        raise Malformed(f"not nvidia-smi XML (root element <{root.tag}>)")
    gpus = [_smi_gpu(g, i) for i, g in enumerate(root.findall("gpu"))]
    return {"driver_version": _text(root, "driver_version"), "cuda_version": _text(root, "cuda_version"),
            "attached_gpus": _int(_text(root, "attached_gpus")), "gpus": gpus}


def _smi_gpu(g: ET.Element, position: int) -> dict[str, Any]:
    t = lambda path: _text(g, path)  # noqa: E731
    link = "pci/pci_gpu_link_info/"
    # Newer drivers (R530+) moved power into gpu_power_readings and renamed the limit fields.
    power = g.find("gpu_power_readings")
    power = power if power is not None else g.find("power_readings")
    events = g.find("clocks_event_reasons")
    events = events if events is not None else g.find("clocks_throttle_reasons")
    mib = _int(t("fb_memory_usage/total"))
    temp = _int(t("temperature/gpu_temp"))
    # R565+ Hopper reports thresholds relative to T.Limit: slowdown is at headroom == slow threshold.
    headroom, slow_rel = _int(t("temperature/gpu_temp_tlimit")), _int(t("temperature/gpu_temp_slow_tlimit_threshold"))
    slowdown = _int(t("temperature/gpu_temp_slow_threshold"))
    if slowdown is None and None not in (temp, headroom, slow_rel):
        slowdown = temp + headroom - slow_rel  # type: ignore[operator]
    procs = g.findall("processes/process_info")
    types = [(_text(p, "type") or "") for p in procs]
    names = [(_text(p, "process_name") or "") for p in procs]
    return {
        "index": position,
        "name": t("product_name"),
        "pci_bus_id": norm_bus_id(t("pci/pci_bus_id") or g.get("id")),
        "compute_capability": None,  # not in the XML; NVML supplies it
        "memory_total_bytes": mib * 2**20 if mib is not None else None,
        "persistence_mode": _flag(t("persistence_mode")),
        "compute_mode": t("compute_mode"),
        "mig_current": _flag(t("mig_mode/current_mig")),
        "mig_pending": _flag(t("mig_mode/pending_mig")),
        "ecc_current": _flag(t("ecc_mode/current_ecc")),
        "ecc_pending": _flag(t("ecc_mode/pending_ecc")),
        **_ecc_counts(g.find("ecc_errors")),
        "retired_pages": _retired(g),
        "retired_pending": _flag(_first(t("retired_pages/pending_retirement"), t("retired_pages/pending_blacklist"))),
        "remapped_uncorrected": _int(t("remapped_rows/remapped_row_unc")),
        "remapped_corrected": _int(t("remapped_rows/remapped_row_corr")),
        "remap_pending": _flag(t("remapped_rows/remapped_row_pending")),
        "remap_failure": _flag(t("remapped_rows/remapped_row_failure")),
        "clocks_event_reasons": None if events is None else sorted(
            re.sub(r"^clocks_(event|throttle)_reason_", "", e.tag) for e in events if _flag(_text(e, ".")) is True),
        "utilization_gpu": _int(t("utilization/gpu_util")),
        "power_limit_w": _leading_number(_first(_text(power, "current_power_limit"), _text(power, "enforced_power_limit"),
                                     _text(power, "power_limit"))),
        "power_default_w": _leading_number(_text(power, "default_power_limit")),
        "power_max_w": _leading_number(_text(power, "max_power_limit")),
        "power_draw_w": _leading_number(_first(_text(power, "average_power_draw"), _text(power, "power_draw"))),
        "temperature_c": temp,
        "temp_slowdown_c": slowdown,
        "sm_clock_mhz": _int(t("clocks/sm_clock")),
        "sm_clock_max_mhz": _int(t("max_clocks/sm_clock")),
        "app_clock_mhz": _int(t("applications_clocks/graphics_clock")),
        "app_clock_default_mhz": _int(t("default_applications_clocks/graphics_clock")),
        "pcie_gen": _int(t(link + "pcie_gen/current_link_gen")),
        "pcie_gen_max": _int(t(link + "pcie_gen/max_link_gen")),
        "pcie_gen_gpu_max": _int(t(link + "pcie_gen/max_device_link_gen")),
        "pcie_gen_host_max": _int(t(link + "pcie_gen/max_host_link_gen")),
        "pcie_width": _int(t(link + "link_widths/current_link_width")),
        "pcie_width_max": _int(t(link + "link_widths/max_link_width")),
        "compute_processes": None if g.find("processes") is None else sum("C" in x for x in types),
        "mps": any(x.startswith("M") for x in types) or any(n.endswith("nvidia-cuda-mps-server") for n in names),
        "fabric_state": t("fabric/state"),
        "fabric_status": t("fabric/status"),
    }


def _ecc_counts(ecc: ET.Element | None) -> dict[str, int | None]:
    """Sum the error counters of each section. Names differ by generation: sram_/dram_(un)correctable
    (Hopper), single_bit/double_bit totals (Volta/Ampere)."""
    out: dict[str, int | None] = {}
    for kind in ("volatile", "aggregate"):
        sec = ecc.find(kind) if ecc is not None else None
        corr = unc = None
        if sec is not None:
            for leaf in sec.iter():
                v = _int(_text(leaf, ".")) if len(leaf) == 0 else None
                tag = leaf.tag
                if v is None or "threshold" in tag:
                    continue
                if "uncorrectable" in tag:
                    unc = (unc or 0) + v
                elif "correctable" in tag:
                    corr = (corr or 0) + v
            old_sbe, old_dbe = _int(_text(sec, "single_bit/total")), _int(_text(sec, "double_bit/total"))
            corr, unc = _first(corr, old_sbe), _first(unc, old_dbe)
        out[f"ecc_{kind}_corrected"], out[f"ecc_{kind}_uncorrected"] = corr, unc
    return out


def _retired(g: ET.Element) -> int | None:
    counts = [_int(_text(g, f"retired_pages/{k}/retired_count"))
              for k in ("multiple_single_bit_retirement", "double_bit_retirement")]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


# -- NVML (host.nvml(), nvml.json in a bundle) ----------------------------------------------
def parse_nvml(data: dict[str, Any], wrong: list[str] | None = None) -> dict[str, Any]:
    """host.nvml()'s dict -> the same shape as parse_smi_xml. Error fields become None; so do values of
    the wrong type (a hand-edited nvml.json), each named in ``wrong`` so that a bundle can be refused."""
    gpus = data.get("gpus", [])
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        raise Malformed("not in the expected format ('gpus' must be a list of objects)")
    w = wrong if wrong is not None else []
    cuda, count = _field(data, "cuda_driver_version", int, w), _field(data, "device_count", int, w)
    return {"driver_version": _field(data, "driver_version", str, w),
            "cuda_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda is not None else None,
            "attached_gpus": count if count is not None else (len(gpus) if "device_count" not in data else None),
            "gpus": [_nvml_gpu(g, w, f"gpus[{n}].") for n, g in enumerate(gpus)]}


def _typed(v: Any, kind: type) -> Any:
    """``v`` when it is of ``kind`` (bool is not an int here), else None: NVML errors are dicts."""
    if kind is int:
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if kind is float:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return v if isinstance(v, kind) else None


def _field(d: dict[str, Any], k: str, kind: Any, wrong: list[str], where: str = "") -> Any:
    """``d[k]`` when it is of ``kind`` (a type, or a predicate); None when absent, None or an NVML error
    (``{"error": ...}``); None and named in ``wrong`` when it is anything else."""
    v = d.get(k)
    ok = kind(v) if not isinstance(kind, type) else _typed(v, kind) is not None
    if ok:
        return _typed(v, kind) if isinstance(kind, type) else v
    if v is not None and not (isinstance(v, dict) and isinstance(v.get("error"), str)):
        wrong.append(f"{where}{k} is {type(v).__name__}")
    return None


def _int_list(n: int | None) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and (n is None or len(v) == n) and all(_typed(x, int) is not None for x in v)


def _bit(flags: list[int] | None, k: int) -> bool | None:
    """Flag ``k`` of an NVML (current, pending, ...) answer, None where NVML gave none."""
    return bool(flags[k]) if flags else None


def _nvml_gpu(g: dict[str, Any], wrong: list[str] | None = None, where: str = "") -> dict[str, Any]:
    w = wrong if wrong is not None else []
    i = lambda k: _field(g, k, int, w, where)  # noqa: E731
    watts = lambda k: (x / 1000 if (x := _field(g, k, float, w, where)) is not None else None)  # noqa: E731
    cc, mig, ecc, rows = (_field(g, k, _int_list(n), w, where) for k, n in (
        ("compute_capability", 2), ("mig_mode", 2), ("ecc_mode", 2), ("remapped_rows", 4)))
    mask, links, numa = i("clocks_event_reasons"), _field(g, "nvlink_states", _int_list(None), w, where), i("numa_node")
    persistence = i("persistence_mode")
    bus = _field(g, "pci_bus_id", str, w, where)
    for k in ("uuid", "serial"):
        _field(g, k, str, w, where)
    return {
        "index": i("index"),
        "nvml_error": _field(g, "error", str, w, where),
        "name": _field(g, "name", str, w, where),
        "pci_bus_id": norm_bus_id(bus),
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        "memory_total_bytes": i("memory_total"),
        "persistence_mode": None if persistence is None else bool(persistence),
        "compute_mode": COMPUTE_MODES.get(i("compute_mode")),
        "mig_current": _bit(mig, 0), "mig_pending": _bit(mig, 1),
        "ecc_current": _bit(ecc, 0), "ecc_pending": _bit(ecc, 1),
        **{f"ecc_{k}_{e}": i(f"ecc_{k}_{e}") for k in ("volatile", "aggregate") for e in ("corrected", "uncorrected")},
        "remapped_corrected": rows[0] if rows else None, "remapped_uncorrected": rows[1] if rows else None,
        "remap_pending": _bit(rows, 2), "remap_failure": _bit(rows, 3),
        "clocks_event_reasons": None if mask is None else sorted(n for b, n in enumerate(EVENT_BITS) if mask & (1 << b)),
        "utilization_gpu": i("utilization_gpu"),
        "power_limit_w": watts("power_limit_mw"), "power_default_w": watts("power_default_mw"),
        "power_draw_w": watts("power_usage_mw"),
        "temperature_c": i("temperature_c"), "temp_slowdown_c": i("temp_slowdown_c"),
        "sm_clock_mhz": i("sm_clock_mhz"), "sm_clock_max_mhz": i("sm_clock_max_mhz"),
        "app_clock_mhz": i("app_clock_mhz"), "app_clock_default_mhz": i("app_clock_default_mhz"),
        "pcie_gen": i("pcie_gen"), "pcie_gen_max": i("pcie_gen_max"), "pcie_gen_gpu_max": i("pcie_gen_gpu_max"),
        "pcie_width": i("pcie_width"), "pcie_width_max": i("pcie_width_max"),
        "compute_processes": i("compute_processes"),
        "nvml_numa_node": numa if numa is not None and numa >= 0 else None,
        "nvlink_active": sum(1 for x in links if x) if links is not None else None,
        "nvlink_links": len(links) if links is not None else None,
    }


# Every field either source can give; a GPU dict always has them all.
FIELDS = tuple(sorted(set(_smi_gpu(ET.Element("gpu"), 0)) | set(_nvml_gpu({})) - {"nvml_numa_node"}))


def merge(smi: dict[str, Any] | None, nvml: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One dict per GPU: the XML's fields, overridden by every field NVML answered. Both sources
    list GPUs in PCI bus order, so a GPU whose bus id NVML could not read is matched by position."""
    out = [dict(g) for g in (smi or {}).get("gpus", [])]
    nvml_gpus = (nvml or {}).get("gpus", [])
    by_bus = {g["pci_bus_id"]: g for g in out if g["pci_bus_id"]}
    for pos, n in enumerate(nvml_gpus):
        into = by_bus.get(n["pci_bus_id"]) if n["pci_bus_id"] else (out[pos] if pos < len(out) else None)
        if into is None:
            into = {}
            out.append(into)
        into.update({k: v for k, v in n.items() if v is not None})
    for g in out:  # every GPU carries every field, None where no source answered
        for k in FIELDS:
            g.setdefault(k, None)
    return sorted(out, key=lambda g: (not isinstance(g["index"], int), g["index"] or 0))


# -- the probe ------------------------------------------------------------------------------
def parse_sysfs_speed(text: str) -> int | None:
    """'32.0 GT/s PCIe' (or '8 GT/s', or 'Unknown') -> PCIe generation."""
    v = _leading_number(text)
    return GTS_TO_GEN.get(v) if v is not None else None


def _sysfs(c: Collector, bus: str, name: str, parse: Callable[[str], Any]) -> Any:
    try:
        return c.parsed(f"/sys/bus/pci/devices/{bus}/{name}", parse)
    except Unavailable:
        return None


def _nvml(c: Collector) -> tuple[dict[str, Any] | None, str]:
    try:
        data = c.host.nvml()
    except Unavailable as e:
        return None, e.reason
    wrong: list[str] = []
    try:
        parsed = parse_nvml(data, wrong)
        if wrong:  # a live NVML's odd field is only not available; a bundle's is a file someone edited
            refused = c.host.bad_file("nvml.json", f"not in the expected format (field {wrong[0]}"
                                      + (f", and {len(wrong) - 1} more" if len(wrong) > 1 else "") + ")")
            if refused is not None:
                raise refused
        return parsed, ""
    except InputError:
        raise
    except Exception as e:
        detail = str(e) if isinstance(e, Malformed) else f"not in the expected format ({type(e).__name__}: {e})"
        refused = c.host.bad_file("nvml.json", detail)
        if refused is not None:
            raise refused from None
        return None, f"NVML answer is {detail}"


def summary(gpus: list[dict[str, Any]], driver: str | None, cuda: str | None) -> str:
    names: dict[str, int] = {}
    for g in gpus:
        names[g.get("name") or "unknown GPU"] = names.get(g.get("name") or "unknown GPU", 0) + 1
    parts = [f"{n}× {name}" for name, n in names.items()] or ["no NVIDIA GPU"]
    parts += [f"driver {driver}"] if driver else []
    parts += [f"CUDA {cuda}"] if cuda else []
    return " · ".join(parts)


@probe
def gpu(c: Collector) -> None:
    """Sources: nvidia-smi -q -x; NVML (nvml.json in a bundle); /sys/bus/pci/devices/<bus>/{numa_node,
    current_link_speed,max_link_speed,current_link_width,max_link_width}.
    Shell: nvidia-smi -q; cat /sys/bus/pci/devices/0000:19:00.0/numa_node"""
    try:
        smi, smi_reason = c.command(SMI, parse_smi_xml, timeout=SMI_TIMEOUT), ""
    except Unavailable as e:
        smi, smi_reason = None, e.reason
        if "No devices were found" in e.reason:  # the driver is up and positively sees no GPU
            smi = {"driver_version": None, "cuda_version": None, "attached_gpus": 0, "gpus": []}
    nv, nv_reason = _nvml(c)
    sources = "; ".join(s for s, ok in ((" ".join(SMI), smi), ("nvml", nv)) if ok)
    if smi is None and nv is None:
        c.missing_all([k for k in KEYS if k != "driver.version"], f"{smi_reason}; {nv_reason}", " ".join(SMI))
        _driver_from_proc(c, f"{smi_reason}; {nv_reason}")
        return
    gpus = merge(smi, nv)
    for i, g in enumerate(gpus):
        _from_sysfs(c, g, i)
    driver = _first((nv or {}).get("driver_version"), (smi or {}).get("driver_version"))
    cuda = _first((nv or {}).get("cuda_version"), (smi or {}).get("cuda_version"))
    count = _first((nv or {}).get("attached_gpus"), (smi or {}).get("attached_gpus"))
    for key, value in (("driver.version", driver), ("driver.cuda_version", cuda)):
        if value is None and key == "driver.version":
            _driver_from_proc(c, f"neither nvidia-smi nor NVML reported it ({sources})")
        elif value is None:
            c.missing(key, "neither nvidia-smi nor NVML reported it", sources)
        else:
            c.put(key, value, sources)
    if isinstance(count, int) or gpus:
        c.put("gpu.count", count if isinstance(count, int) else len(gpus), sources)
    else:
        c.missing("gpu.count", f"the driver did not say how many GPUs it sees; {smi_reason or nv_reason}", sources)
    c.put("gpu.list", gpus, sources)
    c.put("gpu.summary", summary(gpus, driver, cuda), sources)


def _from_sysfs(c: Collector, g: dict[str, Any], position: int) -> None:
    """The GPU's NUMA node and PCIe link as the kernel sees them, into ``g`` (its index too, if none)."""
    g["index"] = g.get("index") if isinstance(g.get("index"), int) else position
    bus = g.get("pci_bus_id")
    node = _sysfs(c, bus, "numa_node", int) if bus else None
    # -1: the firmware did not tell the kernel which node the slot hangs off.
    nvml_node = g.pop("nvml_numa_node", None)
    g["numa_node"] = node if isinstance(node, int) and node >= 0 else nvml_node
    for key, name, parse in (("sysfs_pcie_gen", "current_link_speed", parse_sysfs_speed),
                             ("sysfs_pcie_gen_max", "max_link_speed", parse_sysfs_speed),
                             ("sysfs_pcie_width", "current_link_width", _int_or_none),
                             ("sysfs_pcie_width_max", "max_link_width", _int_or_none)):
        g[key] = _sysfs(c, bus, name, parse) if bus else None


DRIVER_PROC = "/proc/driver/nvidia/version"


def parse_driver_proc(text: str) -> str:
    """/proc/driver/nvidia/version: 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue ...'
    (the open kernel modules say 'Open Kernel Module for x86_64  580.95.05 ...')."""
    m = re.search(r"NVRM version:.*?Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\b", text)
    if not m:
        raise Malformed(f"no driver version in it: {text.strip()[:80]!r}")
    return m.group(1)


def _driver_from_proc(c: Collector, why_not_smi: str) -> None:
    """The driver version from the kernel module when neither nvidia-smi nor NVML answered (a
    hand-made bundle, or a wedged nvidia-smi): the driver's own file says which one is loaded."""
    try:
        c.put("driver.version", c.parsed(DRIVER_PROC, parse_driver_proc), DRIVER_PROC)
    except Unavailable as e:
        c.missing("driver.version", f"{why_not_smi}; {e.reason}", " ".join(SMI))


def _int_or_none(text: str) -> int | None:
    """sysfs link width: '16'; some virtual and older devices say '0' or nothing useful."""
    v = _int(text)
    return v if v else None
