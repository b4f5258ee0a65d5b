"""`perfstack estimate` through the real entry point (registered here until cli/main.py lists it)."""

import json

import pytest

from perfstack.cli import estimate as estimate_cli
from perfstack.cli import main as cli_main
from perfstack.estimate import catalog
from perfstack.model import Measurement, Run
from perfstack.records.meta import RunMeta


@pytest.fixture
def cli(monkeypatch):
    if estimate_cli not in cli_main.COMMANDS:
        monkeypatch.setattr(cli_main, "COMMANDS", cli_main.COMMANDS + (estimate_cli,))
    return cli_main.main


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_infer_json_is_one_run_with_named_bytes_and_seconds(cli, capsys):
    assert cli(["estimate", "infer", "--model", "llama-3-8b", "--batch", "8", "--prompt", "2048", "--gen", "256",
                "--gpu", "h100-sxm", "--json"]) == 0
    run = _json(capsys)
    assert run["meta"]["command"] == "estimate" and run["meta"]["subcommand"] == "infer"
    est = run["estimates"]
    mem, t = est["memory"], est["time"]
    assert {"weights_bytes", "kv_cache_bytes", "kv_cache_per_token_bytes", "activations_bytes",
            "framework_overhead_bytes", "total_bytes"} <= set(mem)
    assert mem["kv_cache_per_token_bytes"] == 131072
    assert mem["total_bytes"] > mem["weights_bytes"] + mem["kv_cache_bytes"]
    assert t["ttft_s"] > 0 and t["itl_s"] > 0 and est["regime"] == {"prefill": "compute-bound",
                                                                     "decode": "memory-bound"}
    assert est["capacity"]["max_batch"] > 8
    w = est["working"]["total_bytes"]
    assert w["unit"] == "B" and w["formula"] and "label" in w
    assert est["working"]["itl_s"]["inputs"]["BW_HBM"] == 3.35e12
    assert any(r["gpu"] == "h100-sxm" and r["fits_one"] for r in est["fit"])


def test_train_json_components(cli, capsys):
    assert cli(["estimate", "train", "--model", "llama-3-8b", "--batch", "1", "--seq", "4096", "--fsdp", "--dp", "8",
                "--grad-ckpt", "--json"]) == 0
    est = _json(capsys)["estimates"]
    mem = est["memory"]
    for k in ("params_bytes", "grads_bytes", "optimizer_bytes", "master_weights_bytes", "autocast_copies_bytes",
              "activations_bytes", "activations_no_ckpt_bytes", "activations_ckpt_bytes", "optimizer_temp_bytes",
              "total_bytes"):
        assert isinstance(mem[k], int), k
    assert mem["activations_ckpt_bytes"] < mem["activations_no_ckpt_bytes"]
    assert mem["optimizer_bytes"] == 8 * 8_030_261_248 // 8  # AdamW, ZeRO-3 over 8
    assert est["time"]["step_time_s"] > 0 and est["comms"]["dp_bytes"] > 0
    assert est["settings"]["zero"] == 3


def test_table_shows_formulas(cli, capsys):
    assert cli(["estimate", "infer", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--tp", "2", "-v"]) == 0
    out = capsys.readouterr().out
    for text in ("total per GPU", "2·L·⌈H_kv/TP⌉·d_h·b_kv", "ITL lower bound", "E·(1−(1−k/E)^B)", "spec table"):
        assert text in out


def test_output_file_round_trips(cli, tmp_path, capsys):
    path = tmp_path / "est.json"
    assert cli(["estimate", "train", "--model", "gpt2", "--seq", "1024", "-o", str(path)]) == 0
    run = Run.load(path)
    assert run.estimates.memory["total_bytes"] > 0 and run.meta.command == "estimate"


def test_config_path_and_explicit_flags(cli, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(catalog.CATALOG["qwen2.5-7b"]))
    assert cli(["estimate", "infer", "--model", str(tmp_path), "--json"]) == 0
    by_path = _json(capsys)["estimates"]["params"]["params_total"]
    assert by_path == 7_615_616_512
    assert cli(["estimate", "infer", "--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8",
                "--ffn", "14336", "--vocab", "128256", "--json"]) == 0
    assert _json(capsys)["estimates"]["params"]["params_total"] == 8_030_261_248


def test_models_lists_the_catalog(cli, capsys):
    assert cli(["estimate", "models"]) == 0
    out = capsys.readouterr().out
    for name in ("llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b",
                 "qwen2.5-72b", "deepseek-v3", "gpt2"):
        assert name in out


@pytest.mark.parametrize("argv,message", [
    (["--model", "/nonexistent/config.json"], "does not exist"),
    (["--model", "llama-3-8"], "neither a config.json path nor a built-in model"),
    (["--model", "llama-3-8b", "--batch", "0"], "--batch must be a positive integer"),
    (["--model", "llama-3-8b", "--batch", "-3"], "--batch must be a positive integer"),
    (["--model", "llama-3-8b", "--prompt", "9000"], "exceeds llama-3-8b's context of 8,192"),
    (["--model", "llama-3-8b", "--tp", "3"], "does not divide"),
    (["--model", "llama-3-8b", "--gpu", "H100"], "not in the spec table"),
    (["--layers", "2"], "no model given"),
])
def test_bad_input_exits_2_with_a_clear_message(cli, capsys, argv, message):
    assert cli(["estimate", "infer", *argv]) == 2
    assert message in capsys.readouterr().err


def test_unknown_gpu_lists_close_matches(cli, capsys):
    assert cli(["estimate", "infer", "--model", "gpt2", "--prompt", "100", "--gpu", "H100"]) == 2
    err = capsys.readouterr().err
    assert "close matches:" in err and "h100-sxm" in err


def test_non_json_and_unsupported_configs_exit_2(cli, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    assert cli(["estimate", "train", "--model", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    bert = tmp_path / "bert.json"
    bert.write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    assert cli(["estimate", "train", "--model", str(bert)]) == 2
    assert "model_type 'bert' is not supported" in capsys.readouterr().err


def _bench_run(tmp_path, measurements):
    run = Run(meta=RunMeta(command="bench"), measurements=measurements)
    path = tmp_path / "bench.json"
    run.save(path)
    return path


def test_calibrate_uses_measured_figures_and_says_so(cli, tmp_path, capsys):
    path = _bench_run(tmp_path, [Measurement("gemm", "gemm.bf16.best", 784.0, "TFLOP/s"),
                                 Measurement("hbm", "hbm.copy", 3000.0, "GB/s")])
    assert cli(["estimate", "infer", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--calibrate", str(path),
                "--json"]) == 0
    run = _json(capsys)
    gpu = run["estimates"]["gpu"]
    assert gpu["peak_flops"] == 784e12 and gpu["hbm_bytes_per_s"] == 3000e9
    assert "measured gemm.bf16.best" in gpu["flops_source"] and "measured hbm.copy" in gpu["bw_source"]
    assert run["meta"]["calibrated_from"] == str(path)
    # the bound moves with the measured bandwidth: 3.35 / 3.0 slower
    assert cli(["estimate", "infer", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--json"]) == 0
    spec_itl = _json(capsys)["estimates"]["time"]["itl_s"]
    assert run["estimates"]["time"]["itl_s"] == pytest.approx(spec_itl * 3.35 / 3.0, rel=1e-6)


def test_calibrate_without_the_figures_falls_back_and_says_so(cli, tmp_path, capsys):
    path = _bench_run(tmp_path, [Measurement("gemm", "gemm.bf16.best", None, "TFLOP/s", status="skipped")])
    assert cli(["estimate", "train", "--model", "gpt2", "--seq", "512", "--gpu", "h100-sxm", "--calibrate",
                str(path), "--json"]) == 0
    est = _json(capsys)["estimates"]
    assert est["gpu"]["flops_source"].startswith("spec table")
    assert any("no gemm.bf16 result" in a for a in est["assumptions"])


def test_calibrate_file_that_is_not_a_run_exits_2(cli, tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text("[]")
    assert cli(["estimate", "infer", "--model", "gpt2", "--prompt", "64", "--calibrate", str(p)]) == 2
    assert "not a perfstack Run" in capsys.readouterr().err
