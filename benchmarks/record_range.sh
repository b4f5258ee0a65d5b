#!/bin/bash
# Records the four fp32 transformer workloads that checked the GPU-side range (docs/profile.md, second
# validation half) on a host with 4 GPUs, one workload per GPU: each profiled (2 steps, memory events on) and
# tried without the profiler (TF32 and its manifest's other fixes, 2 alternating rounds of 8 steps after 3
# warm-up) by benchmarks/fix_matrix.py.
#
#   bash benchmarks/record_range.sh OUT
#
# Then copy OUT/traces/<workload>/*.json.gz into tests/fixtures/traces/validation/h200-holdout as
# <workload>.pt.trace.json.gz and the measured gains into its measured.json (the step measured without the
# profiler is OUT/<workload>.profile.json's profile.unprofiled.step_ms).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: record_range.sh OUT}
python3 benchmarks/fix_matrix.py run --out "$OUT" --rounds 2 --steps 8 --warmup 3 --no-combine --profile-steps 2 \
    --only t5,bart,bert-mlm,vit-b16 --gpus 4
