#!/usr/bin/env bash
# Everything a GPU run checks and measures, as one command with a time limit per phase (docs/gpu-run.md):
#   1 build       preset gpu, against .devdeps/ (scripts/gpu-prepare.sh makes it) and the CUDA toolkit
#   2 tests       every GPU test (ctest -L gpu), the persistent kernel's last and alone
#   3 train       every training path, and the CPU path: each one's step time and test accuracy
#   4 sanitizer   compute-sanitizer's memcheck, racecheck, synccheck and initcheck on the kernels' GPU tests
#   5 bench       each kernel beside cuBLAS at the training shapes, every path's step time, the all-reduce
#   6 pytorch     PyTorch on the same data and GPU: eager, CUDA graphs, torch.compile
# In that order of value. A phase past its limit is stopped and named so; a failing phase does not stop the next
# ones, except a failed build. The summary, printed last, names every phase with its result and time.
#
#   scripts/gpu-session.sh [--emulated]
#
# --emulated rehearses the same script without a GPU, on the emulated build (preset emu, docs/emulation.md): a
# few of the GPU tests, every training path for a few steps, the benchmarks checking their output without timing
# (--check-only); the sanitizer and PyTorch phases are named as skipped. Nothing it prints is a GPU result.
#
# What the run keeps comes back from a device machine as at most 8 files, at most 2 folders down: $OUT holds
#   summary.md    the summary (also printed last)
#   session.json  every phase's result and time, and the figures (bench/gpu_record.py reads it)
#   logs.tar.gz   every log and raw JSON of the run
# bench/gpu_record.py DIR turns them into bench/results/DATE_h200_COMMIT/record.json and the docs' GPU tables.
#
# Environment: OUT (default $OUT where the device machine sets it, else build/gpu-session), TOTAL (seconds for
# the whole, default 540), BUILD_DIR (default build/gpu; build/emu with --emulated), DATA (default
# .devdeps/data; with --emulated, /usr/share/datasets/fashion-mnist when that is missing), EPOCHS (training
# epochs of each GPU path, default 3), PYTHON (the Python with PyTorch, default python3), JOBS (build jobs,
# default all cores), PHASES (the phases to run, default all: "build train" reruns those two), LIMIT_NAME (the
# seconds phase NAME may take, e.g. LIMIT_train=60).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD

mode=gpu
case "${1:-}" in
  "") ;;
  --emulated) mode=emulated ;;
  -h | --help)
    sed -n '2,/^set /{/^set /!p}' "$0"
    exit 0
    ;;
  *)
    echo "gpu-session.sh: unknown argument '$1' (try --help)" >&2
    exit 2
    ;;
esac

OUT=${OUT:-$root/build/gpu-session}
PHASES=${PHASES:-build tests train sanitizer bench pytorch}
TOTAL=${TOTAL:-540}
JOBS=${JOBS:-$(nproc)}
EPOCHS=${EPOCHS:-3}
PYTHON=${PYTHON:-python3}
if [ "$mode" = emulated ]; then
  BUILD_DIR=${BUILD_DIR:-build/emu}
  DATA=${DATA:-$root/.devdeps/data}
  [ -d "$DATA" ] || DATA=/usr/share/datasets/fashion-mnist
else
  BUILD_DIR=${BUILD_DIR:-build/gpu}
  DATA=${DATA:-$root/.devdeps/data}
fi
[[ "$TOTAL" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-session.sh: TOTAL must be a number of seconds, not '$TOTAL'" >&2; exit 2; }

# Without a GPU, say so at once, before minutes of building.
if [ "$mode" = gpu ] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-session.sh: no GPU here (nvidia-smi is missing or lists none); --emulated rehearses the run without one" >&2
  exit 2
fi

# Phases write under work/; only the packed files go to $OUT, which must come back whole.
mkdir -p "$OUT" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-session.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
rm -f "$OUT/summary.md" "$OUT/session.json" "$OUT/logs.tar.gz"
phases_file=$work/phases.tsv
: >"$phases_file"

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# The libraries from .devdeps/ (and NCCL wherever this machine has it) on LD_LIBRARY_PATH, for every phase, and
# the configure's arguments for the build phase, one a line in GPU_CMAKE_ARGS_FILE.
export GPU_CMAKE_ARGS_FILE=$work/cmake-args.txt
: >"$GPU_CMAKE_ARGS_FILE"
if [ "$mode" = gpu ]; then
  # shellcheck source=scripts/gpu/deps.sh
  . scripts/gpu/deps.sh
  gpu_deps_setup "$root" >"$work/deps.log" 2>&1 || cat "$work/deps.log"
  [ "${#gpu_cmake_args[@]}" -gt 0 ] && printf '%s\n' "${gpu_cmake_args[@]}" >"$GPU_CMAKE_ARGS_FILE"
fi

{
  echo "date: $started"
  echo "commit: $commit"
  echo "mode: $mode"
  if [ "$mode" = gpu ]; then
    nvidia-smi
    nvcc --version | tail -2
  fi
  cmake --version | head -1
  echo "host: $(hostname -s 2>/dev/null)"
  echo "cores: $(nproc)"
  lscpu 2>/dev/null | grep -m1 'Model name'
} >"$work/environment.txt" 2>&1

# phase NAME LIMIT: runs scripts/gpu/phase-NAME.sh with at most LIMIT seconds (LIMIT_NAME overrides it), never
# past TOTAL (a few seconds are kept for packing); records its result: passed (0), skipped (77, not in PHASES, or
# no time left), stopped (past its limit) or failed (anything else). Returns the phase's exit status.
phase() {
  local name=$1 limit=$2
  local dir=$work/$name
  mkdir -p "$dir"
  local override=LIMIT_$name
  limit=${!override:-$limit}
  if [[ " $PHASES " != *" $name "* ]]; then
    printf '%s\tskipped\t0\tnot in PHASES\n' "$name" >>"$phases_file"
    echo "=== $name: skipped, not in PHASES"
    return 0
  fi
  local left=$((TOTAL - SECONDS - 15))
  if [ "$left" -lt 20 ]; then
    printf '%s\tskipped\t0\tno time left (%ss of %ss spent)\n' "$name" "$SECONDS" "$TOTAL" >>"$phases_file"
    echo "=== $name: skipped, no time left"
    return 77
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo
  echo "=== $name (at most ${limit}s) ==="
  local start=$SECONDS
  MODE=$mode ROOT=$root BUILD_DIR=$BUILD_DIR DATA=$DATA WORK=$dir LIMIT=$limit JOBS=$JOBS EPOCHS=$EPOCHS \
    PYTHON=$PYTHON timeout --kill-after=10 "$limit" bash "scripts/gpu/phase-$name.sh" 2>&1 | tee "$dir/phase.log" |
    tail -n 40
  local rc=${PIPESTATUS[0]}
  local secs=$((SECONDS - start)) result detail
  detail=$(tail -n 1 "$dir/summary.txt" 2>/dev/null)
  case $rc in
    0) result=passed ;;
    77) result=skipped ;;
    124 | 137)
      result=stopped
      detail="stopped at its ${limit}s limit${detail:+; $detail}"
      ;;
    *) result=failed ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$result" "$secs" "${detail//$'\t'/ }" >>"$phases_file"
  echo "=== $name: $result in ${secs}s"
  return "$rc"
}

if phase build 240; then
  phase tests 150
  phase train 120
  phase sanitizer 120
  phase bench 120
  phase pytorch 120
else
  for name in tests train sanitizer bench pytorch; do
    printf '%s\tskipped\t0\tthe build failed\n' "$name" >>"$phases_file"
  done
fi

# The packed files, and the summary last.
python3 scripts/gpu/session_report.py "$work" --mode "$mode" --commit "$commit" --started "$started" \
  --seconds "$SECONDS" --total "$TOTAL" --out "$OUT" 2>&1 || echo "gpu-session.sh: the report failed (see above)"
# A file comes back only under 16 MiB: a log over 4 MiB (a sanitizer's, say) keeps its first and last 2 MiB.
find "$work" -type f -size +4M -print0 | while IFS= read -r -d '' big; do
  { head -c 2097152 "$big"; printf '\n[... gpu-session.sh kept the first and last 2 MiB of these %s bytes ...]\n' "$(stat -c %s "$big")"
    tail -c 2097152 "$big"; } >"$big.cut" && mv "$big.cut" "$big"
done
tar -C "$work" -czf "$OUT/logs.tar.gz" --exclude='*.core' --exclude='*.safetensors' . 2>/dev/null ||
  echo "gpu-session.sh: could not pack the logs into $OUT/logs.tar.gz"
if [ "$(stat -c %s "$OUT/logs.tar.gz" 2>/dev/null || echo 0)" -gt 16000000 ]; then
  echo "gpu-session.sh: logs.tar.gz is over 16 MiB, which does not come back: the summary and session.json do"
fi
echo
if [ -f "$OUT/summary.md" ]; then
  cat "$OUT/summary.md"
else
  cat "$phases_file"
fi
# The exit status: 0 when no phase failed or stopped.
! cut -f2 "$phases_file" | grep -qE '^(failed|stopped)$'
