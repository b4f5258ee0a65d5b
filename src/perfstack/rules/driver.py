"""Driver and GPU health: modules, enumeration, persistence, Xid faults, ECC, clocks, power, MIG.

Values are instantaneous samples read while perfstack ran; checks that depend on load (throttle,
temperature) say so, and the pcie-topology checks reuse ``gpu_list`` and ``label`` from here.
"""

from __future__ import annotations

import re
from typing import Any

from perfstack.model import Facts, NotApplicable, NotChecked
from perfstack.rules.common import busy, gpu_list, label
from perfstack.rules.registry import Hit, Hits, check
from perfstack.rules.shell import sh
from perfstack.sources import INFRA_ARTICLE

RESET = "drain the GPU, then reset it (nvidia-smi -r -i N) or reboot"


def reporting(gpus: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    """The GPUs that reported all of ``keys``; NotChecked when none did."""
    known = [g for g in gpus if all(g.get(k) is not None for k in keys)]
    if not known:
        raise NotChecked(f"the driver reported no {' / '.join(keys)} for any GPU")
    return known


def watts(w: float | None) -> str:
    return "? W" if w is None else f"{w:.0f} W"


@check("nvidia-modules", "driver", "critical", "NVIDIA kernel modules not loaded",
       doc="Reads the loaded modules (/proc/modules). Critical when NVIDIA GPUs sit on the PCI bus but "
           "the nvidia module is not loaded, or when the driver refuses to talk because the kernel module "
           "and the user-space library have different versions; warning when nvidia_uvm is absent.",
       why="The driver is several modules: nvidia (core), nvidia_uvm (unified memory, needed by every "
           "CUDA program), nvidia_modeset and nvidia_drm. Without nvidia no GPU is usable; without "
           "nvidia_uvm CUDA fails to initialise inside containers, which cannot load it themselves. A "
           "driver upgraded without a reboot leaves the old module loaded: NVML and CUDA then fail with "
           "'Driver/library version mismatch'.",
       fix="modprobe nvidia && modprobe nvidia_uvm on the host (or reinstall the driver); after a driver "
           "upgrade, reboot so the new kernel module loads",
       refs=f"Book ch. 3 (GPU driver); {INFRA_ARTICLE} (§2 The driver layer)")
def nvidia_modules(f: Facts) -> Hits:
    on_bus = f.value("pcie.nvidia_gpus") or []
    count_fact = f.get("gpu.count")
    reason = count_fact.reason if count_fact is not None and not count_fact.available else ""
    mismatch = [e for e in f.value("kernel_log.nvrm_errors") or [] if e.get("kind") == "api-mismatch"]
    hits: list[Hit] = []
    if "mismatch" in reason.lower() or mismatch:
        hits.append(Hit(f"the NVIDIA kernel module and user-space driver versions differ: "
                        f"{reason or mismatch[0].get('message', '')}", host_action=True,
                        fix="reboot the host so the kernel module matches the installed driver (or unload and "
                            "reload the nvidia modules when no process uses the GPU)"))
    elif not on_bus and not f.value("gpu.count"):
        raise NotApplicable("no NVIDIA GPU on the PCI bus")
    modules = set(f.need("kernel.modules"))
    if "nvidia" not in modules:
        hits.append(Hit(f"{len(on_bus) or 'some'} NVIDIA GPU(s) on the PCI bus, but the nvidia kernel module is "
                        "not loaded", host_action=True, commands=["modprobe nvidia"]))
    elif "nvidia_uvm" not in modules:
        hits.append(Hit("nvidia is loaded but nvidia_uvm is not: CUDA loads it on first use on a bare host, "
                        "but a container cannot", severity="warning", host_action=True,
                        commands=["modprobe nvidia_uvm"]))
    yield from hits


@check("gpu-enumeration", "driver", "critical", "GPUs on the PCI bus that the driver does not see",
       doc="Compares the NVIDIA GPUs on the PCI bus (sysfs class 0x0300/0x0302, vendor 0x10de) with the GPUs "
           "the driver reports, and reports GPUs NVML cannot open or the kernel log says failed to "
           "initialise. Inside a container the bus shows the host's GPUs, so a subset is only info there.",
       why="A GPU that fell off the bus or failed to initialise is missing from every job: nothing above "
           "this layer matters until it is back.",
       fix="look for Xid 79 and RmInitAdapter errors in dmesg; check power, cooling and seating; reset the "
           "GPU or reboot; drain the node if it recurs",
       refs=f"{INFRA_ARTICLE} (§2 The driver layer, §10 Debugging order)")
def gpu_enumeration(f: Facts) -> Hits:
    on_bus = f.need("pcie.nvidia_gpus")
    count = f.value("gpu.count")
    if not on_bus and not count:
        raise NotApplicable("no NVIDIA GPU on the PCI bus")
    if count is None:
        fact = f.get("gpu.count")
        yield Hit(f"{len(on_bus)} NVIDIA GPU(s) on the PCI bus ({', '.join(on_bus)}), but the driver answered "
                  f"nothing: {fact.reason if fact is not None else 'not collected'}")
        return
    gpus = f.value("gpu.list") or []
    seen = {g.get("pci_bus_id") for g in gpus}
    unseen = [b for b in on_bus if b not in seen]
    if unseen and count < len(on_bus):
        in_container = f.value("container.in_container")
        yield Hit(f"{len(on_bus)} NVIDIA GPUs on the PCI bus, the driver reports {count}; not seen: "
                  f"{', '.join(unseen)}" + (" (inside a container, which may be given a subset)" if in_container else ""),
                  severity="info" if in_container else None)
    for g in gpus:
        if g.get("nvml_error"):
            yield Hit(f"{label(g)}: NVML cannot open it: {g['nvml_error']}", subject=f"gpu{g.get('index')}")
    for e in f.value("kernel_log.nvrm_errors") or []:
        if e.get("kind") == "init-failed":
            yield Hit(f"kernel log: RmInitAdapter failed ×{e.get('count')} for {e.get('bus_id') or 'a GPU'} "
                      "(the driver could not initialise it)")


@check("gpu-persistence-mode", "driver", "warning", "GPU persistence mode off",
       doc="Reads each GPU's persistence mode (nvidia-smi, NVML) and fires when it is disabled.",
       why="With no process holding the GPU the driver tears its state down; the next CUDA program pays "
           "1-3 s to bring it back, and settings such as application clocks and MIG layout are re-applied. "
           "Invisible in a long training run, costly for short jobs, tests and scale-to-zero serving.",
       fix="systemctl enable --now nvidia-persistenced (nvidia-smi -pm 1 also works but is deprecated from R580)",
       refs=f"Book ch. 3 (GPU persistence mode); {INFRA_ARTICLE} (§2 The driver layer)")
def persistence_mode(f: Facts) -> Hits:
    for g in reporting(gpu_list(f), "persistence_mode"):
        if g["persistence_mode"] is False:
            yield Hit(f"{label(g)}: persistence mode Disabled", subject=f"gpu{g['index']}", host_action=True,
                      commands=["systemctl enable --now nvidia-persistenced || nvidia-smi -pm 1"])


# Xid code -> (fatal?, what it means). Fatal: a hardware, memory or firmware fault that needs the GPU
# reset or serviced. The rest usually follow an application fault. Source: NVIDIA's Xid error documentation.
XID: dict[int, tuple[bool, str]] = {
    8: (False, "GPU stopped processing (channel timeout)"),
    13: (False, "graphics engine exception: usually an out-of-range access in a kernel"),
    31: (False, "GPU memory page fault: usually an illegal address in the application, rarely bad memory"),
    32: (False, "corrupted push-buffer stream"),
    38: (False, "driver firmware error"),
    43: (False, "GPU stopped processing: an application faulted and its channel was reset"),
    45: (False, "channel torn down after an earlier error or a killed process"),
    48: (True, "double-bit (uncorrectable) ECC error"),
    61: (False, "internal micro-controller warning"),
    62: (True, "internal micro-controller halted"),
    63: (True, "ECC page retirement or row remap recorded: reset the GPU to apply it"),
    64: (True, "ECC page retirement or row remap could not be recorded"),
    68: (False, "video decoder exception"),
    69: (False, "graphics engine class error: usually an application fault"),
    74: (True, "NVLink error"),
    79: (True, "GPU fell off the PCIe bus (power, thermal or link failure)"),
    92: (True, "high single-bit ECC error rate"),
    94: (True, "contained ECC error: the affected application was stopped"),
    95: (True, "uncontained ECC error: every application on the GPU is affected; reset required"),
    109: (False, "context-switch timeout"),
    119: (True, "GSP firmware RPC timeout"),
    120: (True, "GSP firmware error"),
    140: (True, "unrecovered ECC error"),
    143: (True, "GPU initialisation failure"),
    154: (True, "the driver changed the GPU's recovery action (reset, reboot or drain required)"),
}


@check("gpu-xid-errors", "driver", "critical", "NVIDIA Xid errors in the kernel log",
       doc="Parses 'NVRM: Xid' and 'has fallen off the bus' lines from dmesg and groups them per GPU. "
           "Critical for hardware, memory, NVLink and firmware Xids (48, 62-64, 74, 79, 92, 94, 95, 119, "
           "120, 140, 143, 154); warning for application-level ones (13, 31, 43, 45, 69 ...). dmesg is a "
           "ring buffer: on a long-running host old events may be gone.",
       why="Xids are the driver's hardware-fault channel and their codes mean the same across driver "
           "versions. A GPU throwing fatal Xids produces crashes, hangs or wrong results: stop tuning "
           "and fix the hardware. In Meta's 54-day Llama 3 405B run, faulty GPUs and HBM caused 47% of "
           "interruptions.",
       fix="fatal Xids: " + RESET + ", check power and cooling, RMA if it recurs; application Xids: rerun "
           "with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find the faulting kernel",
       refs=f"{INFRA_ARTICLE} (§1 The kernel layer: Xid); Book ch. 4 (Llama 3 failure breakdown); NVIDIA Xid error documentation")
def xid_errors(f: Facts) -> Hits:
    events = list(f.need("kernel_log.xid"))
    fallen = f.value("kernel_log.fallen_off_bus") or []
    for bus in fallen:  # a lost GPU sometimes logs the plain message without an Xid 79 line
        if not any(e["code"] == 79 and e["bus_id"] == bus for e in events):
            events.append({"code": 79, "bus_id": bus, "count": 1, "message": "GPU has fallen off the bus"})
    if not events and not f.value("gpu.count") and not f.value("pcie.nvidia_gpus"):
        gpu_list(f)  # raises: no GPU here, or the driver could not be asked
    names = {g.get("pci_bus_id"): g for g in f.value("gpu.list") or []}
    oldest = f.value("kernel_log.oldest_s")
    span = "" if oldest is None or oldest < 5 else f" (kernel log kept from {oldest:.0f} s after boot)"
    by_bus: dict[Any, list[dict[str, Any]]] = {}
    for e in events:
        by_bus.setdefault(e["bus_id"], []).append(e)
    for bus, evs in sorted(by_bus.items(), key=lambda kv: str(kv[0])):
        g = names.get(bus)
        who = label(g) if g else f"PCI {bus}"
        fatal = any(XID.get(e["code"], (False, ""))[0] for e in evs)
        parts = [f"Xid {e['code']} ×{e['count']}: {XID.get(e['code'], (False, e['message'] or 'see the Xid catalog'))[1]}"
                 for e in sorted(evs, key=lambda e: -e["count"])]
        total = sum(e["count"] for e in evs)
        yield Hit(f"{who}: {total} Xid event(s) — " + "; ".join(parts) + span,
                  severity=None if fatal else "warning", subject=f"gpu{g['index']}" if g else str(bus))


@check("gpu-ecc-errors", "driver", "critical", "GPU memory errors (ECC, row remapping)",
       doc="Reads ECC error counters and row-remapping / page-retirement state. Critical: uncorrectable "
           "errors since the driver loaded (volatile), a row-remap failure, or a remap/retirement pending a "
           "reset. Warning: uncorrectable errors only in the lifetime (aggregate) count, or more than 1000 "
           "corrected errors since the driver loaded (perfstack's threshold).",
       why="An uncorrectable error kills the job that touched the memory, or worse corrupts results. In "
           "Meta's 54-day Llama 3 405B run, HBM3 faults caused 17.2% of interruptions and SRAM 4.5%. A "
           "pending remap is not active until the GPU is reset.",
       fix=RESET + " to apply pending remaps; nvidia-smi -q -d ECC,ROW_REMAPPER shows the detail; RMA the "
           "GPU on a remap failure or recurring uncorrectable errors",
       refs="Book ch. 4 (Llama 3 failure breakdown)")
def ecc_errors(f: Facts) -> Hits:
    gpus = gpu_list(f)
    keys = ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "remap_failure", "remap_pending",
            "retired_pending", "ecc_volatile_corrected")
    known = [g for g in gpus if any(g.get(k) is not None for k in keys)]
    if not known:
        raise NotChecked("the driver reported no ECC counters (a GPU without ECC, or ECC disabled)")
    for g in known:
        sub = f"gpu{g['index']}"
        bad = [text for text, hit in (
            (f"{g.get('ecc_volatile_uncorrected')} uncorrectable ECC errors since the driver loaded",
             (g.get("ecc_volatile_uncorrected") or 0) > 0),
            ("row remapping FAILED (no spare rows left)", g.get("remap_failure") is True),
            ("a row remap is pending a GPU reset", g.get("remap_pending") is True),
            ("a page retirement is pending a GPU reset", g.get("retired_pending") is True)) if hit]
        if bad:
            yield Hit(f"{label(g)}: " + "; ".join(bad), subject=sub)
        elif (g.get("ecc_aggregate_uncorrected") or 0) > 0:
            yield Hit(f"{label(g)}: {g['ecc_aggregate_uncorrected']} uncorrectable ECC errors in its lifetime "
                      "(none since the driver loaded; remapped rows: "
                      f"{g.get('remapped_uncorrected') if g.get('remapped_uncorrected') is not None else 'n/a'})",
                      severity="warning", subject=sub)
        elif (g.get("ecc_volatile_corrected") or 0) > 1000:
            yield Hit(f"{label(g)}: {g['ecc_volatile_corrected']} corrected ECC errors since the driver loaded",
                      severity="warning", subject=sub)


@check("ecc-mode", "driver", "warning", "GPU ECC disabled or a mode change pending",
       doc="Reads the current and pending ECC mode. Warning when ECC is off on a GPU that supports it; "
           "info when the pending mode differs (it applies at the next GPU reset).",
       why="Turning ECC off frees a little memory and gains a few percent at most, and trades that for "
           "crashes or silent corruption in long jobs; NVIDIA ships data-center GPUs with it on.",
       fix="nvidia-smi -i N -e 1, then reset the GPU or reboot", refs="Book ch. 3 (ECC)")
def ecc_mode(f: Facts) -> Hits:
    for g in reporting(gpu_list(f), "ecc_current"):
        sub = f"gpu{g['index']}"
        if g["ecc_current"] is False:
            yield Hit(f"{label(g)}: ECC Disabled", subject=sub, host_action=True,
                      commands=[sh("nvidia-smi", "-i", g["index"], "-e", "1")])
        elif g.get("ecc_pending") is not None and g["ecc_pending"] != g["ecc_current"]:
            yield Hit(f"{label(g)}: ECC is Enabled now but set to Disabled at the next reset", severity="info",
                      subject=sub, host_action=True, fix=f"nvidia-smi -i {g['index']} -e 1 to keep it on")


HW_REASONS = {"hw_slowdown": "HW slowdown", "hw_thermal_slowdown": "HW thermal slowdown",
              "hw_power_brake_slowdown": "HW power brake (external power signal)"}


@check("gpu-clock-throttle", "driver", "critical", "GPU clocks held down by a throttle reason",
       doc="Reads the clock event (throttle) reasons active at the moment perfstack ran. Critical for HW "
           "slowdown, HW thermal slowdown or HW power brake; warning for SW thermal slowdown, and for the SW "
           "power cap on a busy GPU whose limit is below the board maximum (info when the GPU is simply at "
           "its full board power). An idle GPU reporting 'GPU idle' is normal. One sample: re-run under load.",
       why="Throttled clocks erase every other optimization and make benchmarks drift run to run as the "
           "hardware heats up. HW slowdown usually means overheating, a failing power supply or a "
           "power-brake signal from the chassis.",
       fix="cooling first (airflow, inlet temperature, fans); check the PSU and the chassis power-brake "
           "signal; for power capping restore the limit with nvidia-smi -pl",
       refs="Book ch. 3 (clocks, power)")
def clock_throttle(f: Facts) -> Hits:
    for g in reporting(gpu_list(f), "clocks_event_reasons"):
        active, sub = set(g["clocks_event_reasons"]), f"gpu{g['index']}"
        clocks = (f"; SM clock {g['sm_clock_mhz']} of {g['sm_clock_max_mhz']} MHz"
                  if g.get("sm_clock_mhz") and g.get("sm_clock_max_mhz") else "")
        util = f", {g['utilization_gpu']}% busy" if g.get("utilization_gpu") is not None else ""
        hw = [HW_REASONS[r] for r in sorted(active & set(HW_REASONS))]
        if hw:
            yield Hit(f"{label(g)}: {', '.join(hw)} active{util}{clocks}", subject=sub, host_action=True)
        elif "sw_thermal_slowdown" in active:
            yield Hit(f"{label(g)}: SW thermal slowdown active at {g.get('temperature_c')} °C{util}{clocks}",
                      severity="warning", subject=sub, host_action=True)
        elif "sw_power_cap" in active and busy(g):
            limit, top = g.get("power_limit_w"), g.get("power_max_w")
            capped = limit is not None and top is not None and limit < top - 1
            power = f"; drawing {watts(g.get('power_draw_w'))} at a {watts(limit)} limit" + (
                f" (board max {watts(top)})" if top else "")
            yield Hit(f"{label(g)}: SW power cap active{util}{clocks}{power}" +
                      ("" if capped else ": the GPU is at its full board power, normal for dense math"),
                      severity="warning" if capped else "info", subject=sub, host_action=capped,
                      commands=[sh("nvidia-smi", "-i", g["index"], "-pl", f"{top:g}")] if capped else [])


@check("gpu-power-cap", "driver", "warning", "GPU power limit below its default",
       doc="Compares each GPU's enforced power limit with its default limit; fires when it is lower.",
       why="A lowered limit caps clocks under load. It can be a deliberate perf-per-watt choice (for some "
           "models 80% of the power limit kept nearly the same speed), but compute-bound jobs lose "
           "throughput in proportion.",
       fix="nvidia-smi -i N -pl <default watts> (or keep the cap if it was chosen by measuring throughput per watt)",
       refs="Book ch. 3 (power limits)")
def power_cap(f: Facts) -> Hits:
    for g in reporting(gpu_list(f), "power_limit_w", "power_default_w"):
        if g["power_limit_w"] < g["power_default_w"] - 1:  # the limits are reported to 0.01 W
            yield Hit(f"{label(g)}: enforced power limit {g['power_limit_w']:g} W, default {g['power_default_w']:g} W",
                      subject=f"gpu{g['index']}", host_action=True,
                      commands=[sh("nvidia-smi", "-i", g["index"], "-pl", f"{g['power_default_w']:g}")])


@check("gpu-temperature", "driver", "warning", "GPU running close to its slowdown temperature",
       doc="Compares the GPU temperature with its slowdown threshold; fires within 5 °C of it, or at 85 °C "
           "and above when the threshold is not reported (perfstack's threshold). One sample: meaningful under load.",
       why="Near the threshold the GPU lowers its clocks (see gpu-clock-throttle); liquid-cooled racks run "
           "at 50-70 °C for comparison.",
       fix="improve cooling: airflow, inlet temperature, fan curves, clean heat sinks",
       refs="Book ch. 2-3 (cooling, thermal throttling)")
def gpu_temperature(f: Facts) -> Hits:
    for g in reporting(gpu_list(f), "temperature_c"):
        t, limit = g["temperature_c"], g.get("temp_slowdown_c")
        if (limit is not None and t >= limit - 5) or (limit is None and t >= 85):
            yield Hit(f"{label(g)}: {t} °C" + (f", slowdown at {limit} °C" if limit is not None else ""),
                      subject=f"gpu{g['index']}", host_action=True)


@check("clock-lock", "driver", "warning", "GPU application clocks set below default",
       doc="Compares the applications (graphics) clock with its default, and flags a busy GPU whose clocks "
           "are held down by the applications-clocks setting.",
       why="For everyday training and inference leave GPU Boost free; lowered or locked clocks cost "
           "throughput in proportion. Locking is only for reproducible benchmarks.",
       fix="nvidia-smi -rac (reset application clocks) and nvidia-smi -rgc (reset locked clocks)",
       refs="Book ch. 3 (clock locking)")
def clock_lock(f: Facts) -> Hits:
    gpus = gpu_list(f)
    known = [g for g in gpus if g.get("app_clock_mhz") is not None or g.get("clocks_event_reasons") is not None]
    if not known:
        raise NotChecked("the driver reported no application clocks or clock event reasons")
    for g in known:
        app, default = g.get("app_clock_mhz"), g.get("app_clock_default_mhz")
        if app is not None and default is not None and app < default:
            yield Hit(f"{label(g)}: applications clock {app} MHz, default {default} MHz", subject=f"gpu{g['index']}",
                      host_action=True, commands=[sh("nvidia-smi", "-i", g["index"], "-rac")])
        elif "applications_clocks_setting" in (g.get("clocks_event_reasons") or []) and busy(g):
            yield Hit(f"{label(g)}: clocks held by the applications/locked clocks setting while "
                      f"{g['utilization_gpu']}% busy (SM {g.get('sm_clock_mhz')} of {g.get('sm_clock_max_mhz')} MHz)",
                      subject=f"gpu{g['index']}", host_action=True,
                      commands=[sh("nvidia-smi", "-i", g["index"], "-rac"), sh("nvidia-smi", "-i", g["index"], "-rgc")])


@check("mig-enabled", "driver", "warning", "MIG mode enabled",
       doc="Reads the current and pending MIG mode. Warning when MIG is on; info when a mode change "
           "waits for a GPU reset.",
       why="A MIG GPU is split into isolated instances: peer-to-peer and NVLink between GPUs are off and a "
           "multi-GPU NCCL job cannot span MIG instances, so data- and tensor-parallel jobs fall back to "
           "host or network paths or fail. MIG suits isolated small jobs, at a few percent overhead.",
       fix="drain the GPU, then nvidia-smi -i N -mig 0 and reset it (only if no one relies on the instances)",
       refs="Book ch. 3 (MIG)")
def mig_enabled(f: Facts) -> Hits:
    for g in reporting(gpu_list(f), "mig_current"):
        sub = f"gpu{g['index']}"
        if g["mig_current"]:
            yield Hit(f"{label(g)}: MIG Enabled", subject=sub, host_action=True)
        if g.get("mig_pending") is not None and g["mig_pending"] != g["mig_current"]:
            yield Hit(f"{label(g)}: MIG will be {'Enabled' if g['mig_pending'] else 'Disabled'} at the next GPU reset",
                      severity="info", subject=sub, host_action=True)


@check("gpu-sharing", "driver", "critical", "GPU shared by several processes, or compute prohibited",
       doc="Counts the compute processes on each GPU. Warning for two or more without MPS (plain "
           "time-slicing); critical when the compute mode is Prohibited (no CUDA context can be created).",
       why="Without MPS the GPU switches between contexts instead of running them together: four inference "
           "jobs at ~30% each still leave the GPU ~70% idle, and each extra process holds its own memory. "
           "With MPS two processes at 40% reach 80-90% combined.",
       fix="give each job its own GPU, or run the sharers under MPS (nvidia-cuda-mps-control -d), or "
           "partition with MIG when memory isolation is needed",
       refs="Book ch. 3 (MPS)")
def gpu_sharing(f: Facts) -> Hits:
    for g in reporting(gpu_list(f), "compute_mode"):
        n, sub = g.get("compute_processes"), f"gpu{g['index']}"
        if g["compute_mode"] == "Prohibited":
            yield Hit(f"{label(g)}: compute mode Prohibited", subject=sub, host_action=True,
                      fix=f"nvidia-smi -i {g['index']} -c DEFAULT", commands=[sh("nvidia-smi", "-i", g["index"], "-c", "DEFAULT")])
        elif n is not None and n >= 2 and not g.get("mps"):
            yield Hit(f"{label(g)}: {n} compute processes share it without MPS", severity="warning", subject=sub)


@check("fabric-manager", "driver", "critical", "NVSwitch fabric not initialised",
       doc="On NVSwitch systems (HGX/DGX) each GPU reports a fabric state. Fires when the state is not "
           "'Completed' or the status is not 'Success'; not checked when NVSwitches are on the bus but the "
           "driver reports no state.",
       why="Fabric Manager programs the NVSwitch routing. Until it has, CUDA cannot start on the GPUs "
           "(error 802, 'system not yet initialized') or multi-GPU traffic cannot use NVLink.",
       fix="systemctl enable --now nvidia-fabricmanager, with the package version equal to the driver's",
       refs="Book ch. 3 (Fabric Manager)")
def fabric_manager(f: Facts) -> Hits:
    gpus = gpu_list(f)
    known = [g for g in gpus if g.get("fabric_state") is not None]
    if not known:
        if f.value("pcie.nvswitches"):
            raise NotChecked("NVSwitches are on the PCI bus but the driver reported no fabric state")
        raise NotApplicable("no NVSwitch fabric")
    for g in known:
        state, status = g["fabric_state"], g.get("fabric_status")
        if state != "Completed" or (status is not None and status != "Success"):
            yield Hit(f"{label(g)}: fabric state {state}, status {status or 'n/a'}", subject=f"gpu{g['index']}",
                      host_action=True, commands=["systemctl enable --now nvidia-fabricmanager"])


JOB = re.compile(r"python|pt_|torch|vllm|triton|deepspeed|ray::|accelerate", re.I)


@check("host-oom-kills", "kernel", "critical", "Processes killed by the out-of-memory killer",
       doc="Reads 'Out of memory: Killed process' lines from dmesg (host-wide and cgroup limits). Critical "
           "when a Python/PyTorch-looking process was killed, warning for any other.",
       why="The OOM killer reaps the biggest process, which on a GPU host is often the training job, days "
           "into a run, even when another process over-allocated. A cgroup kill means the container's "
           "memory limit, not the host, ran out.",
       fix="give the job a memory limit with headroom, cut DataLoader workers or prefetching, keep other "
           "memory-hungry processes off the node; dmesg | grep -i 'killed process' shows each kill",
       refs=f"Book ch. 3 (swap and the OOM killer; Kubernetes memory isolation); {INFRA_ARTICLE} (§6.4 cgroups)")
def host_oom_kills(f: Facts) -> Hits:
    kills = f.need("kernel_log.oom_kills")
    if kills:
        names = ", ".join(f"{k['process']} (pid {k['pid']}{', cgroup limit' if k['cgroup'] else ''})" for k in kills[:6])
        more = f" and {len(kills) - 6} more" if len(kills) > 6 else ""
        yield Hit(f"{len(kills)} OOM kill(s) in the kernel log: {names}{more}",
                  severity=None if any(JOB.search(k["process"]) for k in kills) else "warning")
