#!/usr/bin/env bash
# The GPU benchmarks in one run, after scripts/gpu-check.sh has built $BUILD_DIR on the same machine: every
# kernel and GEMM version beside cuBLAS (mnist-dp-bench --quick), the NCCL all-reduce (mnist-dp-allreduce-bench
# --quick), whole epochs with and without CUDA graphs and the fused head, for each hand-written GEMM
# (mnist-dp-bench --epoch), and mnist-dp against PyTorch on the same GPU (bench/compare.sh --device cuda: eager
# with the data on the device, torch.compile and CUDA graphs). Each stage has its own time limit and the whole
# stays inside BUDGET seconds, so that it fits one remote command; the summary is printed last.
#
# Environment: OUT (default build/gpu-bench), BUILD_DIR (default build/gpu), DATA (default .devdeps/data),
# PYTHON (the Python with PyTorch for the peers; default python3), EPOCHS (compare.sh's epochs, default 3),
# BUDGET (seconds, default 540).
# GPU_BENCH_DRY_RUN=1 goes on without a GPU (to test this script where there is none: each program then reports
# that no GPU is usable, and the summary says so).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD

OUT=${OUT:-$root/build/gpu-bench}
BUILD_DIR=${BUILD_DIR:-build/gpu}
DATA=${DATA:-$root/.devdeps/data}
PYTHON=${PYTHON:-python3}
EPOCHS=${EPOCHS:-3}
BUDGET=${BUDGET:-540}
DRY_RUN=${GPU_BENCH_DRY_RUN:-0}

mkdir -p "$OUT"
summary=$OUT/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
section() { echo; echo "==== gpu-bench: $* ===="; }

if ! nvidia-smi >/dev/null 2>&1 && [ "$DRY_RUN" != 1 ]; then
  echo "gpu-bench.sh: no usable GPU (nvidia-smi fails); nothing to measure here (GPU_BENCH_DRY_RUN=1 tests the script)" >&2
  exit 1
fi
for program in mnist-dp mnist-dp-bench mnist-dp-allreduce-bench; do
  if [ ! -x "$BUILD_DIR/$program" ]; then
    echo "gpu-bench.sh: $BUILD_DIR/$program is missing: run scripts/gpu-check.sh (or scripts/build.sh gpu) first" >&2
    exit 1
  fi
done
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
note "device: ${device:-none}; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)'); $(date -u +%Y-%m-%dT%H:%M:%SZ)"

# stage NAME LIMIT LOG COMMAND...: runs COMMAND with at most LIMIT seconds, and never past the budget; notes
# the exit code (77: the program found no usable GPU).
stage() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then
    note "$name: skipped, ${SECONDS}s spent of the ${BUDGET}s budget"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  section "$name (at most ${limit}s)"
  local start=$SECONDS
  timeout "$limit" "$@" >"$log" 2>&1
  local rc=$?
  tail -n 15 "$log"
  case $rc in
    0) note "$name: done in $((SECONDS - start))s ($log)" ;;
    77) note "$name: no usable GPU (exit 77)" ;;
    124) note "$name: stopped at its ${limit}s limit; partial output in $log" ;;
    *) note "$name: exit $rc after $((SECONDS - start))s; see $log" ;;
  esac
}

stage "kernels (mnist-dp-bench --quick)" 170 "$OUT/kernels.txt" \
  "$BUILD_DIR/mnist-dp-bench" --quick --json "$OUT/kernels.json"
stage "NCCL all-reduce (mnist-dp-allreduce-bench --quick)" 60 "$OUT/allreduce.txt" \
  "$BUILD_DIR/mnist-dp-allreduce-bench" --quick --max-bytes 67108864 --json "$OUT/allreduce.json"
# Every hand-written GEMM: they give the same bits, so the fastest can be the fast path's (docs/performance.md,
# "Blocks").
for gemm in blocked slab naive tiled; do
  stage "epochs with --gemm $gemm: plain, CUDA graphs, fused head, both (mnist-dp-bench --epoch)" 60 \
    "$OUT/epoch-$gemm.txt" "$BUILD_DIR/mnist-dp-bench" --epoch --epoch-gemm "$gemm" --rounds 2 \
    --json "$OUT/epoch-$gemm.json"
done
if [ -d "$DATA" ]; then
  stage "mnist-dp against PyTorch on the GPU (bench/compare.sh)" 240 "$OUT/compare.txt" \
    bench/compare.sh --device cuda --epochs "$EPOCHS" --binary "$BUILD_DIR/mnist-dp" --data "$DATA" \
    --python "$PYTHON" --gemm blocked,slab,cublas --graphs --no-plot --out "$OUT/compare"
else
  note "compare: skipped, no data at $DATA (put the four IDX files there)"
fi

{
  echo
  echo "=== gpu-bench summary (${SECONDS}s) ==="
  cat "$summary"
  if [ -f "$OUT/compare/compare.md" ]; then
    echo
    cat "$OUT/compare/compare.md"
  fi
} >"$summary.tmp" && mv "$summary.tmp" "$summary"
cat "$summary"
