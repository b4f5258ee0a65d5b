"""Redaction by value: each kind of credential, what is kept, what is left alone, and a capture
with planted secrets whose bundle and Run JSON are searched for every one of them."""

import json

import pytest
from fakes import FakeHost

from perfstack import redact
from perfstack.audit import audit
from perfstack.cli.main import main
from perfstack.host.capture import RecordingHost, write
from perfstack.probes import collect
from perfstack.rules import select_checks

# (text, what must disappear, what must stay)
CASES = [
    ("PIP_INDEX_URL=https://user:pw@host/simple", "user:pw", "PIP_INDEX_URL=https://***@host/simple"),
    ("redis://:s3cretpass@cache:6379/0", "s3cretpass", "redis://***@cache:6379/0"),
    ("x ghp_k3Yq9VfP2mXr8LwT5nBz1cHd7JsA4gUe6Roi y", "k3Yq9VfP2mXr8LwT5nBz1cHd7JsA4gUe6Roi", "x ghp_*** y"),
    ("github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ01", "11ABCDEFG0aBcDeFgHiJkL", "github_pat_***"),
    ("--token hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890", "QwErTyUiOpAsDfGhJkLzXcVbNm", "hf_***"),
    ("k=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "Ab3dEf6hIj9kLm2nOp5qRs8", "k=sk-proj-***"),
    ("xoxb-2048-40962048-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8", "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8", "xoxb-***"),
    ("id AKIAQ3EGXPTNZ7L5KV2M.", "Q3EGXPTNZ7L5KV2M", "id AKIA***."),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI0MiJ9.c2lnbmF0dXJlX19zaWdu", "eyJzdWIiOiI0MiJ9", "eyJ***"),
    ("Server=s;Password=Qz8!mK2#vL5p;Database=d", "Qz8!mK2#vL5p", "Password=***;Database=d"),
    ("a\x00--password\x00hunter22\x00--lr\x000.1", "hunter22", "--password\x00***\x00--lr\x000.1"),
    ("KEY=Zm9vYmFyQmF6UXV4MTIzNDU2Nzg5MEFiQ2RFZkdoSWpLbE1u", "Zm9vYmFyQmF6UXV4MTIz", "KEY=***"),
    ("AWS=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Lm3Xa9T", "bPxRfiCYzq8Lm3Xa9T", "AWS=***"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA",
     "-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----"),
]


@pytest.mark.parametrize("text,secret,kept", CASES)
def test_each_kind_of_credential(text, secret, kept):
    out = redact.text(text)
    assert secret not in out and kept in out


@pytest.mark.parametrize("text", [
    "/usr/local/cuda-12.4/lib64:/opt/conda/lib/python3.11/site-packages/nvidia/cudnn/lib",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b4b0b822cd15d6c15b0f00a08",
    "GPU-5fa1c1b2-4b0e-4ad4-9a77-1234567890ab",
    "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=3f2a1b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b ro iommu=pt",
    "TOKENIZERS_PARALLELISM=false --token-limit 4096 --max-tokens 512",
    "/root/.cache/huggingface/hub/models--x--y/snapshots/0e9e39f249a16976918f6564b8830bc894c89659",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "https://download.pytorch.org/whl/cu130",
    "HF_TOKEN=REDACTED",
    "",
])
def test_harmless_text_is_left_alone(text):
    assert redact.text(text) == text


def test_idempotent_and_json_values():
    once = redact.text(CASES[0][0])
    assert redact.text(once) == once
    v = {"url": "https://u:p@h/x", "n": 3, "l": ["hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890"], "t": ("a",)}
    assert redact.value(v) == {"url": "https://***@h/x", "n": 3, "l": ["hf_***"], "t": ("a",)}


def test_entropy():
    assert redact.entropy("aaaa") == 0 and redact.entropy("ab") == 1.0
    assert not redact.looks_random("a" * 40) and not redact.looks_random("0123456789abcdef" * 3)


# -- planted secrets through capture, the bundle, the doctor and the Run ---------------------
PLANTED = ["alice:Pa55w0rdXYZ", "k3Yq9VfP2mXr8LwT5nBz1cHd7JsA4gUe6Roi", "QwErTyUiOpAsDfGhJkLzXcVbNm1234567890",
           "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "Q3EGXPTNZ7L5KV2M", "r3d1sP4ssw0rd99", "correcthorsebattery",
           "Zk3pQ9wX2mR7tL5vN8bC1yH4jD6fG0sA", "eyJzdWIiOiI0MiIsIm5hbWUiOiJib2IifQ"]


def planted_host():
    return FakeHost(
        files={"/proc/sys/kernel/hostname": "node1\n", "/proc/sys/vm/swappiness": "10\n",
               "/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro ipxe.url=https://alice:Pa55w0rdXYZ@boot.corp/img "
                                "token=ghp_k3Yq9VfP2mXr8LwT5nBz1cHd7JsA4gUe6Roi\n"},
        env={"PIP_INDEX_URL": "https://alice:Pa55w0rdXYZ@pypi.corp/simple",
             "HF_ENDPOINT": "https://hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890@hf.corp",
             "TORCH_EXTRA_ARGS": "--api-key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
             "NCCL_NET_PLUGIN_CONF": "aws_key=AKIAQ3EGXPTNZ7L5KV2M",
             "TRITON_CACHE_URL": "redis://:r3d1sP4ssw0rd99@cache:6379/0",
             "SLURM_JOB_COMMAND": "train.py --password correcthorsebattery",
             "CUDA_CACHE_KEYS": "Zk3pQ9wX2mR7tL5vN8bC1yH4jD6fG0sA",
             "HF_HUB_JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI0MiIsIm5hbWUiOiJib2IifQ.c2lnbmF0dXJlX19zaWdu",
             "NCCL_DEBUG": "INFO"})


def leaks(text):
    return [s for s in PLANTED if s in text]


def test_capture_and_doctor_carry_no_planted_secret(tmp_path, capsys):
    rec = RecordingHost(planted_host())
    collect(rec)
    rec.environ()
    write(rec, tmp_path / "b", {"tool_version": "test"})
    bundle = "\n".join(p.read_text(errors="replace") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert "PIP_INDEX_URL" in bundle and "https://***@pypi.corp/simple" in bundle  # kept useful
    assert leaks(bundle) == []
    main(["doctor", "--bundle", str(tmp_path / "b"), "--json", "--fail-on", "never"])
    out = capsys.readouterr().out
    assert json.loads(out)["facts"] and leaks(out) == []


def test_a_live_run_is_scrubbed_before_any_output(tmp_path):
    run = audit(planted_host(), select_checks([]), "live machine")
    raw = run.to_json()
    assert leaks(raw), "the planted secrets must reach the Run for this test to mean anything"
    assert leaks(redact.scrub_run(run).to_json()) == []
