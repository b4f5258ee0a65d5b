import pytest
from fakes import FakeHost
from hypothesis import given, settings
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.host import Unavailable
from perfstack.probes.collector import run_probes
from perfstack.probes.memory import (
    memory,
    parse_bracketed,
    parse_int,
    parse_meminfo,
    parse_swaps,
)


def test_reads_swappiness_and_thp():
    host = FakeHost(files={"/proc/sys/vm/swappiness": "60\n",
                           "/sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
                           "/sys/kernel/mm/transparent_hugepage/defrag": "always defer [madvise] never\n"})
    f = run_probes(host, [memory])
    assert f["kernel.swappiness"].value == 60
    assert f["kernel.thp_enabled"].value == "madvise"
    assert f["kernel.thp_enabled"].source == "/sys/kernel/mm/transparent_hugepage/enabled"


def test_garbage_live_is_not_available_with_reason():
    f = run_probes(FakeHost(files={"/proc/sys/vm/swappiness": "sixty"}), [memory])
    assert not f["kernel.swappiness"].available
    assert "not in the expected format" in f["kernel.swappiness"].reason
    assert "absent" in f["kernel.thp_enabled"].reason


def test_garbage_in_bundle_is_an_input_error_naming_the_file():
    host = FakeHost(files={"/sys/kernel/mm/transparent_hugepage/enabled": "madvise"}, kind="bundle")
    with pytest.raises(InputError, match="bundle file sys/kernel/mm/transparent_hugepage/enabled is missing"):
        run_probes(host, [memory])


MEMINFO = """\
MemTotal:       2113092480 kB
MemFree:        1932410536 kB
MemAvailable:   2051122704 kB
Buffers:          812452 kB
Cached:         98304512 kB
SwapCached:        10240 kB
Active:         41211340 kB
Inactive:       63112048 kB
Active(anon):    6551212 kB
Inactive(anon):     1536 kB
Unevictable:       31828 kB
Mlocked:           27732 kB
SwapTotal:       8388604 kB
SwapFree:        7340028 kB
Zswap:                 0 kB
Zswapped:              0 kB
Dirty:               228 kB
Writeback:             0 kB
AnonPages:       6020740 kB
Mapped:          1208344 kB
Shmem:            556096 kB
HugePages_Total:       0
HugePages_Free:        0
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:        68719476 kB
DirectMap4k:     1212348 kB
DirectMap2M:    56236032 kB
DirectMap1G:   2092957696 kB
"""
SWAPS = ("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
         "/dev/dm-1                               partition\t8388604\t\t1048576\t\t-2\n")
HP = "/sys/kernel/mm/hugepages"


def healthy_host_files() -> dict:
    files = {"/proc/meminfo": MEMINFO, "/proc/swaps": SWAPS, "/proc/sys/kernel/numa_balancing": "1\n",
             "/proc/sys/vm/dirty_ratio": "20\n", "/proc/sys/vm/dirty_background_ratio": "10\n",
             "/proc/sys/vm/dirty_bytes": "0\n", "/proc/sys/vm/dirty_background_bytes": "0\n",
             "/sys/kernel/iommu_groups/0/type": "DMA-FQ\n", "/sys/kernel/iommu_groups/1/type": "DMA-FQ\n"}
    for size, total in (("2048kB", 0), ("1048576kB", 64)):
        files.update({f"{HP}/hugepages-{size}/nr_hugepages": f"{total}\n", f"{HP}/hugepages-{size}/free_hugepages":
                      f"{total}\n", f"{HP}/hugepages-{size}/resv_hugepages": "0\n"})
    return files


def test_reads_meminfo_swap_hugepages_numa_balancing_dirty_and_iommu():
    host = FakeHost(files=healthy_host_files(), dirs={"/sys/class/iommu": ["dmar0", "dmar1"]})
    f = run_probes(host, [memory])
    assert f["mem.total_bytes"].value == 2113092480 * 1024
    assert f["mem.swap_total_bytes"].value == 8388604 * 1024
    assert f["mem.swap_free_bytes"].value == 7340028 * 1024
    assert f["swap.devices"].value == [{"name": "/dev/dm-1", "type": "partition", "size_kib": 8388604,
                                        "used_kib": 1048576, "priority": -2}]
    assert f["mem.hugepage_pools"].value == [{"size_kib": 2048, "total": 0, "free": 0, "reserved": 0},
                                             {"size_kib": 1048576, "total": 64, "free": 64, "reserved": 0}]
    assert f["kernel.numa_balancing"].value == 1
    assert f["kernel.dirty_ratio"].value == 20 and f["kernel.dirty_bytes"].value == 0
    assert f["kernel.iommu"].value == {"units": ["dmar0", "dmar1"], "group_types": ["DMA-FQ"]}


def test_sysctl_read_failure_is_missing_with_the_kernel_reason():
    # Some sandboxes answer reads of /proc/sys/vm/* with ENOMEM.
    files = {"/proc/sys/vm/swappiness": Unavailable("/proc/sys/vm/swappiness: Cannot allocate memory")}
    f = run_probes(FakeHost(files=files), [memory])
    assert f["kernel.swappiness"].reason == "/proc/sys/vm/swappiness: Cannot allocate memory"
    assert "kernel without IOMMU support" in f["kernel.iommu"].reason
    assert "absent" in f["mem.hugepage_pools"].reason and "absent" in f["mem.total_bytes"].reason


def test_swap_file_names_with_spaces_and_deleted_files():
    swaps = (SWAPS.splitlines()[0] + "\n/swap\\040file (deleted)   file\t1024\t0\t-3\n"
             "/dev/zram0  partition\t4096\t0\t100\n")
    f = run_probes(FakeHost(files={"/proc/swaps": swaps}), [memory])
    assert [d["name"] for d in f["swap.devices"].value] == ["/swap file (deleted)", "/dev/zram0"]


def test_meminfo_and_swaps_garbage_live_is_not_available():
    f = run_probes(FakeHost(files={"/proc/meminfo": "MemFree: 12 kB\n", "/proc/swaps": "/dev/sda2 partition 1 0 -2\n"}),
                   [memory])
    assert "/proc/meminfo is missing the MemTotal line" in f["mem.total_bytes"].reason
    assert "/proc/swaps is missing the 'Filename" in f["swap.devices"].reason


@pytest.mark.parametrize("path", ["/proc/meminfo", "/proc/swaps", f"{HP}/hugepages-2048kB/free_hugepages",
                                  "/proc/sys/vm/dirty_ratio"])
def test_more_garbage_in_bundle_is_an_input_error_naming_the_file(path):
    files = dict(healthy_host_files(), **{path: "n/a\n"})
    with pytest.raises(InputError, match=f"bundle file {path.lstrip('/')} is"):
        run_probes(FakeHost(files=files, kind="bundle"), [memory])


@given(st.text())
def test_parsers_return_their_type_or_raise(text):
    for parse, kind in ((parse_meminfo, dict), (parse_swaps, list), (parse_bracketed, str), (parse_int, int)):
        try:
            assert isinstance(parse(text), kind)
        except ValueError:
            pass


@settings(max_examples=50)
@given(st.text(), st.sampled_from(["/proc/meminfo", "/proc/swaps", "/proc/sys/kernel/numa_balancing",
                                   f"{HP}/hugepages-1048576kB/nr_hugepages", "/sys/kernel/iommu_groups/0/type"]))
def test_bundle_garbage_only_ever_raises_input_error(text, path):
    files = dict(healthy_host_files(), **{path: text})
    try:
        f = run_probes(FakeHost(files=files, dirs={"/sys/class/iommu": ["dmar0"]}, kind="bundle"), [memory])
    except InputError as e:
        assert path.lstrip("/") in e.message
    else:
        assert not any(k.startswith("probe.") for k in f)
