#!/bin/bash
# Records the fixed variants of the hold-out library's workloads (tests/fixtures/traces/validation/h200-holdout):
# each workload profiled as `perfstack try` runs it with its kind's fix applied (the fix put in place at the
# script's `import torch` by perfstack's trial child, so the script itself is unchanged), or with the script's
# own fixed flag where the fix is a change of code. The library's test checks that a fixed variant no longer
# raises the finding its fix answers. Also records the streaming-window copies workload, slow and fixed, and
# times it without the profiler (alternating rounds, wall time of the whole run, the minimum kept).
#
#   bash benchmarks/record_fixed.sh OUT LANE        LANE: copies | decay | models | convs | graphs | graphs2 | ddp (one GPU each;
#                                                 ddp two) | smoke (a CPU check of the script)
#
# Run the lanes side by side, one per GPU (CUDA_VISIBLE_DEVICES), each pinned to its own cores.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: record_fixed.sh OUT LANE}
LANE=${2:?usage: record_fixed.sh OUT LANE}
mkdir -p "$OUT/traces"
export NCCL_NVLS_ENABLE=0 PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
W=benchmarks/workloads
ARM=src/perfstack/trial/_arm.py

# profile NAME TIMEOUT [profile flags...] -- COMMAND...: one trace per rank, renamed NAME[.rankN].pt.trace.json.gz
profile() {
    local name=$1 limit=$2; shift 2
    local dir="$OUT/raw/$name"
    mkdir -p "$dir"
    timeout "$limit" python3 -m perfstack profile --stop-after-window -q --out-dir "$dir" \
        -o "$OUT/$name.profile.json" "$@" > "$OUT/$name.profile.txt" 2>&1
    echo "profile $name rc=$?"
    for f in "$dir"/*.pt.trace.json*; do
        [ -e "$f" ] || continue
        local rank; rank=$(basename "$f" | grep -o '\.rank[0-9]*\.' || true)
        cp "$f" "$OUT/traces/$name${rank:-.}pt.trace.json.gz"
    done
}
# fixed NAME FIX STEPS TIMEOUT [profile flags...] -- SCRIPT ARGS...: the workload with a perfstack fix applied
fixed() {
    local name=$1 fix=$2 steps=$3 limit=$4; shift 4
    local pflags=()
    while [ "$1" != "--" ]; do pflags+=("$1"); shift; done; shift
    local script=$1; shift
    local args; args=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@")
    local cfg="{\"script\": \"$script\", \"args\": $args, \"fixes\": [\"$fix\"], \"warmup\": 0, \"steps\": $steps,"
    cfg+=" \"status\": \"$OUT/$name.arm.json\"}"
    profile "$name" "$limit" "${pflags[@]}" -- python3 $ARM "$cfg"
}

# slow_and_fixed NAME SCRIPT ARGS...: a workload with its own --fixed flag, profiled both ways, then timed
# without the profiler in three alternating rounds of 6000 steps (wall time of each run)
slow_and_fixed() {
    local name=$1; shift
    profile "$name" 150 --skip-first 1500 --steps 4 -- python3 "$@"
    profile "$name-fixed" 150 --skip-first 1500 --steps 4 -- python3 "$@" --fixed
    for r in 1 2 3; do
        echo "round $r slow: $(timeout 100 python3 "$@" --steps 6000 | tail -1)"
        echo "round $r fixed: $(timeout 100 python3 "$@" --steps 6000 --fixed | tail -1)"
    done | tee "$OUT/$name.timing.txt"
}

case $LANE in
copies)
    slow_and_fixed stream-window $W/stream_window.py
    profile kv-cat-long-fixed 240 --skip-first 600 --steps 2 -- \
        python3 $W/kv_cat_decode.py --batch-size 64 --max-new-tokens 960 --static-cache
    fixed hf-grad-ckpt-fixed no-checkpointing 60 200 --steps 2 -- $W/hf_grad_ckpt_train.py ;;
decay)  # the streaming window read in order (pooled by age): its fix is a mirrored ring buffer
    slow_and_fixed stream-decay $W/stream_window.py --reader decay ;;
models)
    fixed gpt2-fixed tf32 60 200 --steps 2 -- $W/gpt2_train.py
    fixed llama-fixed bf16-autocast 60 200 --steps 2 -- $W/llama_train.py
    fixed ckpt-transformer-fixed no-checkpointing 60 200 --steps 2 -- $W/ckpt_transformer_train.py ;;
convs)
    fixed resnet18-fixed compile-cudagraphs 60 280 --skip-first 12 --steps 2 -- $W/resnet18_train.py
    fixed resnet50-fixed compile-cudagraphs 60 280 --skip-first 12 --steps 2 -- $W/resnet50_train.py ;;
graphs)  # launch-bound steps whose launches are mostly a per-parameter optimizer's, the model compiled with graphs
    fixed adam-many-params-graphed compile-cudagraphs 60 280 --skip-first 12 --steps 2 -- $W/adam_many_params_train.py ;;
graphs2)
    fixed tiny-launch-bound-graphed compile-cudagraphs 60 280 --skip-first 12 --steps 2 -- $W/tiny_launch_bound_train.py ;;
ddp)
    export NCCL_P2P_DISABLE=1  # the job's stale setting, as in the library's slow variant
    fixed ddp-accum-fixed ddp-no-sync 60 240 --nproc 2 --steps 2 -- $W/ddp_accum_train.py
    unset NCCL_P2P_DISABLE
    fixed ddp-accum-8-fixed ddp-no-sync 60 240 --nproc 2 --steps 2 -- \
        $W/ddp_accum_train.py --micro-batch 4 --accum 8 ;;
smoke)  # on a CPU: the two ways of recording, on small sizes
    profile stream-window-small 200 --skip-first 20 --steps 2 -- python3 $W/stream_window.py --small --steps 40
    fixed mlp-tf32 tf32 100 200 --steps 2 -- examples/train_mlp.py --steps 40 ;;
*) echo "unknown lane $LANE"; exit 2 ;;
esac
