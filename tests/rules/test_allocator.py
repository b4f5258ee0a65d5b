import pytest
from fakes import facts
from hypothesis import given
from hypothesis import strategies as st

from perfstack.host import Unavailable
from perfstack.rules import CHECKS, load, run_check
from perfstack.rules.allocator import parse_alloc_conf, problems

load()


def base(**over):
    values = dict(env={}, gpu__count=1, python__torch="2.11.0+cu130", python__torch_cuda="13.0", python__errors={})
    values.update(over)
    return facts(**values)


def run(check_id, **over):
    return run_check(CHECKS[check_id], base(**over))


def evidence(found):
    return [(f.severity.value, f.evidence) for f in found]


def test_healthy_setting_is_quiet():
    assert run("alloc-conf", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})[1].status == "passed"
    assert run("alloc-conf", env={"PYTORCH_ALLOC_CONF": " expandable_segments : True , max_split_size_mb:512"})[1] \
        .status == "passed"
    assert run("alloc-conf", env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})[1].status == "passed"


def test_unset_is_info_about_expandable_segments():
    found, _ = run("alloc-conf")
    assert evidence(found) == [("info", "PYTORCH_CUDA_ALLOC_CONF is unset: expandable segments are off, so "
                                        "variable-size allocations fragment GPU memory")]


def test_bad_keys_and_values_are_named():
    found, _ = run("alloc-conf", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:true,max_split_size_mb:10,"
                                                                 "foo:1,garbage_collection_threshold:1.5"})
    assert found[0].severity.value == "warning"
    for part in ("expandable_segments:true must be True or False", "max_split_size_mb:10 is below the 20 MB",
                 "unknown option 'foo'", "garbage_collection_threshold:1.5 is out of range"):
        assert part in found[0].evidence


def test_cuda_malloc_async_ignores_native_options():
    found, _ = run("alloc-conf", env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync,expandable_segments:True"})
    assert evidence(found) == [("warning", "PYTORCH_CUDA_ALLOC_CONF='backend:cudaMallocAsync,expandable_segments:True':"
                                           " backend:cudaMallocAsync ignores expandable_segments")]


def test_torch_s_own_rejection_is_reported():
    # recorded on the H100: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:true
    err = "ValueError: Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'"
    found, _ = run("alloc-conf", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:true"},
                   python__errors={"cuda_init": err})
    assert "refuses it at CUDA start-up" in found[0].evidence and err in found[0].evidence


def test_both_names_and_the_new_name_on_old_torch():
    found, _ = run("alloc-conf", env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128",
                                      "PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    assert "torch uses the first" in found[0].evidence
    assert found[-1].severity.value == "info"  # the one torch reads lacks expandable segments
    found, _ = run("alloc-conf", env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, python__torch="2.4.1+cu124")
    assert "predates this name" in found[0].evidence
    found, _ = run("alloc-conf", env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, python__torch="2.9.1+cu128")
    assert "183387" in found[0].evidence
    assert run("alloc-conf", env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})[1].status == "passed"


def test_alloc_conf_not_checked_and_not_applicable():
    _, res = run("alloc-conf", env=Unavailable("env.json missing from bundle"))
    assert res.status == "not-checked" and "env.json" in res.reason
    assert run("alloc-conf", gpu__count=0)[1].status == "not-applicable"
    assert run("alloc-conf", python__torch_cuda=None)[1].status == "not-applicable"
    assert run("alloc-conf", python__torch=None)[1].status == "not-applicable"


@pytest.mark.parametrize("bad", ["expandable_segments", "a:[1,2", "x:1]"])
def test_parse_alloc_conf_rejects_malformed(bad):
    with pytest.raises(ValueError):
        parse_alloc_conf(bad)
    found, _ = run("alloc-conf", env={"PYTORCH_CUDA_ALLOC_CONF": bad})
    assert "is not a key:value list" in found[0].evidence


def test_parse_alloc_conf_keeps_bracketed_lists():
    pairs = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:4],expandable_segments:True")
    assert pairs == [("roundup_power2_divisions", "[256:1,512:2,>:4]"), ("expandable_segments", "True")]
    assert problems(pairs) == [] and problems([("roundup_power2_divisions", "3")])


@given(st.text())
def test_parse_alloc_conf_returns_pairs_or_raises_value_error(text):
    try:
        pairs = parse_alloc_conf(text)
    except ValueError:
        return
    assert all(k and v for k, v in pairs)
    assert all(isinstance(p, str) for p in problems(pairs))


def test_caching_allocator_disabled():
    found, _ = run("caching-allocator-disabled", env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    assert found[0].severity.value == "warning"
    found, _ = run("caching-allocator-disabled", env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "0"})
    assert found[0].severity.value == "info"
    assert run("caching-allocator-disabled")[1].status == "passed"
    assert run("caching-allocator-disabled", env=Unavailable("x"))[1].status == "not-checked"
