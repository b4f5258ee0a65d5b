"""Bundle JSON files and model configs: their shapes are checked, and numbers or nesting beyond
bounds are exit 2 naming the file and the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from perfstack.cli.main import main

BUNDLE = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "h100-idle"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def bundle(tmp_path) -> Path:
    dst = tmp_path / "b"
    shutil.copytree(BUNDLE, dst, symlinks=True)
    return dst


@pytest.mark.parametrize("name, text, message", [
    ("listdir.json", json.dumps({"sys/class/net": "abc"}), "listdir.json: the value of 'sys/class/net' must be a list"),
    ("listdir.json", json.dumps({"sys/block": 5}), "listdir.json: the value of 'sys/block' must be a list"),
    ("listdir.json", "[]", "listdir.json is not a JSON object"),
    ("unavailable.json", json.dumps({"proc/cpuinfo": ["x"]}), "unavailable.json: the value of 'proc/cpuinfo'"),
    ("nvml.json", '{"a": ' + "9" * 5000 + "}", "nvml.json: field a is an integer of 5000 digits"),
    ("python.json", '{"torch": {"v": NaN}}', "python.json: field torch.v is NaN"),
    ("env.json", '{"a": ' + DEEP + "}", "env.json nests too deeply"),
])
def test_bundle_json_of_the_wrong_shape_is_exit_2(bundle, name, text, message, capsys):
    (bundle / name).write_text(text)
    assert main(["doctor", "--bundle", str(bundle), "--json"]) == 2
    err = capsys.readouterr().err
    assert message in err and "internal error" not in err, err


@pytest.mark.parametrize("field, value, message", [
    ("num_hidden_layers", 10**300, "field num_hidden_layers is an integer of 301 digits"),
    ("hidden_size", 10**29, "field 'hidden_size' is 1e+29, beyond any model"),
    ("vocab_size", 1e400, "field vocab_size is"),
])
def test_model_config_sizes_beyond_any_model_are_exit_2(tmp_path, field, value, message, capsys):
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "max_position_embeddings": 8192}
    text = json.dumps(dict(cfg, **{field: value})) if value != 1e400 else json.dumps(cfg).replace("128256", "1e400")
    (tmp_path / "config.json").write_text(text)
    assert main(["estimate", "infer", "-m", str(tmp_path / "config.json")]) == 2
    err = capsys.readouterr().err
    assert message in err and "config.json" in err and "internal error" not in err, err


def test_model_config_nested_100k_deep_is_exit_2(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"model_type": ' + DEEP + "}")
    assert main(["estimate", "infer", "-m", str(tmp_path / "config.json")]) == 2
    assert "nests too deeply" in capsys.readouterr().err


@pytest.mark.parametrize("field, value", [("name", 123), ("memory_total", "80GB"), ("index", [0]),
                                          ("compute_capability", "9.0"), ("pcie_width", True)])
def test_nvml_fields_of_the_wrong_type_name_the_bundle_file(bundle, field, value, capsys):
    # before: the GPU audited silently as "1× unknown GPU" (a wrong-typed field read as not answered)
    data = json.loads((bundle / "nvml.json").read_text())
    data["gpus"][0][field] = value
    (bundle / "nvml.json").write_text(json.dumps(data))
    assert main(["doctor", "--bundle", str(bundle), "--json"]) == 2
    err = capsys.readouterr().err
    assert "nvml.json" in err and f"gpus[0].{field}" in err and "internal error" not in err, err


def test_nvml_error_answers_are_not_malformed(bundle, capsys):
    data = json.loads((bundle / "nvml.json").read_text())
    data["gpus"][0]["memory_total"] = {"error": "Not Supported"}
    (bundle / "nvml.json").write_text(json.dumps(data))
    assert main(["doctor", "--bundle", str(bundle), "--json"]) in (0, 1)
    assert "H100" in capsys.readouterr().out
