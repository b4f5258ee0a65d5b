"""GPU tier: runs on a machine with a CUDA device; skipped elsewhere."""

import json

import pytest

from perfstack.cli.main import main

pytestmark = pytest.mark.gpu


def test_live_doctor_sees_the_gpus(capsys):
    import torch

    assert main(["doctor", "--json", "--fail-on", "never"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["facts"]["gpu.count"]["value"] == torch.cuda.device_count()
    assert run["facts"]["python.torch"]["value"] == torch.__version__


def test_capture_then_bundle_gives_the_same_findings(tmp_path, capsys):
    assert main(["capture", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    main(["doctor", "--json", "--fail-on", "never"])
    live = json.loads(capsys.readouterr().out)
    main(["doctor", "--bundle", str(tmp_path / "b"), "--json", "--fail-on", "never"])
    replay = json.loads(capsys.readouterr().out)
    # Telemetry (clocks, temperature, utilization) may move between the two reads.
    stable = lambda run: {(f["id"], f["subject"]) for f in run["findings"]  # noqa: E731
                          if f["id"] not in ("gpu-clock-throttle", "pcie-link-downgraded", "gpu-temperature")}
    assert stable(live) == stable(replay)
