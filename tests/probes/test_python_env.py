import json
import sys
import types

import pytest
from fakes import FakeHost
from hypothesis import given
from hypothesis import strategies as st

from perfstack.errors import InputError
from perfstack.host import Unavailable, pyinfo
from perfstack.probes.collector import Malformed, run_probes
from perfstack.probes.python_env import (
    KEYS,
    nccl_conf,
    parse_nccl_conf,
    parse_pyinfo,
    python_env,
)

# Recorded with `python3 -m perfstack.host.pyinfo` on the project's H100 machine (torch 2.11.0+cu130,
# driver 580.159.04), with this version of pyinfo.
H100 = {"python": "3.12.3", "implementation": "CPython", "executable": "/opt/torch/.venv/bin/python3",
        "packages": {"numpy": "2.5.2", "triton": "3.6.0", "transformers": "5.17.0", "accelerate": "1.15.0",
                     "nvidia-nccl-cu13": "2.28.9", "nvidia-cudnn-cu13": "9.19.0.56",
                     "nvidia-cuda-runtime": "13.0.96", "nvidia-cublas": "13.1.0.3"},
        "torch": "2.11.0+cu130", "torch_cuda": "13.0", "torch_hip": None, "num_threads": 16,
        "float32_matmul_precision": "highest", "matmul_allow_tf32": False, "cudnn_allow_tf32": True,
        "cuda_available": True, "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
        "cudnn": 91900, "nccl_available": True, "nccl": "2.28.9", "allocator_backend": "native", "device_count": 1,
        "devices": [{"name": "NVIDIA H100 80GB HBM3", "capability": [9, 0]}]}
# Same machine, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:true (torch wants 'True').
H100_BAD_ALLOC = {**{k: v for k, v in H100.items() if k not in ("device_count", "devices")},
                  "errors": {"cuda_init": "ValueError: Expected 'True' or 'False' at index 2 in ConfigTokenizer "
                                          "but got 'true'"}}
# Same machine, CUDA_VISIBLE_DEVICES=5 (no such GPU).
H100_HIDDEN = {**{k: v for k, v in H100.items() if k not in ("device_count", "devices")}, "cuda_available": False}
# Same machine, /usr/bin/python3 (no torch there).
NO_TORCH = {"python": "3.12.3", "implementation": "CPython", "executable": "/usr/bin/python3", "packages": {},
            "torch": None}


def collect(data, kind="live"):
    return run_probes(FakeHost(pyinfo=data, kind=kind), [python_env])


def test_recorded_h100():
    f = collect(H100)
    assert f["python.torch"].value == "2.11.0+cu130" and f["python.torch_cuda"].value == "13.0"
    assert f["python.arch_list"].value[-1] == "sm_120"
    assert f["python.device_capabilities"].value == ["9.0"]
    assert f["python.nccl"].value == "2.28.9" and f["python.cudnn"].value == 91900
    assert f["python.packages"].value["nvidia-nccl-cu13"] == "2.28.9"
    assert f["python.errors"].value == {}
    assert f["python.torch"].source == "python -m perfstack.host.pyinfo"
    assert set(f) == set(KEYS) and all(f[k].available for k in KEYS)


def test_recorded_fixture_from_older_pyinfo(fixtures):
    """The committed H100 fixture predates 'executable' and 'allocator_backend': those become gaps."""
    f = collect(json.loads((fixtures / "raw/h100/python.json").read_text()))
    assert f["python.device_capabilities"].value == ["9.0"]
    assert not f["python.executable"].available and "older perfstack" in f["python.executable"].reason
    assert f["python.allocator_backend"].reason == "not reported by pyinfo"


def test_torch_absent_is_a_fact_and_the_rest_say_why():
    f = collect(NO_TORCH)
    assert f["python.torch"].available and f["python.torch"].value is None
    assert not f["python.torch_cuda"].available
    assert f["python.arch_list"].reason == "torch is not importable by /usr/bin/python3"


def test_cpu_build_has_no_cuda_facts():
    f = collect({"python": "3.11.7", "torch": "2.13.0+cpu", "torch_cuda": None, "float32_matmul_precision": "highest"})
    assert f["python.torch_cuda"].value is None and f["python.cuda_available"].value is False
    assert "not a CUDA build" in f["python.arch_list"].reason
    assert f["python.num_threads"].reason == "not reported by pyinfo"


def test_cuda_failures_explain_the_missing_devices():
    f = collect(H100_BAD_ALLOC)
    assert f["python.errors"].value["cuda_init"].startswith("ValueError")
    assert "could not initialise CUDA: ValueError" in f["python.device_capabilities"].reason
    f = collect(H100_HIDDEN)
    assert f["python.cuda_available"].value is False
    assert "cannot use CUDA here" in f["python.device_count"].reason


def test_field_error_becomes_the_reason():
    data = {k: v for k, v in H100.items() if k != "cudnn"}
    f = collect({**data, "errors": {"cudnn": "RuntimeError: boom"}})
    assert f["python.cudnn"].reason == "torch raised RuntimeError: boom"


def test_python_info_unavailable_marks_every_fact():
    f = collect(None)
    assert set(f) == set(KEYS)
    assert all(not f[k].available and "could not be read: python: absent" in f[k].reason for k in KEYS)


@pytest.mark.parametrize("bad", [[1, 2], {"python": "3.12"}, {**H100, "torch_cuda": 13},
                                 {**H100, "device_count": True}, {**H100, "devices": [{"capability": "9.0"}]}])
def test_malformed_live_is_unavailable_with_reason(bad):
    f = collect(bad)
    assert not f["python.torch"].available and "not a pyinfo object" in f["python.torch"].reason


def test_malformed_bundle_is_an_input_error_naming_the_file():
    with pytest.raises(InputError, match="bundle file python.json is not a pyinfo object: 'torch_cuda' is int"):
        collect({**H100, "torch_cuda": 13}, kind="bundle")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=12)
FIELDS = st.sampled_from(["python", "torch", "torch_cuda", "arch_list", "devices", "errors", "packages", "cudnn",
                          "cuda_available", "executable", "device_count", "nccl"])


@given(st.dictionaries(FIELDS, JSON, max_size=8) | JSON)
def test_parse_pyinfo_returns_facts_or_malformed(data):
    try:
        out = parse_pyinfo(data)
    except Malformed:
        return
    assert set(out) <= set(KEYS)


@given(st.dictionaries(FIELDS, JSON, max_size=8))
def test_bundle_collector_raises_only_input_errors(data):
    try:
        collect(data, kind="bundle")
    except InputError:
        pass


# -- NCCL config files ----------------------------------------------------------------------------
def conf_facts(files, env=None, kind="live"):
    return run_probes(FakeHost(files=files, env=env if env is not None else {"HOME": "/home/u"}, kind=kind),
                      [nccl_conf])


def test_nccl_conf_user_file_beats_etc_and_names_the_origin():
    f = conf_facts({"/home/u/.nccl.conf": "NCCL_DEBUG=WARN\n",
                    "/etc/nccl.conf": "NCCL_DEBUG=INFO\nNCCL_P2P_DISABLE=1\n# a comment\nOTHER=1\n"})
    assert f["nccl.conf"].value == {"NCCL_DEBUG": {"value": "WARN", "file": "/home/u/.nccl.conf"},
                                    "NCCL_P2P_DISABLE": {"value": "1", "file": "/etc/nccl.conf"}}


def test_nccl_conf_file_variable_replaces_home_file():
    f = conf_facts({"/opt/nccl.conf": "NCCL_ALGO=Ring", "/home/u/.nccl.conf": "NCCL_ALGO=Tree"},
                   env={"HOME": "/home/u", "NCCL_CONF_FILE": "/opt/nccl.conf"})
    assert f["nccl.conf"].value == {"NCCL_ALGO": {"value": "Ring", "file": "/opt/nccl.conf"}}


def test_nccl_conf_absent_files_are_an_empty_config_but_unreadable_is_a_gap():
    assert conf_facts({})["nccl.conf"].value == {}
    f = conf_facts({"/etc/nccl.conf": Unavailable("/etc/nccl.conf: permission denied (needs root?)")})
    assert not f["nccl.conf"].available and "permission denied" in f["nccl.conf"].reason


def test_parse_nccl_conf_reads_like_nccl():
    assert parse_nccl_conf("NCCL_SOCKET_IFNAME==ens1f0\nNCCL_X\n NCCL_Y=1\nNCCL_Z=a=b") == \
        {"NCCL_SOCKET_IFNAME": "=ens1f0", "NCCL_Z": "a=b"}


@given(st.text())
def test_parse_nccl_conf_never_fails(text):
    out = parse_nccl_conf(text)
    assert all(k.startswith("NCCL_") and isinstance(v, str) for k, v in out.items())


# -- pyinfo itself (no torch needed) ----------------------------------------------------------------
def test_pyinfo_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes 'import torch' raise ImportError
    info = pyinfo.collect()
    assert info["torch"] is None and info["python"] and info["executable"] == sys.executable
    json.dumps(info)


def fake_torch(available=True, init_error=None, warn=None):
    def is_available():
        if warn:
            import warnings
            warnings.warn(warn, UserWarning, stacklevel=2)
        return available

    def init():
        if init_error:
            raise ValueError(init_error)

    cuda = types.SimpleNamespace(
        is_available=is_available, init=init, get_arch_list=lambda: [], device_count=lambda: 1,
        get_device_name=lambda i: "NVIDIA H100 80GB HBM3", get_device_capability=lambda i: (9, 0),
        get_allocator_backend=lambda: "native", nccl=types.SimpleNamespace(version=lambda: (2, 28, 9)))
    backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False)),
                                     cudnn=types.SimpleNamespace(allow_tf32=True, is_available=lambda: True,
                                                                 version=lambda: 91900))
    return types.SimpleNamespace(
        __version__="2.11.0+cu130", version=types.SimpleNamespace(cuda="13.0", hip=None), cuda=cuda,
        backends=backends, _C=types.SimpleNamespace(_cuda_getArchFlags=lambda: "sm_80 sm_90"),
        get_num_threads=lambda: 8, get_float32_matmul_precision=lambda: "highest",
        distributed=types.SimpleNamespace(is_available=lambda: True, is_nccl_available=lambda: True))


def test_pyinfo_with_a_working_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    info = pyinfo.collect()
    assert info["arch_list"] == ["sm_80", "sm_90"] and info["nccl"] == "2.28.9"
    assert info["devices"] == [{"name": "NVIDIA H100 80GB HBM3", "capability": [9, 0]}]
    assert "errors" not in info
    f = collect(json.loads(json.dumps(info)))
    assert f["python.device_capabilities"].value == ["9.0"]


def test_pyinfo_keeps_torch_s_reasons(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(available=False, warn="CUDA initialization: driver too old"))
    info = pyinfo.collect()
    assert info["cuda_available"] is False and "devices" not in info
    assert info["errors"]["cuda_available"] == "CUDA initialization: driver too old"
    monkeypatch.setitem(sys.modules, "torch", fake_torch(init_error="Unrecognized key 'foo' in CUDA allocator config."))
    info = pyinfo.collect()
    assert info["errors"]["cuda_init"].startswith("ValueError: Unrecognized key") and "devices" not in info
