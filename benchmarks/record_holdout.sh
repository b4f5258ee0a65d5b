#!/bin/bash
# Records the profile's hold-out validation library (tests/fixtures/traces/validation/h200-holdout) on a
# host with 4 GPUs: every workload is profiled (2 steps, memory events on) and tried without the
# profiler (2 alternating rounds of 8 steps after 3 warm-up), by benchmarks/fix_matrix.py; the
# long-context decode is timed slow vs fixed by hand (its fix is a script flag, not a perfstack fix).
#
#   bash benchmarks/record_holdout.sh OUT
#
# Then copy OUT/traces/<workload>/*.json.gz and the measured gains into the library's measured.json
# (the test reads `unprofiled_step_ms` from OUT/<workload>.profile.json's profile.unprofiled.step_ms).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: record_holdout.sh OUT}
export NCCL_NVLS_ENABLE=0
W=ddp-accum-8,ddp-accum,fsdp,resnet18,gpt2,ckpt-transformer,kv-cat-b32,hf-grad-ckpt,resnet50,llama
python3 benchmarks/fix_matrix.py run --out "$OUT" --rounds 2 --steps 8 --warmup 3 --no-combine --profile-steps 2 --only $W
KV="benchmarks/workloads/kv_cat_decode.py --batch-size 64 --max-new-tokens 960"
python3 -m perfstack profile --skip-first 600 --steps 2 --stop-after-window -q \
    --out-dir "$OUT/traces/kv-cat-long" -o "$OUT/kv-cat-long.profile.json" -- python3 $KV
for r in 1 2 3; do
    echo "round $r slow: $(python3 $KV --iters 1920 | tail -1)"
    echo "round $r fixed: $(python3 $KV --iters 1920 --static-cache | tail -1)"
done | tee "$OUT/kv-cat-long.timing.txt"
