#!/bin/bash
# Records a copies workload for the profile's hold-out library on one GPU, profiled in the middle of its run
# (slow and fixed: the script's own --fixed flag), then timed without the profiler: alternating slow/fixed
# rounds of the whole run, the wall time each run prints, the minimum kept.
#
#   bash benchmarks/record_copies.sh OUT [WORKLOAD] [ROUNDS]
#
# WORKLOAD: embed-corpus (default: the corpus embedder that collects its embeddings with torch.cat per batch),
# rnn-decoder (a GRU decoder unrolled in Python, outputs gathered with torch.cat per time step), moco-queue
# (contrastive training whose queue of negatives is rolled with torch.cat per step).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: record_copies.sh OUT [WORKLOAD] [ROUNDS]}
NAME=${2:-embed-corpus}
ROUNDS=${3:-3}
case $NAME in
embed-corpus) W="benchmarks/workloads/embed_corpus.py --batches 4000"; SKIP=2000; STEPS=4; LIMIT=100 ;;
rnn-decoder) W="benchmarks/workloads/rnn_decoder_train.py --steps 60"; SKIP=10; STEPS=2; LIMIT=150 ;;
moco-queue) W="benchmarks/workloads/moco_queue_train.py --steps 1000"; SKIP=100; STEPS=4; LIMIT=100 ;;
*) echo "unknown workload $NAME" >&2; exit 2 ;;
esac
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
for v in slow fixed; do
    flag=""; [ $v = fixed ] && flag="--fixed"
    timeout 180 python3 -m perfstack profile --skip-first $SKIP --steps $STEPS --stop-after-window -q \
        --out-dir "$OUT/traces/$NAME-$v" -o "$OUT/$NAME-$v.profile.json" -- python3 $W $flag \
        > "$OUT/$NAME-$v.profile.txt" 2>&1
    echo "profile $v rc=$?"
done
for r in $(seq "$ROUNDS"); do
    echo "round $r slow: $(timeout $LIMIT python3 $W | tail -1)"
    echo "round $r fixed: $(timeout $LIMIT python3 $W --fixed | tail -1)"
done | tee "$OUT/$NAME.timing.txt"
