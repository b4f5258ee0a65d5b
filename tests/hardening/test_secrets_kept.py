"""Secrets by what is kept, not by what is recognised (issue 24 item 11).

A capture keeps the values of the environment variables, kernel parameters and mount options the checks
read; every other one by its name only; value patterns are a second net over what is kept. Planted here:
secrets of many formats in the environment (under names the checks read, and under others), on the
kernel command line, in mount options and sources, and in a server's responses to the load test. None may
reach a bundle, a Run or a report; the harmless values beside them must come through as they were.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from perfstack import redact
from perfstack.cli import capture as capture_cli
from perfstack.cli.main import main
from perfstack.host.bundle import BundleHost

BUNDLE = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "h100-idle"

SECRETS = {
    "slack_webhook": "https://hooks.slack.com/services/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",
    "aws_key_id_20": "AKIAIOSFODNN7EXAMPLQ",
    "aws_key_id_21": "AKIAIOSFODNN7EXAMPLQZ",
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
    "key_after_slash": "/etc/perfstack/keys/Zq7Xw9Lp2Rt5Vb8Nc3Md6Kf1Hj4Gs0YaQe2",
    "gcp_private_key_id": '{"type": "service_account", "private_key_id": "3c1f0a9b8e7d6c5b4a39281706f5e4d3c2b1a098"}',
    "url_password": "https://alice:Zx9pa55wordQ7@pypi.example.com/simple",
    "redis_url": "redis://:hunter2hunter2@cache.internal:6379/0",
    "bearer": "Authorization: Bearer abcdef0123456789abcdef0123456789",
    "hf_token": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "github_pat": "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "github_fine": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRS",
    "openai": "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "anthropic": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "slack_bot": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "gitlab": "glpat-AbCdEfGhIjKlMnOpQrSt",
    "google_api": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "npm": "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "stripe": "sk_live_AbCdEfGhIjKlMnOpQrStUvWx",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\n-----END RSA PRIVATE KEY-----",
    "password_kv": "password=Sup3rS3cretValue",
    "azure_conn": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+/==;EndpointSuffix=core.windows.net",
    "cli_option": "--api-key Zq7Xw9Lp2Rt5",
    "query_token": "https://api.example.com/v1?token=Zq7Xw9Lp2Rt5abc&x=1",
    "pypi": "pypi-AgEIcHlwaS5vcmcCJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMAACKlszLCJhYmMiXQ",
    "random_key": "Zq7Xw9Lp2Rt5Vb8Nc3Md6Kf1Hj4Gs0YaQe2Wr",
    "gcp_json_key": '"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n"',
}
# the part of each secret that must not survive anywhere
MARK = {
    "slack_webhook": "Zq7Xw9Lp2Rt5Vb8Nc3Md6Kf1", "aws_key_id_20": "IOSFODNN7EXAMPLQ", "aws_key_id_21": "IOSFODNN7EXAMPLQZ",
    "aws_secret": "bPxRfiCYzEXAMPLEKEY", "key_after_slash": "Zq7Xw9Lp2Rt5Vb8Nc3Md6Kf1Hj4Gs0YaQe2",
    "gcp_private_key_id": "3c1f0a9b8e7d6c5b4a39281706f5e4d3c2b1a098", "url_password": "Zx9pa55wordQ7",
    "redis_url": "hunter2hunter2", "bearer": "abcdef0123456789abcdef0123456789", "hf_token": "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "github_pat": "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "github_fine": "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
    "openai": "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "anthropic": "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "slack_bot": "AbCdEfGhIjKlMnOpQrStUvWx", "gitlab": "AbCdEfGhIjKlMnOpQrSt", "google_api": "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "npm": "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "stripe": "AbCdEfGhIjKlMnOpQrStUvWx", "jwt": "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "pem": "MIIEowIBAAKCAQEAx", "password_kv": "Sup3rS3cretValue", "azure_conn": "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+/==",
    "cli_option": "Zq7Xw9Lp2Rt5", "query_token": "Zq7Xw9Lp2Rt5abc", "pypi": "AgEIcHlwaS5vcmcCJDAwMDAwMDAwLTAwMDAtMDAw",
    "random_key": "Zq7Xw9Lp2Rt5Vb8Nc3Md6Kf1Hj4Gs0YaQe2Wr", "gcp_json_key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
}
HARMLESS = [
    "Llama-3.1-8B-AWQ", "meta-llama/Llama-3.1-70B-Instruct", "Qwen2.5-72B-Instruct-GPTQ-Int4", "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "deepseek-ai/DeepSeek-V3", "TheBloke/Llama-2-13B-chat-AWQ", "google/gemma-2-27b-it",
    "GPU-6f2b0b7e-3c1a-4d5e-9f8a-7b6c5d4e3f2a", "MIG-6f2b0b7e-3c1a-4d5e-9f8a-7b6c5d4e3f2a",
    "3c1f0a9b8e7d6c5b4a39281706f5e4d3c2b1a098", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "d41d8cd98f00b204e9800998ecf8427e", "/home/alice/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B/snapshots/0e9e39f249a16976918f6564b8830bc894c89659",
    "/usr/local/cuda-12.4/lib64:/usr/lib/x86_64-linux-gnu", "/opt/conda/envs/train/lib/python3.11/site-packages/torch/lib",
    "0xffff", "0x8001", "mlx5_0:1,mlx5_1:1", "^docker0,lo", "eth0", "INFO", "expandable_segments:True,max_split_size_mb:512",
    "0,1,2,3,4,5,6,7", "PCI_BUS_ID", "1", "TRACE", "cudaMallocAsync", "nvidia.com/gpu", "12.4.1", "2.5.1+cu124",
    "tcp://10.0.0.5:29500", "https://pypi.org/simple", "NVIDIA H100 80GB HBM3", "550.54.15",
    "rw,relatime,size=67108864k", "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=1f2e3d4c-5b6a-4798-8a9b-0c1d2e3f4a5b ro iommu=pt",
]
HARMLESS_ENV = {"NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0xffff", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1",
                "NCCL_SOCKET_IFNAME": "^docker0,lo", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                "CUDA_VISIBLE_DEVICES": "0,1,2,3", "NCCL_DEBUG": "INFO", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                "HF_HUB_ENABLE_HF_TRANSFER": "1", "TORCH_CUDA_ARCH_LIST": "8.0;9.0", "NCCL_NET_GDR_LEVEL": "PHB",
                "NCCL_P2P_LEVEL": "NVL", "OMP_NUM_THREADS": "8", "HF_HOME": "/data/hf", "NCCL_CROSS_NIC": "1",
                "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106", "NCCL_IB_TIMEOUT": "22",
                "TRANSFORMERS_CACHE": "/home/alice/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B",
                "HF_HUB_OFFLINE": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


def _leaks(text: str) -> list[str]:
    return [k for k, mark in MARK.items() if mark in text]


def test_the_planted_sets_are_as_large_as_promised():
    assert len(SECRETS) >= 25 and len(HARMLESS) + len(HARMLESS_ENV) >= 30


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_the_second_net_catches_every_format(name):
    assert not _leaks(redact.text(SECRETS[name])), redact.text(SECRETS[name])


@pytest.mark.parametrize("value", HARMLESS)
def test_the_second_net_leaves_harmless_values_alone(value):
    assert redact.text(value) == value


def _planted(tmp_path: Path) -> Path:
    b = tmp_path / "live"
    shutil.copytree(BUNDLE, b, symlinks=True)
    env = json.loads((b / "env.json").read_text())
    for i, secret in enumerate(SECRETS.values()):
        env[f"APP_SETTING_{i}"] = secret  # a name no check reads: kept by name only
        env[f"NCCL_PLANTED_{i}"] = secret  # a name the checks' prefixes keep: the value net must catch it
    env.update(HARMLESS_ENV, HF_TOKEN=SECRETS["hf_token"], WANDB_API_KEY="0123456789abcdef0123456789abcdef01234567")
    (b / "env.json").write_text(json.dumps(env))
    words = [f"plant{i}={s}" for i, s in enumerate(SECRETS.values())]
    (b / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz-6.8.0 ro iommu=pt " + " ".join(words) + "\n")
    lines = [f"{90 + i} 27 0:{60 + i} / /mnt/planted{i} rw,relatime - cifs //alice:{s.split()[0]}@files/share{i} "
             f"rw,username=alice,password={s.split()[0]},cred=/etc/{s.split()[0][:40]},rsize=65536"
             for i, s in enumerate(SECRETS.values())]
    mi = b / "proc/self/mountinfo"
    mi.write_text(mi.read_text().rstrip("\n") + "\n" + "\n".join(lines) + "\n")
    meta = json.loads((b / "meta.json").read_text())
    meta.pop("manifest", None)
    (b / "meta.json").write_text(json.dumps(meta))
    return b


def test_no_planted_secret_reaches_a_bundle_a_run_or_a_report(tmp_path, monkeypatch, capsys):
    # before: a Slack webhook, a 21-character AWS key id, a key after '/' and a GCP private_key_id reached
    # bundles, and NCCL_IB_PKEY / UCX_IB_PKEY were blanked
    live = _planted(tmp_path)
    monkeypatch.setattr(capture_cli, "LiveHost", lambda: BundleHost(live))  # the planted machine, read as if live
    out = tmp_path / "bundle"
    assert main(["capture", str(out), "--keep-env", "APP_SETTING_0"]) == 0
    files = {p: p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()}
    for p, text in files.items():
        assert not _leaks(text), (p, _leaks(text))
    env = json.loads((out / "env.json").read_text())
    for name, value in HARMLESS_ENV.items():
        assert env[name] == value, name
    assert env["APP_SETTING_3"] == redact.NOT_KEPT and env["HF_TOKEN"] == "REDACTED"
    assert env["APP_SETTING_0"] != redact.NOT_KEPT  # --keep-env kept it (and the net scrubbed it)
    cmdline = (out / "proc/cmdline").read_text()
    assert "iommu=pt" in cmdline and f"plant1={redact.NOT_KEPT}" in cmdline and "BOOT_IMAGE=" in cmdline
    mounts = (out / "proc/self/mountinfo").read_text()
    assert "/mnt/planted7" in mounts and "rsize=65536" in mounts and f"password={redact.NOT_KEPT}" in mounts

    run, md, html = tmp_path / "run.json", tmp_path / "run.md", tmp_path / "run.html"
    main(["doctor", "--bundle", str(out), "-o", str(run), "--html", str(html), "--fail-on", "never", "-v"])
    main(["report", str(run), "--format", "md", "-o", str(md)])
    printed = capsys.readouterr()
    for doc in (run.read_text(), md.read_text(), html.read_text(), printed.out, printed.err):
        assert not _leaks(doc), _leaks(doc)
    facts = json.loads(run.read_text())["facts"]
    for name, value in HARMLESS_ENV.items():
        if name in facts["env"]["value"]:
            assert facts["env"]["value"][name] == value, name
    assert facts["env"]["value"]["NCCL_IB_PKEY"] == "0x8001" and facts["env"]["value"]["UCX_IB_PKEY"] == "0xffff"


def test_a_check_whose_value_was_not_kept_says_so(tmp_path, capsys):
    b = tmp_path / "b"
    shutil.copytree(BUNDLE, b, symlinks=True)
    env = json.loads((b / "env.json").read_text())
    env["PYTORCH_CUDA_ALLOC_CONF"] = redact.NOT_KEPT  # as a capture that did not keep it writes it
    (b / "env.json").write_text(json.dumps(env))
    meta = json.loads((b / "meta.json").read_text())
    meta.pop("manifest", None)
    (b / "meta.json").write_text(json.dumps(meta))
    main(["doctor", "--bundle", str(b), "--json", "--fail-on", "never"])
    run = json.loads(capsys.readouterr().out)
    reasons = [c.get("reason", "") for c in run["checks"]]
    assert any("PYTORCH_CUDA_ALLOC_CONF was not kept" in r and "--keep-env" in r for r in reasons), reasons


def test_a_server_that_plants_secrets_in_every_answer(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_loadtest_hostile import Background, _loadtest, secrets_app
    with Background(secrets_app(list(SECRETS.values()), HARMLESS[:7])) as srv:
        rc, run, out, err, _ = _loadtest(srv.url, tmp_path, "--model", "fake", "--concurrency", "2", "--requests",
                                         "6", "--warmup", "0", "--output-len", "4", "--html", str(tmp_path / "lt.html"))
    assert rc == 0 and run is not None, err
    for doc in (json.dumps(run), (tmp_path / "lt.html").read_text(), out, err):
        assert not _leaks(doc), _leaks(doc)
    assert set(HARMLESS[:7]) <= set(run["loadtest"]["server"]["models"])  # model names come through intact
