"""How many planted credentials perfstack's redaction removes, and how many harmless strings it
damages, next to detect-secrets (if importable) on the same strings.

    python benchmarks/redaction_coverage.py

A secret counts as caught when no 8-character piece of it survives (the part listed, without the
prefix that names the kind of token, which redaction keeps on purpose) (for perfstack: in the redacted
line; for detect-secrets: when a reported secret overlaps it). A benign string counts as a false
positive when perfstack changes it or detect-secrets reports anything in it. The secrets are
made up in the shapes the issuers document; none is live.
"""

from __future__ import annotations

import time

from perfstack import redact

# (the line as it would appear in env.json, a command line or a fact; the secret inside it)
SECRETS = [
    ("PIP_INDEX_URL=https://alice:Pa55w0rdXYZ@pypi.corp.example/simple", "alice:Pa55w0rdXYZ"),
    ("git+https://ghp_k3Yq9VfP2mXr8LwT5nBz1cHd7JsA4gUe6Roi@github.com/org/repo", "k3Yq9VfP2mXr8LwT5nBz1cHd7JsA4gUe6Roi"),
    ("GH=github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdefGHIJKLmnopQRSTuvwx", "11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ"),
    ("huggingface-cli login --token hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890", "QwErTyUiOpAsDfGhJkLzXcVbNm1234567890"),
    ("OPENAI=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"),
    ("ANTHROPIC=sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa", "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"),
    ("SLACK_HOOK=xoxb-2048-40962048-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8", "2048-40962048-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8"),
    ("aws_access_key_id AKIAQ3EGXPTNZ7L5KV2M", "Q3EGXPTNZ7L5KV2M"),
    ("AWS_SECRET=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", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Lm3Xa9T"),
    ("Authorization=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MiIsIm5hbWUiOiJib2IifQ.c2lnbmF0dXJlX19zaWduYXR1cmVfXzEyMw",
     "eyJzdWIiOiI0MiIsIm5hbWUiOiJib2IifQ"),
    ("DATABASE=postgresql://svc:Tr0ub4dor&3@db.internal:5432/metrics", "svc:Tr0ub4dor&3"),
    ("redis://:r3d1sP4ssw0rd99@cache:6379/0", "r3d1sP4ssw0rd99"),
    ("Server=tcp:sql.example.net;Database=db;User ID=app;Password=Qz8!mK2#vL5p;", "Qz8!mK2#vL5p"),
    ("DefaultEndpointsProtocol=https;AccountName=st;AccountKey=bXlzZWNyZXRrZXlteXNlY3JldGtleTEyMzQ1Njc4OTA=;",
     "bXlzZWNyZXRrZXlteXNlY3JldGtleTEyMzQ1Njc4OTA="),
    ("python train.py --wandb-api-key Zk3pQ9wX2mR7tL5vN8bC1yH4jD6fG0sA --epochs 3", "Zk3pQ9wX2mR7tL5vN8bC1yH4jD6fG0sA"),
    ("torchrun\x00train.py\x00--password\x00correcthorsebatterystaple\x00--lr\x000.1", "correcthorsebatterystaple"),
    ("CUSTOM=Zm9vYmFyQmF6UXV4MTIzNDU2Nzg5MEFiQ2RFZkdoSWpLbE1u", "Zm9vYmFyQmF6UXV4MTIzNDU2Nzg5MEFiQ2RFZkdoSWpLbE1u"),
    ("GITLAB=glpat-Xy7zAb9cDe2fGh4iJk6L", "Xy7zAb9cDe2fGh4iJk6L"),
    ("curl -H 'Authorization: Bearer 9aB8cD7eF6gH5iJ4kL3mN2oP1qR0sT' https://api.example", "9aB8cD7eF6gH5iJ4kL3mN2oP1qR0sT"),
]

BENIGN = [
    "/usr/local/cuda-12.4/lib64:/opt/conda/lib/python3.11/site-packages/nvidia/cudnn/lib:/usr/lib/x86_64-linux-gnu",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b4b0b822cd15d6c15b0f00a08",
    "git commit 4cfc852e1a7b9d03c5f6e8a2b4d6c8e0f1a3b5c7",
    "GPU-5fa1c1b2-4b0e-4ad4-9a77-1234567890ab",
    "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=3f2a1b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b ro quiet splash iommu=pt",
    "Linux-6.8.0-45-generic-x86_64-with-glibc2.39",
    "torch-2.13.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
    "TOKENIZERS_PARALLELISM=false NCCL_SOCKET_IFNAME=eth0 MAX_JOBS=8",
    "python -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 256",
    "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B/snapshots/0e9e39f249a16976918f6564b8830bc894c89659",
    "nvidia-smi: NVIDIA-SMI 580.95.05 Driver Version: 580.95.05 CUDA Version: 13.0",
    "CUDA_VISIBLE_DEVICES=0,1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "https://download.pytorch.org/whl/cu130",
    "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "docker.io/library/python@sha256:4e0b7f9c3b1f2a8d6e5c4b3a29180f7e6d5c4b3a29180f7e6d5c4b3a29180f7e",
    "--token-limit 4096 --max-tokens 512",
    "MALLOC_CONF=background_thread:true,dirty_decay_ms:10000,muzzy_decay_ms:10000",
    "HOME=/home/user PATH=/opt/conda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
    "pcie 0000:3b:00.0 NVIDIA H100 80GB HBM3 ServerSn 1654022012345",
    "nccl-2.28.9+cuda13.0 /opt/conda/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
]


def leaked(secret: str, out: str) -> bool:
    return any(secret[i:i + 8] in out for i in range(0, max(1, len(secret) - 7)))


def perfstack_scores() -> tuple[int, int, list[str]]:
    missed = [line for line, secret in SECRETS if leaked(secret, redact.text(line))]
    damaged = [line for line in BENIGN if redact.text(line) != line]
    return len(SECRETS) - len(missed), len(damaged), missed + damaged


def detect_secrets_scores() -> tuple[int, int, list[str]] | None:
    try:
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    # Ad hoc scanning searches eagerly (every word, no quoting needed); keep the entropy plugins'
    # default limits (base64 4.5, hex 3.0 bits per character) as a file scan would apply them.
    limits = {"Base64 High Entropy String": 4.5, "Hex High Entropy String": 3.0}
    with default_settings():
        def found(line: str) -> list[str]:
            return [s.secret_value or "" for s in scan_line(line.replace("\x00", " "))
                    if redact.entropy(s.secret_value or "") >= limits.get(s.type, 0.0)]

        caught = [line for line, secret in SECRETS
                  if any(v and (v in secret or secret in v or not leaked(secret, line.replace(v, ""))) for v in found(line))]
        flagged = [line for line in BENIGN if found(line)]
        missed = [line for line, _ in SECRETS if line not in caught]
        return len(caught), len(flagged), missed + flagged


def main() -> None:
    t0 = time.perf_counter()
    for _ in range(100):
        for line, _ in SECRETS:
            redact.text(line)
        for line in BENIGN:
            redact.text(line)
    per_line_us = (time.perf_counter() - t0) / 100 / (len(SECRETS) + len(BENIGN)) * 1e6
    rows = [("perfstack.redact", perfstack_scores())]
    ds = detect_secrets_scores()
    rows.append(("detect-secrets", ds) if ds else ("detect-secrets", None))
    print(f"{len(SECRETS)} planted secrets, {len(BENIGN)} benign strings (paths, hashes, ids, command lines)")
    for name, score in rows:
        if score is None:
            print(f"{name:18s} not installed")
            continue
        caught, fp, odd = score
        print(f"{name:18s} caught {caught}/{len(SECRETS)}   false positives {fp}/{len(BENIGN)}")
        for line in odd:
            print(f"    {line[:100]!r}")
    print(f"perfstack.redact: {per_line_us:.1f} µs per line")


if __name__ == "__main__":
    main()
