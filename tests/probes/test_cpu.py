import pytest
from fakes import FakeHost
from hypothesis import given, settings
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.host import Unavailable
from perfstack.probes.collector import run_probes
from perfstack.probes.cpu import (
    cpu,
    format_cpulist,
    numa,
    parse_cpuinfo,
    parse_cpulist,
    parse_psi,
    pressure,
)

SPR_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr "
             "sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good "
             "nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl vmx "
             "smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt "
             "tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault epb cat_l3 "
             "cat_l2 cdp_l3 invpcid_single intel_ppin cdp_l2 ssbd mba ibrs ibpb stibp ibrs_enhanced fsgsbase "
             "tsc_adjust bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma "
             "clflushopt clwb intel_pt avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc "
             "cqm_occup_llc cqm_mbm_total cqm_mbm_local split_lock_detect avx_vnni avx512_bf16 wbnoinvd dtherm "
             "ida arat pln pts hfi avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq "
             "avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid bus_lock_detect cldemote movdiri "
             "movdir64b enqcmd fsrm md_clear serialize tsxldtrk pconfig arch_lbr ibt amx_bf16 avx512_fp16 "
             "amx_tile amx_int8 flush_l1d arch_capabilities")
MILAN_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 "
               "ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid "
               "extd_apicid aperfmperf pni pclmulqdq monitor ssse3 fma cx16 pcid sse4_1 sse4_2 movbe popcnt aes "
               "xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse "
               "3dnowprefetch osvw ibs skinit wdt tce topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx "
               "cpb cat_l3 cdp_l3 invpcid_single hw_pstate ssbd mba ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 "
               "smep bmi2 invpcid cqm rdt_a rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 "
               "xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local clzero irperf xsaveerptr rdpru wbnoinvd "
               "amd_ppin arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists "
               "pausefilter pfthreshold v_vmsave_vmload vgif v_spec_ctrl umip pku ospke vaes vpclmulqdq rdpid "
               "overflow_recov succor smca")


def x86_block(n: int, pkg: int, core: int, model: str = "Intel(R) Xeon(R) Platinum 8480+",
              flags: str = SPR_FLAGS) -> str:
    """One processor entry of /proc/cpuinfo, in the kernel's exact layout (tabs before the colons)."""
    return (f"processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
            f"model name\t: {model}\nstepping\t: 8\nmicrocode\t: 0x2b0004b1\ncpu MHz\t\t: 2000.000\n"
            f"cache size\t: 107520 KB\nphysical id\t: {pkg}\nsiblings\t: 4\ncore id\t\t: {core}\n"
            f"cpu cores\t: 2\napicid\t\t: {n * 2}\ninitial apicid\t: {n * 2}\nfpu\t\t: yes\nfpu_exception\t: yes\n"
            f"cpuid level\t: 32\nwp\t\t: yes\nflags\t\t: {flags}\n"
            "bugs\t\t: spectre_v1 spectre_v2 spec_store_bypass swapgs eibrs_pbrsb\nbogomips\t: 4000.00\n"
            "clflush size\t: 64\ncache_alignment\t: 64\naddress sizes\t: 46 bits physical, 57 bits virtual\n"
            "power management:\n\n")


# Two sockets, two cores each, two threads per core: CPUs 0-3 on socket 0, 4-7 on socket 1;
# thread siblings are n and n+2 within a socket, as Linux numbers them.
TWO_SOCKET = "".join(x86_block(n, pkg=n // 4, core=n % 2) for n in range(8))

GRACE_BLOCK = ("processor\t: {n}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 "
               "atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve "
               "asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes svepmull svebitperm svesha3 "
               "svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh bti\nCPU implementer\t: 0x41\n"
               "CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 0\n\n")

NODE_MEMINFO = ("Node {n} MemTotal:       {kib} kB\nNode {n} MemFree:        {kib} kB\n"
                "Node {n} MemUsed:          340056 kB\nNode {n} SwapCached:            0 kB\n"
                "Node {n} HugePages_Total:     0\nNode {n} HugePages_Free:      0\nNode {n} HugePages_Surp:      0\n")

CPU = "/sys/devices/system/cpu"
NODE = "/sys/devices/system/node"


def bare_metal_files() -> dict:
    files = {"/proc/cpuinfo": TWO_SOCKET,
             f"{CPU}/smt/active": "1\n", f"{CPU}/smt/control": "on\n",
             f"{CPU}/cpuidle/current_driver": "intel_idle\n"}
    for n in range(8):
        # Socket 1 was left on powersave by a BIOS profile.
        files[f"{CPU}/cpu{n}/cpufreq/scaling_governor"] = "performance\n" if n < 4 else "powersave\n"
        files[f"{CPU}/cpu{n}/cpufreq/scaling_driver"] = "intel_pstate\n"
    for i, (name, lat, dis) in enumerate([("POLL", 0, 0), ("C1", 2, 0), ("C1E", 10, 0), ("C6", 290, 0)]):
        state = f"{CPU}/cpu0/cpuidle/state{i}"
        files.update({f"{state}/name": f"{name}\n", f"{state}/latency": f"{lat}\n", f"{state}/disable": f"{dis}\n"})
    for n, (cpus, dist) in enumerate([("0-3", "10 21"), ("4-7", "21 10")]):
        files.update({f"{NODE}/node{n}/cpulist": f"{cpus}\n", f"{NODE}/node{n}/distance": f"{dist}\n",
                      f"{NODE}/node{n}/meminfo": NODE_MEMINFO.format(n=n, kib=1056546240)})
    files.update({"/proc/pressure/cpu": "some avg10=0.20 avg60=0.10 avg300=0.18 total=2483387\n"
                                        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                  "/proc/pressure/memory": "some avg10=0.01 avg60=0.22 avg300=0.13 total=1182477\n"
                                           "full avg10=0.01 avg60=0.22 avg300=0.13 total=1105268\n",
                  "/proc/pressure/io": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                                       "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"})
    return files


def test_bare_metal_two_sockets():
    f = run_probes(FakeHost(files=bare_metal_files()), [cpu, numa, pressure])
    assert f["cpu.logical_count"].value == 8
    assert f["cpu.physical_cores"].value == 4
    assert f["cpu.model"].value == "Intel(R) Xeon(R) Platinum 8480+"
    assert f["cpu.arch"].value == "x86_64" and f["cpu.virtualized"].value is False
    assert {"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"} <= set(f["cpu.isa"].value)
    assert f["cpu.governors"].value == {"performance": "0-3", "powersave": "4-7"}
    assert f["cpu.scaling_driver"].value == "intel_pstate"
    assert f["cpu.idle_states"].value[3] == {"name": "C6", "latency_us": 290, "disabled": False}
    assert f["cpu.smt"].value == {"active": True, "control": "on"}
    assert f["numa.nodes"].value == [
        {"id": 0, "cpus": [0, 1, 2, 3], "mem_total_kib": 1056546240, "distances": [10, 21]},
        {"id": 1, "cpus": [4, 5, 6, 7], "mem_total_kib": 1056546240, "distances": [21, 10]}]
    assert f["psi.memory"].value["some"]["avg60"] == 0.22
    assert f["psi.cpu"].source == "/proc/pressure/cpu"


def test_grace_arm64_without_core_ids_counts_cores_from_smt_state():
    files = {"/proc/cpuinfo": "".join(GRACE_BLOCK.format(n=n) for n in range(72)),
             f"{CPU}/smt/active": "0\n", f"{CPU}/smt/control": "notsupported\n",
             # Grace Hopper: node 0 is Grace with its LPDDR5X, node 1 is the GPU's HBM with no CPUs.
             f"{NODE}/node0/cpulist": "0-71\n", f"{NODE}/node0/distance": "10 80\n",
             f"{NODE}/node0/meminfo": NODE_MEMINFO.format(n=0, kib=503152448),
             f"{NODE}/node1/cpulist": "\n", f"{NODE}/node1/distance": "80 10\n",
             f"{NODE}/node1/meminfo": NODE_MEMINFO.format(n=1, kib=100663296)}
    f = run_probes(FakeHost(files=files), [cpu, numa])
    assert f["cpu.logical_count"].value == 72 and f["cpu.physical_cores"].value == 72
    assert f["cpu.model"].value == "Neoverse-V2" and f["cpu.arch"].value == "aarch64"
    assert {"sve2", "bf16", "i8mm"} <= set(f["cpu.isa"].value)
    assert f["cpu.virtualized"].value is None
    assert f["numa.nodes"].value[1]["cpus"] == []


def test_vm_without_cpufreq_or_cpuidle_driver():
    files = {"/proc/cpuinfo": x86_block(0, 0, 0, "Intel(R) Xeon(R) Processor", SPR_FLAGS + " hypervisor"),
             f"{CPU}/cpu0/topology/core_id": "0\n", f"{CPU}/cpuidle/current_driver": "none\n"}
    f = run_probes(FakeHost(files=files), [cpu])
    assert not f["cpu.governors"].available
    assert "cpufreq not exposed (VM or container?)" in f["cpu.governors"].reason
    assert not f["cpu.scaling_driver"].available
    assert f["cpu.idle_states"].value == []  # driver 'none': the OS only halts
    assert f["cpu.virtualized"].value is True
    assert "absent" in f["cpu.smt"].reason


def test_no_numa_sysfs_and_no_psi_are_missing_with_reasons():
    f = run_probes(FakeHost(files={"/proc/pressure/cpu": Unavailable("/proc/pressure/cpu: Operation not supported")}),
                   [numa, pressure])
    assert "kernel built without NUMA" in f["numa.nodes"].reason
    assert f["psi.cpu"].reason == "/proc/pressure/cpu: Operation not supported"


def test_garbage_live_is_not_available_with_reason():
    files = dict(bare_metal_files(), **{"/proc/cpuinfo": "garbage\n",
                                        "/proc/pressure/memory": "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                                        f"{NODE}/node1/cpulist": "4-zz\n"})
    f = run_probes(FakeHost(files=files), [cpu, numa, pressure])
    assert "/proc/cpuinfo is missing 'processor' entries" in f["cpu.logical_count"].reason
    assert not f["cpu.model"].available
    assert "is missing the 'some avg10" in f["psi.memory"].reason
    assert "node1/cpulist is not in the expected format" in f["numa.nodes"].reason
    assert f["psi.cpu"].available


@pytest.mark.parametrize("path, probe", [("/proc/cpuinfo", cpu), ("/proc/pressure/io", pressure),
                                         (f"{NODE}/node0/distance", numa)])
def test_garbage_in_bundle_is_an_input_error_naming_the_file(path, probe):
    files = dict(bare_metal_files(), **{path: "\n"})
    with pytest.raises(InputError, match=f"bundle file {path.lstrip('/')} is"):
        run_probes(FakeHost(files=files, kind="bundle"), [probe])


def test_cpulist_round_trip_and_limits():
    assert parse_cpulist("0-3,8-11\n") == [0, 1, 2, 3, 8, 9, 10, 11]
    assert parse_cpulist("\n") == []
    assert format_cpulist([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    with pytest.raises(ValueError):
        parse_cpulist("0-99999999999")  # must not try to build a list of 10^11 CPUs
    with pytest.raises(ValueError):
        parse_cpulist("7-3")


@given(st.lists(st.integers(0, 4096), max_size=50))
def test_format_then_parse_is_identity(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == sorted(set(cpus))


@given(st.text())
def test_parsers_return_their_type_or_raise(text):
    for parse, kind in ((parse_cpulist, list), (parse_cpuinfo, dict), (parse_psi, dict)):
        try:
            assert isinstance(parse(text), kind)
        except (ValueError, KeyError, IndexError):
            pass


@settings(max_examples=50)
@given(st.text(), st.sampled_from(["/proc/cpuinfo", f"{CPU}/cpu0/cpuidle/state3/latency", f"{NODE}/node0/cpulist",
                                   f"{NODE}/node1/meminfo", "/proc/pressure/cpu", f"{CPU}/smt/active"]))
def test_bundle_garbage_only_ever_raises_input_error(text, path):
    files = dict(bare_metal_files(), **{path: text})
    try:
        f = run_probes(FakeHost(files=files, kind="bundle"), [cpu, numa, pressure])
    except InputError as e:
        assert path.lstrip("/") in e.message
    else:
        assert not any(k.startswith("probe.") for k in f)  # no probe crashed
