#!/bin/bash
# Records a copies workload for the profile's hold-out library on one GPU: the corpus-embedding loop that
# collects its embeddings with torch.cat per batch (benchmarks/workloads/embed_corpus.py), profiled in the
# middle of its run (slow and fixed), then timed without the profiler: alternating slow/fixed rounds of the
# whole run, wall time of each, the minimum kept.
#
#   bash benchmarks/record_copies.sh OUT [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: record_copies.sh OUT [ROUNDS]}
ROUNDS=${2:-3}
W="benchmarks/workloads/embed_corpus.py --batches 4000"
mkdir -p "$OUT"
for v in slow fixed; do
    flag=""; [ $v = fixed ] && flag="--fixed"
    timeout 120 python3 -m perfstack profile --skip-first 2000 --steps 4 --stop-after-window -q \
        --out-dir "$OUT/traces/embed-corpus-$v" -o "$OUT/embed-corpus-$v.profile.json" -- python3 $W $flag \
        > "$OUT/embed-corpus-$v.profile.txt" 2>&1
    echo "profile $v rc=$?"
done
for r in $(seq "$ROUNDS"); do
    echo "round $r slow: $(timeout 100 python3 $W | tail -1)"
    echo "round $r fixed: $(timeout 100 python3 $W --fixed | tail -1)"
done | tee "$OUT/embed-corpus.timing.txt"
