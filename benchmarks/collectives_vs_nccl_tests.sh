#!/usr/bin/env bash
# perfstack's collectives and nccl-tests in one run, size by size.
#
#   benchmarks/collectives_vs_nccl_tests.sh [GPUS] [OUTDIR]
#
# GPUS (default 1): nccl-tests' -g and perfstack's world size. OUTDIR (default $OUT, else
# ./collectives-vs-nccl-tests): the nccl-tests logs and the side-by-side table.
#
# Needs nccl-tests' source in .anchors/nccl-tests (an ignored folder; NCCL_TESTS_SRC overrides),
# nvcc (CUDA_HOME, default /usr/local/cuda) and NCCL headers and library: NCCL_HOME, else the system's
# (/usr/include/nccl.h), else the nvidia-nccl wheel PyTorch was installed with. Builds only the six
# binaries it runs, for this GPU's architecture, then runs each twice with -b 1K -e 1G -f 4 -g GPUS:
# calls launched one by one (<binary>.log) and captured in a CUDA graph replayed GRAPH_LAUNCHES times
# (-G, <binary>.graph.log), each for CYCLES cycles (-N) of ITERS calls (-n) after WARMUP calls (-w);
# then perfstack's collectives over the same sizes, graph-replayed and eager, and a copy check.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#
# Environment: ITERS (20, nccl-tests' default), WARMUP (5), CYCLES (5), GRAPH_LAUNCHES (10); BUILD_ONLY=1
# stops after the build; PROCS=gpu runs nccl-tests one process per GPU (mpirun) instead of one
# process driving them all.
set -euo pipefail

GPUS=${1:-1}
OUTDIR=${2:-${OUT:-collectives-vs-nccl-tests}}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${NCCL_TESTS_SRC:-$ROOT/.anchors/nccl-tests}
BUILD=${NCCL_TESTS_BUILD:-$ROOT/.anchors/nccl-tests-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PY=${PYTHON:-python3}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
CYCLES=${CYCLES:-5}
GRAPH_LAUNCHES=${GRAPH_LAUNCHES:-10}
BINARIES="all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf alltoall_perf sendrecv_perf"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}

[ -d "$SRC/src" ] || { echo "error: no nccl-tests source in $SRC (copy it there)" >&2; exit 2; }
mkdir -p "$OUTDIR" "$BUILD"
OUTDIR=$(cd "$OUTDIR" && pwd)

# -- NCCL: headers and a libnccl.so to link against ---------------------------------------------
# Like with like: nccl-tests must run on the NCCL that PyTorch loads (a machine can hold a system NCCL
# of another version beside the one PyTorch's wheels bring; latency at small sizes differs between
# releases). The library is found where torch mapped it after initialising NCCL; its headers are the
# nvidia-nccl wheel's include/ beside it. NCCL_HOME overrides; a torch with NCCL linked in statically
# maps no libnccl, and then the system's or the wheel's is used.
if [ -z "${NCCL_HOME:-}" ]; then
  TORCH_NCCL=$("$PY" - <<'PYEOF' 2>/dev/null || true
import os, torch
try:
    torch.cuda.nccl.version()
except Exception:
    pass
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    if os.path.basename(path).startswith("libnccl.so"):
        print(os.path.realpath(path))
        break
PYEOF
)
  if [ -n "$TORCH_NCCL" ] && [ -f "$(dirname "$TORCH_NCCL")/../include/nccl.h" ]; then
    SRC_NCCL=$(cd "$(dirname "$TORCH_NCCL")/.." && pwd)
    NCCL_HOME=$BUILD/nccl
    mkdir -p "$NCCL_HOME/lib"
    ln -sfn "$SRC_NCCL/include" "$NCCL_HOME/include"
    ln -sf "$TORCH_NCCL" "$NCCL_HOME/lib/libnccl.so"  # the linker wants libnccl.so
    ln -sf "$TORCH_NCCL" "$NCCL_HOME/lib/libnccl.so.2"
  elif [ -f /usr/include/nccl.h ]; then
    NCCL_HOME=/usr
  else
    WHEEL=$("$PY" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])')
    NCCL_HOME=$BUILD/nccl
    mkdir -p "$NCCL_HOME/lib"
    ln -sfn "$WHEEL/include" "$NCCL_HOME/include"
    ln -sf "$WHEEL/lib/libnccl.so.2" "$NCCL_HOME/lib/libnccl.so"
    ln -sf "$WHEEL/lib/libnccl.so.2" "$NCCL_HOME/lib/libnccl.so.2"
  fi
fi
NCCL_LIB=$NCCL_HOME/lib
[ -d "$NCCL_HOME/lib64" ] && [ ! -e "$NCCL_LIB/libnccl.so" ] && NCCL_LIB=$NCCL_HOME/lib64
[ -e "$NCCL_HOME/lib/x86_64-linux-gnu/libnccl.so" ] && NCCL_LIB=$NCCL_HOME/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "NCCL from $NCCL_HOME ($NCCL_LIB)" >&2

# -- build the six binaries for this GPU only ---------------------------------------------------
SM=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
# PROCS=gpu: one process per GPU, as PyTorch runs (mpirun; needs an MPI with mpicc). Otherwise one
# process drives every GPU (-g GPUS), nccl-tests' usual way, where NCCL can use direct pointers
# between GPUs of one process.
MPI_ARGS="MPI=0"
RUN=()
GRAPH_RUN=()
if [ "${PROCS:-}" = gpu ]; then
  MPI_INC=$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')
  [ -n "$MPI_INC" ] || { echo "error: PROCS=gpu needs an MPI (mpicc -showme:incdirs found nothing)" >&2; exit 2; }
  MPI_ARGS="MPI=1 MPI_HOME=$(dirname "$MPI_INC")"
  BUILD=$BUILD-mpi
  mkdir -p "$BUILD"
  RUN=(mpirun -np "$GPUS" --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x PATH)
  GRAPH_RUN=("${RUN[@]}" -x NCCL_GRAPH_MIXING_SUPPORT)
fi
TARGETS=""
for b in $BINARIES; do TARGETS="$TARGETS $BUILD/$b"; done
t0=$(date +%s)
make -C "$SRC/src" -j"$(nproc)" $MPI_ARGS CUDA_HOME="$CUDA_HOME" NCCL_HOME="$NCCL_HOME" \
  NVCC_GENCODE="-gencode=arch=compute_${SM},code=sm_${SM}" BUILDDIR="$BUILD" \
  $TARGETS > "$OUTDIR/build.log" 2>&1 \
  || { tail -40 "$OUTDIR/build.log" >&2; exit 1; }
echo "built nccl-tests in $(( $(date +%s) - t0 )) s (sm_${SM})" >&2
[ -n "${BUILD_ONLY:-}" ] && { echo "BUILD_ONLY: binaries in $BUILD, libnccl in $NCCL_LIB" >&2; exit 0; }

# -- nccl-tests, then perfstack ---------------------------------------------------------------------
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > "$OUTDIR/gpus.txt"
PER_PROC_GPUS=$GPUS
[ "${PROCS:-}" = gpu ] && PER_PROC_GPUS=1
COMMON="-b 1K -e 1G -f 4 -g $PER_PROC_GPUS -w $WARMUP -n $ITERS -N $CYCLES"
echo "nccl-tests: $COMMON (eager), and with -G $GRAPH_LAUNCHES (graph)" >&2
for b in $BINARIES; do
  "${RUN[@]}" "$BUILD/$b" $COMMON > "$OUTDIR/$b.log" 2>&1 || echo "warning: $b exited $?" >&2
  # as perfstack's graph-replaying workers run (collectives.GRAPH_ENV): NCCL's graph-mixing support off
  NCCL_GRAPH_MIXING_SUPPORT=${NCCL_GRAPH_MIXING_SUPPORT:-0} \
    "${GRAPH_RUN[@]}" "$BUILD/$b" $COMMON -G "$GRAPH_LAUNCHES" > "$OUTDIR/$b.graph.log" 2>&1 \
    || echo "warning: $b -G $GRAPH_LAUNCHES exited $?" >&2
  grep -m1 "nccl-library" "$OUTDIR/$b.log" >&2 || true
done
"$PY" "$ROOT/benchmarks/collectives_vs_nccl_tests.py" --world "$GPUS" --logs "$OUTDIR" \
  --also-torch --out "$OUTDIR/collectives-vs-nccl-tests-${GPUS}gpu.md"
