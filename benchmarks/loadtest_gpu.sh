#!/usr/bin/env bash
# Load-test a real continuous-batching server on one GPU and check findings by changing its configuration.
#
#   bash benchmarks/loadtest_gpu.sh OUTDIR [STAGE...]      stages: sweep kv graphs prefill peers (default: all)
#
# peers: perfstack beside AIPerf (when the aiperf command is installed; else perfstack and the referee only) and a
# minimal referee client, on single-turn, multi-turn and trace-replay workloads (benchmarks/loadtest_vs_aiperf.py).
# Pin the clients apart from the server where the host has the cores: SERVER_CPUS=0-7 CLIENT_CPUS=8-15 (taskset;
# an unpinned server shares the clients' cores, and a CPU-bound server then runs at the speed of the busiest
# client beside it); ROUNDS=N
# alternating rounds per tool (default 3); PEERS="multi-turn trace" picks workloads (default: all three).
#
# Needs: torch + transformers with CUDA; the serving and client wheels in .whl/ (offline install). The model is
# a random-weight ~1.2B Llama (benchmarks/loadtest_model.py), served by `transformers serve --continuous-batching`.
set -u
out=${1:?usage: loadtest_gpu.sh OUTDIR [STAGE...]}; shift
stages=${*:-sweep kv graphs prefill peers}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --find-links .whl rich msgspec aiohttp prometheus_client fastapi uvicorn \
        starlette pydantic openai accelerate 2>&1 | tail -2
    python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
fi
model=/tmp/perfstack-lt-${TINY:+tiny}1b  # TINY=1: a 2-layer model, to try the script on a CPU
[ -f $model/config.json ] || python3 benchmarks/loadtest_model.py $model ${TINY:+--tiny} || exit 1
mkdir -p ~/.cache/huggingface/hub  # transformers serve lists models from the hub cache (HTTP 500 without it)
port=8765
url=http://127.0.0.1:$port
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee "$out/gpu.txt"

serve() {  # serve NAME [transformers serve flags...]
    local name=$1; shift
    local t0=$(date +%s.%N)
    setsid ${SERVER_CPUS:+taskset -c $SERVER_CPUS} transformers serve $model --host 127.0.0.1 --port $port --continuous-batching "$@" \
        > "$out/server-$name.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 240); do
        curl -s -m 2 $url/v1/models > /dev/null && break
        kill -0 $server_pid 2> /dev/null || { echo "server $name died"; tail -20 "$out/server-$name.log"; return 1; }
        sleep 0.5
    done
    # one request so that lazy initialisation (cache, graphs) is not in the first level
    curl -s -m 120 $url/v1/completions -H 'Content-Type: application/json' \
        -d '{"model":"'$model'","prompt":"w5 w6","max_tokens":8}' > /dev/null
    echo "server $name ($*) ready in $(python3 -c "import time;print(round(time.time()-$t0,1))") s"
}
stop() { kill -TERM -- -$server_pid 2> /dev/null; wait $server_pid 2> /dev/null; sleep 2; }
lt() {  # lt NAME [perfstack loadtest flags...]
    local name=$1; shift
    timeout 300 python3 -m perfstack --no-color loadtest $url --model $model --tokenizer $model --model-config $model/config.json \
        --gpu h100-sxm -o "$out/$name.json" "$@" > "$out/$name.txt" 2> "$out/$name.err"
    echo "loadtest $name rc=$?"; cat "$out/$name.txt"
}
common=${COMMON:-"--input-len 256 --output-len 64 --requests 24 --slo ttft=300ms,itl=40ms"}
for s in $stages; do
    case $s in
    sweep)  # the default configuration, from one stream to saturation
        serve default && lt sweep-default --sweep --sweep-max ${SWEEP_MAX:-128} $common; stop ;;
    kv)  # a KV cache of 12 blocks of 256 tokens: at most ~6 sequences of 320 tokens at once
        serve kv12 --cb-num-blocks 12 && lt sweep-kv12 --sweep --sweep-max 128 $common; stop ;;
    graphs)  # decode far from its bandwidth bound: does capturing decode in CUDA graphs close the gap?
        serve eager --no-cb-use-cuda-graph
        lt decode-eager --concurrency 1,8 --input-len 256 --output-len 128 --requests 12; stop
        serve graphs --cb-use-cuda-graph && lt decode-graphs --concurrency 1,8 --input-len 256 --output-len 128 --requests 12; stop ;;
    prefill)  # long prompts arriving while others decode: one big prefill per step vs 512-token chunks
        serve chunk8192 --cb-max-batch-tokens 8192 && lt prefill-8192 --rate 3 --input-len 6000 --output-len 96 --requests 40 --spread 0.3; stop
        serve chunk512 --cb-max-batch-tokens 512 && lt prefill-512 --rate 3 --input-len 6000 --output-len 96 --requests 40 --spread 0.3; stop ;;
    peers)  # the same requests from three clients; each judged by its distance from the referee
        serve default || continue
        pin=${CLIENT_CPUS:+taskset -c $CLIENT_CPUS}
        peer_flags="--no-aiperf"; command -v aiperf > /dev/null && peer_flags=""
        for w in ${PEERS:-single multi-turn trace}; do
            $pin python3 benchmarks/loadtest_vs_aiperf.py $url --model $model --tokenizer $model --workload $w \
                --concurrency 8 --requests 96 --isl 256 --osl 64 --turns 4 --rate 6 --rounds ${ROUNDS:-3} $peer_flags \
                --out "$out/peers-$w" > "$out/peers-$w.txt" 2>&1
            echo "peers $w rc=$?"; tail -9 "$out/peers-$w.txt"
        done
        stop ;;
    esac
done
