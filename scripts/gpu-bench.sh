#!/usr/bin/env bash
# The GPU benchmarks in one run, after scripts/gpu-check.sh has built $BUILD_DIR on the same machine: whole
# epochs with and without CUDA graphs and the fused head, for each hand-written GEMM (mnist-dp-bench --epoch);
# mnist-dp against PyTorch on the same GPU (bench/compare.sh --device cuda: eager with the data on the device,
# torch.compile and CUDA graphs); every kernel, GEMM version and whole step at batch 64 beside cuBLAS
# (mnist-dp-bench --quick); the step's kernels under ncu; the NCCL all-reduce (mnist-dp-allreduce-bench
# --quick). Each stage has its own time limit and the whole stays inside BUDGET seconds, so that it fits one
# remote command; the summary is printed last. Everything goes under OUT, compare.sh's record too
# (OUT/records/DATE_cuda_HOST/record.json, to be copied into bench/results/ when kept).
#
# Environment: OUT (default build/gpu-bench), BUILD_DIR (default build/gpu), DATA (default .devdeps/data),
# PYTHON (the Python with PyTorch for the peers; default python3), EPOCHS (compare.sh's epochs, default 3),
# BUDGET (seconds, default 360: with scripts/gpu-check.sh's 480 and the machine's start, about a lent GPU
# session's 15 minutes).
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
BUDGET=${BUDGET:-360}
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
# the exit code (77: the program found no usable GPU) and returns it (124: stopped at the limit; 125: skipped).
stage() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then
    note "$name: skipped, ${SECONDS}s spent of the ${BUDGET}s budget"
    return 125
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
  return "$rc"
}

# The stages in order of what they decide, so that a budget cut drops the least: whole epochs with the two
# candidates for the fast path's GEMM; mnist-dp against PyTorch; the kernels and steps at batch 64; profiles of
# the step's kernels; the all-reduce; whole epochs with the other GEMMs. All four hand-written GEMMs give the
# same bits, so the fastest can be the fast path's (docs/performance.md, "Blocks").
# The variants share one process, so a fault in one (a kernel's first run on a GPU) would lose them all: when the
# run fails without its JSON (not when it was stopped or skipped for time), the plain path and the fast paths are
# timed again one by one, each with a fifth of the stage's time.
epochs() {  # GEMM LIMIT
  stage "epochs with --gemm $1: plain, graphs, fused head, both, fused step, with pdl, 64 steps a graph, persistent" "$2" \
    "$OUT/epoch-$1.txt" "$BUILD_DIR/mnist-dp-bench" --epoch --epoch-gemm "$1" --rounds 2 \
    --json "$OUT/epoch-$1.json"
  local rc=$?
  if [ ! -f "$OUT/epoch-$1.json" ] && [ "$rc" != 124 ] && [ "$rc" != 125 ] && [ "$rc" != 77 ] &&
    [ "$DRY_RUN" != 1 ]; then
    for variant in plain graphs fused-step fused-step+pdl fused-step+pdl+64 persistent+64; do
      stage "epochs with --gemm $1, $variant alone" $(($2 / 5)) "$OUT/epoch-$1-$variant.txt" \
        "$BUILD_DIR/mnist-dp-bench" --epoch --epoch-gemm "$1" --epoch-variants "$variant" --rounds 1 \
        --json "$OUT/epoch-$1-$variant.json"
    done
  fi
}
epochs blocked 60
epochs slab 60
# compare.sh's record goes beside the logs (this machine's checkout may not be the one that keeps it): to keep it,
# copy the folder into bench/results/.
record=$OUT/records/$(date -u +%Y-%m-%d)_cuda_$(hostname -s)
if [ -d "$DATA" ]; then
  stage "mnist-dp against PyTorch on the GPU (bench/compare.sh)" 180 "$OUT/compare.txt" \
    bench/compare.sh --device cuda --epochs "$EPOCHS" --binary "$BUILD_DIR/mnist-dp" --data "$DATA" \
    --python "$PYTHON" --gemm blocked,slab --graphs --no-plot --out "$OUT/compare" --record "$record"
else
  note "compare: skipped, no data at $DATA (put the four IDX files there)"
fi
stage "kernels and steps at batch 64 (mnist-dp-bench --quick --filter -b64/)" 90 "$OUT/kernels.txt" \
  "$BUILD_DIR/mnist-dp-bench" --quick --filter -b64/ --json "$OUT/kernels.json"
# Where the persistent kernel's step goes, phase by phase (printed under its step row).
grep -h "persistent, 64 steps a launch" "$OUT/kernels.txt" 2>/dev/null | sed 's/^ */phases: /' | tee -a "$summary"
if command -v ncu >/dev/null 2>&1 && [ -d "$DATA" ]; then
  # Hardware counters of the step's kernels, plain and fast path, after 30 warm-up steps; clocks left alone.
  # ncu profiles the kernels of a graph's launches one by one, by name. (Not the persistent kernel: two
  # launches in 80 steps; its phases are seen in the epoch benchmark's figures.)
  for path in plain fast; do
    args=()
    [ "$path" = fast ] && args=(--pdl --gemm slab --steps-per-graph 64)
    stage "profiles of the step's kernels, $path path (ncu)" 60 "$OUT/ncu-$path.txt" \
      ncu --clock-control none --launch-skip 300 --launch-count 30 \
      --section SpeedOfLight --section LaunchStats --section Occupancy \
      "$BUILD_DIR/mnist-dp" train --data "$DATA" --epochs 1 --max-steps 80 --device cuda --no-progress \
      --log-interval 1000000 "${args[@]}"
  done
else
  note "profiles: skipped (no ncu on the PATH, or no data at $DATA)"
fi
stage "NCCL all-reduce (mnist-dp-allreduce-bench --quick)" 40 "$OUT/allreduce.txt" \
  "$BUILD_DIR/mnist-dp-allreduce-bench" --quick --max-bytes 67108864 --json "$OUT/allreduce.json"
epochs naive 30
epochs tiled 30
# cuBLAS, in fp32 and in TF32 (tensor cores; an option whose accuracy gpu-check.sh trains to), launched plain
# and as graphs: what tensor cores would give the products, last as it decides no default.
for tf32 in "" --epoch-tf32; do
  stage "epochs with --gemm cublas ${tf32:-(fp32)}: plain, graphs" 30 "$OUT/epoch-cublas${tf32:+-tf32}.txt" \
    "$BUILD_DIR/mnist-dp-bench" --epoch --epoch-gemm cublas $tf32 --epoch-variants plain,graphs --rounds 2 \
    --json "$OUT/epoch-cublas${tf32:+-tf32}.json"
done

# The targets, decided from what was measured above (a figure that is missing is "not measured").
"${PYTHON_REPORT:-python3}" bench/targets_report.py "$OUT" --out "$OUT/targets.md" >/dev/null 2>&1 ||
  note "targets: bench/targets_report.py failed"

{
  echo
  echo "=== gpu-bench summary (${SECONDS}s) ==="
  cat "$summary"
  if [ -f "$OUT/targets.md" ]; then
    echo
    sed -n '/^## Targets/,$p' "$OUT/targets.md"
  fi
  if [ -f "$OUT/compare/compare.md" ]; then
    echo
    cat "$OUT/compare/compare.md"
  fi
  if [ -f "$record/record.json" ]; then
    echo
    echo "record: $record/record.json (to keep: copy the folder into bench/results/)"
  fi
} >"$summary.tmp" && mv "$summary.tmp" "$summary"
cat "$summary"
