#!/usr/bin/env bash
# The checks and benchmarks that need a GPU, as one command within TOTAL seconds, for a GPU machine that is
# reached for a limited time (the build is done once and used by both parts): scripts/gpu-check.sh (build,
# tests, training, compute-sanitizer), then scripts/gpu-bench.sh (the benchmarks) with whatever time is left.
# Logs go under $OUT/check and $OUT/bench, with compare.sh's record (to copy into bench/results/ when kept); both
# summaries are printed last.
#
# Environment: OUT (default build/gpu-session), TOTAL (seconds for the whole, default 570), BENCH_MIN
# (seconds kept for the benchmarks, default 210), SANITIZER_TIMEOUT (per sanitizer run, default 60); the rest
# as gpu-check.sh and gpu-bench.sh take it. GPU_CHECK_DRY_RUN=1 and GPU_BENCH_DRY_RUN=1 go on without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/build/gpu-session}
TOTAL=${TOTAL:-570}
BENCH_MIN=${BENCH_MIN:-210}
mkdir -p "$OUT"

OUT=$OUT/check BUDGET=$((TOTAL - BENCH_MIN)) SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-60} scripts/gpu-check.sh
check_rc=$?
if [ "$check_rc" = 0 ]; then
  OUT=$OUT/bench BUDGET=$((TOTAL - SECONDS)) scripts/gpu-bench.sh
else
  echo "gpu-session: gpu-check.sh exited with $check_rc; no benchmarks" | tee "$OUT/bench-skipped.txt"
fi

# The summary beside the logs ($OUT/README.md): how it was run, and both summaries. The run's record,
# for bench/results/, is compare.sh's: $OUT/bench/records/DATE_cuda_HOST/ (scripts/gpu-bench.sh).
{
  echo "# Checks and benchmarks on a GPU"
  echo
  echo "    TOTAL=$TOTAL BENCH_MIN=$BENCH_MIN scripts/gpu-session.sh"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  echo "- device (name, driver, memory): ${device:-none}"
  echo "- logs: check/ (scripts/gpu-check.sh), bench/ (scripts/gpu-bench.sh)"
  for part in check bench; do
    if [ -f "$OUT/$part/summary.txt" ]; then
      echo
      echo "## $part"
      echo
      sed 's/^/    /' "$OUT/$part/summary.txt"
    fi
  done
} >"$OUT/README.md"

echo
echo "=== gpu-session summary (${SECONDS}s of ${TOTAL}s; $OUT/README.md) ==="
for part in check bench; do
  [ -f "$OUT/$part/summary.txt" ] && cat "$OUT/$part/summary.txt"
done
exit "$check_rc"
