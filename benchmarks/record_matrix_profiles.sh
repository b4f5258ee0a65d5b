#!/bin/bash
# Profiles again, with the rules as they are now, the fix matrix's workloads whose traces the repository does
# not keep, beside the trials stored in benchmarks/results/fix-matrix-h200: `fix_matrix.py run` skips a
# workload's trial where its try.json is already in OUT, so only the profiles run (2 steps, memory events
# on). `fix_matrix.py score` then reads each of these workloads' predictions from a profile made by the
# current code, not from the one stored when the trial ran. On a host with 4 GPUs:
#
#   bash benchmarks/record_matrix_profiles.sh OUT [DEADLINE_S]
#
# The order is the one worth most first: the small-kernel and optimizer steps, the conv nets, the rest, and
# the decode loops (whose trials were too noisy to count) last.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: record_matrix_profiles.sh OUT [DEADLINE_S]}
DEADLINE=${2:-0}
export NCCL_NVLS_ENABLE=0
W=adam-many-params,tiny-launch-bound,dlrm,mobilenet-v3,vit-scratch,varlen-churn,unet-diffusion,conv-vae,moe-loop
W=$W,mlp-fp32,text-loader,bart,vit-b16,hf-generate-b1,hf-generate-b32,kv-cat-b1
mkdir -p "$OUT"
for w in ${W//,/ }; do cp "benchmarks/results/fix-matrix-h200/$w.try.json" "$OUT/"; done
python3 benchmarks/fix_matrix.py run --out "$OUT" --gpus 4 --profile-steps 2 --only "$W" \
    --deadline-s "$DEADLINE" --margin-s 60 --timeout-s 300
