"""Finding and joining a Ray cluster, each step bounded, without Ray: a stand-in module takes its place.

'fleet doctor --address auto' used to hand "auto" to Ray, which retries a dead head it found recorded on
this machine for minutes. Now the address is resolved as Ray would (--address, RAY_ADDRESS, the last
'ray start' here), checked with a TCP connection in seconds, joined within a deadline, and named.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
import types

import pytest

from perfstack.cli.main import main
from perfstack.fleet import ray_engine
from perfstack.fleet.ray_engine import Cluster, find_cluster


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return int(port)


def record(tmp_path, address: str) -> None:
    """What 'ray start' leaves on its machine: the cluster's address in Ray's temporary folder."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(address + "\n")


class FakeRay(types.ModuleType):
    """Just what connect and an empty fleet doctor call; ``init`` does what the test gives it."""

    def __init__(self, init=None):
        super().__init__("ray")
        self._init = init or (lambda **kw: None)
        self.joined = None

    def is_initialized(self):
        return self.joined is not None

    def init(self, **kw):
        self._init(**kw)
        self.joined = kw["address"]

    def nodes(self):
        return []

    def remote(self, **kw):
        return lambda fn: fn

    def wait(self, refs, num_returns=1, timeout=None):
        return [], []


@pytest.fixture
def ray_tmp(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    return tmp_path


def test_find_cluster_resolves_as_ray_does(tmp_path):
    assert find_cluster("head:6379", {"RAY_ADDRESS": "other:1"}) == Cluster("head:6379", "given with --address")
    assert find_cluster("auto", {"RAY_ADDRESS": "ray://h:10001"}) == Cluster("ray://h:10001", "from RAY_ADDRESS")
    assert find_cluster(None, {"RAY_TMPDIR": str(tmp_path)}) == Cluster("auto", "a Ray cluster running on this machine")
    record(tmp_path, "10.0.0.7:6379")
    found = find_cluster("auto", {"RAY_TMPDIR": str(tmp_path), "RAY_ADDRESS": "auto"})
    assert found.address == "10.0.0.7:6379" and "last 'ray start' on this machine" in found.found


def test_auto_with_a_dead_recorded_cluster_fails_in_seconds_and_names_it(ray_tmp, monkeypatch, capsys):
    port = closed_port()
    record(ray_tmp, f"127.0.0.1:{port}")

    def never(**kw):
        raise AssertionError("Ray must not be asked to join a head that nothing listens on")
    monkeypatch.setitem(sys.modules, "ray", FakeRay(never))
    t0 = time.perf_counter()
    assert main(["fleet", "doctor", "--address", "auto"]) == 3
    assert time.perf_counter() - t0 < 30  # one TCP connection refused, not Ray's minutes of retries
    err = capsys.readouterr().err
    assert f"no Ray cluster at 127.0.0.1:{port} (recorded by the last 'ray start' on this machine in" in err
    assert "--address HOST:PORT (or RAY_ADDRESS) names another cluster" in err


def test_a_head_that_listens_but_never_answers_is_given_up_on(ray_tmp, monkeypatch, capsys):
    head = socket.socket()
    head.bind(("127.0.0.1", 0))
    head.listen(8)  # accepts connections, answers nothing: a hung or half-started head
    port = head.getsockname()[1]
    stop = threading.Event()
    monkeypatch.setitem(sys.modules, "ray", FakeRay(lambda **kw: stop.wait(60)))  # Ray retrying
    monkeypatch.setattr(ray_engine, "CONNECT_TIMEOUT_S", 0.5)
    try:
        assert main(["fleet", "doctor", "--address", f"127.0.0.1:{port}"]) == 3
    finally:
        stop.set()
        head.close()
    err = capsys.readouterr().err
    assert f"the Ray cluster at 127.0.0.1:{port} (given with --address) did not answer within 0.5 s" in err


def test_the_cluster_joined_is_named(ray_tmp, monkeypatch, capsys):
    head = socket.socket()
    head.bind(("127.0.0.1", 0))
    head.listen(8)
    port = head.getsockname()[1]
    record(ray_tmp, f"127.0.0.1:{port}")
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    try:
        main(["fleet", "doctor", "--json"])
    finally:
        head.close()
    assert fake.joined == f"127.0.0.1:{port}"  # the recorded address, not "auto"
    err = capsys.readouterr().err
    assert f"fleet doctor: Ray cluster at 127.0.0.1:{port} (recorded by the last 'ray start' on this machine" in err
    assert "--address HOST:PORT (or RAY_ADDRESS) names another cluster" in err


def test_from_a_checkout_a_wheel_of_it_goes_to_the_nodes_in_rays_runtime_environment(ray_tmp, monkeypatch, capsys):
    from perfstack.fleet import ship
    seen = {}
    fake = FakeRay(lambda **kw: seen.update(kw))
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(ship, "checkout", lambda: ray_tmp / "checkout")

    def built(root, into):
        seen["root"] = root
        (into / "wheel").mkdir(parents=True)
        return into / "wheel" / "perfstack-0.1.0-py3-none-any.whl"
    monkeypatch.setattr(ship, "build_wheel", built)
    main(["fleet", "doctor", "--json"])
    assert seen["root"] == ray_tmp / "checkout"
    assert [p.rsplit("/", 1)[-1] for p in seen["runtime_env"]["py_modules"]] == ["perfstack-0.1.0-py3-none-any.whl"]
    assert "this perfstack goes to the nodes as perfstack-0.1.0-py3-none-any.whl" in capsys.readouterr().err
    seen.clear()
    fake.joined = None
    main(["fleet", "doctor", "--json", "--no-ship"])
    assert "runtime_env" not in seen and "root" not in seen
    seen.clear()
    fake.joined = None
    monkeypatch.setattr(ship, "checkout", lambda: None)  # installed from an index: the nodes install it alike
    main(["fleet", "doctor", "--json"])
    assert "runtime_env" not in seen


def test_the_wheel_built_from_the_checkout_holds_perfstack_whole(tmp_path):
    """A real build (pip wheel of a clean copy of the checkout): the package, its data files and its
    dependencies, and nothing written into the checkout."""
    import zipfile

    from perfstack.extras import checkout
    from perfstack.fleet.ship import build_wheel
    root = checkout()
    if root is None:
        pytest.skip("perfstack runs from an installed package here, not a checkout")
    before = sorted(p.name for p in root.iterdir())
    wheel = build_wheel(root, tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"perfstack/cli/main.py", "perfstack/fleet/ray_engine.py", "perfstack/specs/gpus.json",
            "perfstack/report/_template.html", "perfstack/py.typed"} <= names
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: rich" in meta and "Requires-Dist: msgspec" in meta
    assert sorted(p.name for p in root.iterdir()) == before  # no build/ or dist/ left in the checkout
