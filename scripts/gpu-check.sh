#!/usr/bin/env bash
# The checks that need a GPU, in one run on a machine with one: builds with the "gpu" preset, runs the GPU tests,
# trains on the GPU (plain and fast path) and on the CPU for comparison, runs compute-sanitizer's memcheck and
# racecheck, then the rest of the test suite as the budget allows, and writes every log plus a summary under
# $OUT. The summary is printed last, so that the end of the output says everything.
#
# A GPU machine without package access gets the header libraries and the data in .devdeps/ (git-ignored):
# Debian's libfmt-dev libfmt9 catch2 libcli11-dev nlohmann-json3-dev zlib1g-dev libopenblas-dev
# libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libssl-dev libssl3 unpacked there with dpkg -x, and
# the four IDX files in .devdeps/data (for example: cp /usr/share/datasets/fashion-mnist/* .devdeps/data/).
#
# Environment: OUT (where logs go; default build/gpu-check), BUILD_DIR (default build/gpu), EPOCHS (default 5),
# DATA (default .devdeps/data), JOBS (default: all cores), SANITIZER_TIMEOUT (seconds per sanitizer run, 100),
# BUDGET (seconds; a sanitizer run that could end past it is skipped, and so are the tests that need no GPU
# when fewer than 150 s are left, so that the whole script stays inside a remote command's 10 minutes; default
# 480).
# GPU_CHECK_DRY_RUN=1 goes on without a GPU (to test this script on a machine without one: it then only
# configures, builds and runs the tests, which report skipped).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD

OUT=${OUT:-$root/build/gpu-check}
BUILD_DIR=${BUILD_DIR:-build/gpu}
EPOCHS=${EPOCHS:-5}
DATA=${DATA:-$root/.devdeps/data}
JOBS=${JOBS:-$(nproc)}
SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-100}
BUDGET=${BUDGET:-480}
DRY_RUN=${GPU_CHECK_DRY_RUN:-0}
note() { echo "$*" | tee -a "$summary"; }
section() { echo; echo "=== $* ==="; }

# --- 0. Is there a GPU at all? Fail at once and say so, before spending minutes on a build. ---
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  if [ "$DRY_RUN" != 1 ]; then
    echo "gpu-check: no GPU here (nvidia-smi is missing or finds no device)." >&2
    echo "gpu-check: run it on a machine with a GPU (see the header of this script)." >&2
    exit 2
  fi
  echo "gpu-check: GPU_CHECK_DRY_RUN=1: no GPU, going on with the build and the (skipped) tests only"
  has_gpu=0
else
  has_gpu=1
fi
mkdir -p "$OUT"
summary=$OUT/summary.txt
: >"$summary"

# --- 1. The machine: GPU, driver, toolkit, and where NCCL and cuBLAS live. ---
section "environment"
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  [ "$has_gpu" = 1 ] && nvidia-smi
  command -v nvcc >/dev/null && nvcc --version | tail -2
  cmake --version | head -1
  echo "NCCL / cuBLAS files:"
  find / \( -path /proc -o -path /sys \) -prune -o \( -name 'libnccl.so*' -o -name nccl.h -o -name 'libcublas.so*' \) \
    -print 2>/dev/null | sort | tee "$OUT/libs.tmp"
} 2>&1 | tee "$OUT/env.txt"
if [ "$has_gpu" = 1 ]; then
  device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
else
  device="none (dry run)"
fi

# --- 2. Dependencies: Debian packages carried in .devdeps, NCCL wherever it is. ---
cmake_args=(-DCMAKE_CUDA_ARCHITECTURES=90 "-DMNISTDP_TEST_DATA=$DATA")
deps=$root/.devdeps/usr
if [ -d "$deps" ]; then
  cmake_args+=("-DCMAKE_PREFIX_PATH=$deps")
  for d in "$deps/lib/x86_64-linux-gnu" "$deps/lib/x86_64-linux-gnu/openblas-pthread" "$deps/lib"; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
  # Unpacked with dpkg -x, Debian's OpenBLAS has no alternatives symlinks: name the library and header.
  if ! ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so '; then
    blas=$(find "$deps" -name libopenblas.so -path '*pthread*' 2>/dev/null | head -1)
    [ -z "$blas" ] && blas=$(find "$deps" -name 'libopenblas.so*' 2>/dev/null | head -1)
    [ -n "$blas" ] && cmake_args+=("-DBLAS_LIBRARIES=$blas")
    cblas=$(find "$deps" -name cblas.h 2>/dev/null | head -1)
    [ -n "$cblas" ] && cmake_args+=("-DOPENBLAS_INCLUDE_DIR=$(dirname "$cblas")")
  fi
else
  echo "gpu-check: warning: no .devdeps/ (fmt, Catch2, CLI11, nlohmann-json, OpenBLAS, OpenSSL): the configure" \
    "may fail; see the header of this script"
fi
cuda_home=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")
if [ ! -e "$cuda_home/include/nccl.h" ]; then
  # The image's NCCL may come only from a pip wheel (nvidia-nccl-cu13), which ships libnccl.so.2 but no
  # unversioned libnccl.so for find_library: name both files to CMake.
  # Only an nccl.h with the library beside it (PyTorch also ships a C++ header named nccl.h).
  nccl_h="" nccl_lib=""
  while read -r h; do
    r=$(dirname "$(dirname "$h")")
    lib=$(find "$r/lib" "$r/lib64" -maxdepth 1 -name 'libnccl.so*' 2>/dev/null | sort | head -1)
    if [ -n "$lib" ]; then
      nccl_h=$h nccl_lib=$lib
      break
    fi
  done < <(grep '/nccl\.h$' "$OUT/libs.tmp")
  if [ -n "$nccl_lib" ]; then
    nccl_lib_dir=$(dirname "$nccl_lib")
    cmake_args+=("-DMNISTDP_NCCL_ROOT=$(dirname "$nccl_lib_dir")" "-DNCCL_INCLUDE_DIR=$(dirname "$nccl_h")"
      "-DNCCL_LIBRARY=$nccl_lib")
    export LD_LIBRARY_PATH="$nccl_lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu-check: NCCL from $nccl_lib"
  else
    echo "gpu-check: warning: no NCCL library found beside any nccl.h; the configure will fail"
  fi
fi
rm -f "$OUT/libs.tmp"

# --- 3. Configure and build. ---
section "configure and build ($BUILD_DIR)"
build_ok=0
if cmake --preset gpu -B "$BUILD_DIR" "${cmake_args[@]}" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD_DIR" -j "$JOBS" >>"$OUT/build.log" 2>&1; then
  build_ok=1
  note "build: ok ($BUILD_DIR)"
else
  grep -E -B2 -A12 "error|FAILED|Could NOT|not found" "$OUT/build.log" | head -60
  note "build: FAILED (see build.log)"
fi
spills=$(grep -cE "[1-9][0-9]* bytes spill (stores|loads)" "$OUT/build.log")
note "ptxas: $(grep -c 'Compiling entry function' "$OUT/build.log") kernels compiled, $spills report spills"
tail -3 "$OUT/build.log"

# --- 4. The GPU tests (the other tests come last, as time allows: they need no GPU). ---
ctest_counts() {  # "N passed, N failed, N skipped of N" from a log of one or more ctest runs (summed)
  local total failed skipped
  total=$(grep -oE "tests failed out of [0-9]+" "$1" | grep -oE "[0-9]+$" | awk '{ s += $1 } END { print s + 0 }')
  failed=$(grep -oE "[0-9]+ tests failed out of" "$1" | grep -oE "^[0-9]+" | awk '{ s += $1 } END { print s + 0 }')
  skipped=$(grep -c '\*\*\*Skipped' "$1")
  echo "$((total - failed - skipped)) passed, $failed failed, $skipped skipped, of $total"
}
if [ "$build_ok" = 1 ]; then
  # The tests that run the persistent kernel last and alone: a grid-wide barrier that never opened would hold
  # every SM, and stall the tests beside it. Each part has a limit (the first at least 150 s, whatever the
  # budget), so that a hang costs minutes, not the session; a part stopped at its limit is named INCOMPLETE.
  section "GPU tests (ctest -L gpu), those of the persistent kernel last"
  persistent="persistent|queued steps"
  incomplete=""
  tests_part() {  # NAME LIMIT ctest-arguments...: appends to tests.log; notes a part stopped at its limit
    local name=$1 limit=$2
    shift 2
    timeout --kill-after=10 "$limit" ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure "$@" \
      >>"$OUT/tests.log" 2>&1
    if [ $? = 124 ]; then
      incomplete="$incomplete (INCOMPLETE: $name stopped at its ${limit}s limit)"
      pkill -f mnistdp_gpu_tests 2>/dev/null
    fi
  }
  limit=$((BUDGET - SECONDS - 160))
  [ "$limit" -lt 150 ] && limit=150
  : >"$OUT/tests.log"
  tests_part "the first part" "$limit" -E "$persistent" -j 4 --timeout 200
  tests_part "the persistent kernel's part" 100 -R "$persistent" -j 1 --timeout 90
  tail -25 "$OUT/tests.log"
  note "gpu tests: $(ctest_counts "$OUT/tests.log")$incomplete"
fi

# --- 5. Training: GPU, then CPU on the same seed, for the accuracy comparison. ---
bin=$BUILD_DIR/mnist-dp
if [ "$build_ok" = 1 ] && [ "$has_gpu" = 1 ]; then
  if [ -d "$DATA" ]; then
    section "training, $EPOCHS epochs, GPU (plain, the fast path, the persistent kernel, TF32) then CPU (data: $DATA)"
    # The fast path (the fused step: three kernels a step, launched programmatically, 64 steps a graph; the
    # slab GEMM where products remain) and the persistent kernel (the same three kernels' code as phases of
    # one launch, 64 steps a launch) compute the plain path's step to the bit, so their loss lines and
    # accuracy must be the plain run's. TF32 (cuBLAS on tensor cores) does not: its accuracy is the figure.
    for run in cuda cuda-fast cuda-persistent cuda-tf32 cpu; do
      case $run in
        cuda) args=(--device cuda) ;;
        cuda-fast) args=(--device cuda --pdl --gemm slab --steps-per-graph 64) ;;
        cuda-persistent) args=(--device cuda --persistent --gemm slab --steps-per-graph 64) ;;
        cuda-tf32) args=(--device cuda --gemm cublas --tf32) ;;
        cpu) args=(--device cpu) ;;
      esac
      start=$(date +%s.%N)
      timeout 120 "$bin" train --data "$DATA" --epochs "$EPOCHS" "${args[@]}" --seed 0 --no-progress \
        --metrics "$OUT/metrics-$run.jsonl" >"$OUT/train-$run.log" 2>&1
      rc=$?
      [ "$rc" = 124 ] && note "train ${args[*]}: stopped at its 120s limit"
      secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
      tail -8 "$OUT/train-$run.log"
      note "train ${args[*]}: exit $rc, ${secs}s wall; last lines:"
      tail -3 "$OUT/train-$run.log" | sed 's/^/    /' | tee -a "$summary"
    done
    results() { grep -oE "Step [0-9]+, Loss: [^ ]+|test loss [0-9.]+, test accuracy [0-9.]+%" "$1"; }
    for fast in fast persistent; do
      if [ -n "$(results "$OUT/train-cuda.log")" ] &&
        diff <(results "$OUT/train-cuda.log") <(results "$OUT/train-cuda-$fast.log") >/dev/null; then
        note "train: the $fast path's losses and test accuracies equal the plain path's"
      else
        note "train: the $fast path's losses or test accuracies DIFFER from the plain path's (see train.log)"
      fi
    done
    for run in cuda-fast cuda-persistent cuda-tf32 cpu; do
      cat "$OUT/train-$run.log" >>"$OUT/train-cuda.log" 2>/dev/null && rm -f "$OUT/train-$run.log"
    done
    mv "$OUT/train-cuda.log" "$OUT/train.log" 2>/dev/null
  else
    note "training: skipped, no data at $DATA (put the four IDX files in .devdeps/data)"
  fi

  # --- 6. compute-sanitizer: memcheck and racecheck on short runs. ---
  # Both look inside kernels: neither checks the order between two kernels, so a clean run with --pdl says
  # nothing about the programmatic waits. The test that does is "the fused step launched programmatically
  # gives the serial launch's bits" (tests/gpu/test_fused_step_cuda.cpp), in the GPU tests above.
  section "compute-sanitizer"
  if command -v compute-sanitizer >/dev/null 2>&1; then
    steps=(--epochs 1)
    if "$bin" train --help 2>&1 | grep -q -- --max-steps; then
      steps=(--epochs 1 --max-steps 30)
    else
      note "sanitizer: mnist-dp has no --max-steps: a whole epoch under each tool"
    fi
    tests_bin=$BUILD_DIR/tests/mnistdp_gpu_tests
    : >"$OUT/sanitizer.log"
    run_tool() {  # tool, label, command...
      local tool=$1 label=$2
      shift 2
      if [ $((SECONDS + SANITIZER_TIMEOUT)) -gt "$BUDGET" ]; then
        note "sanitizer $tool, $label: skipped, ${SECONDS}s spent of the ${BUDGET}s budget"
        return
      fi
      echo "--- $tool: $label" >>"$OUT/sanitizer.log"
      timeout "$SANITIZER_TIMEOUT" compute-sanitizer --tool "$tool" --error-exitcode 99 "$@" >>"$OUT/sanitizer.log" 2>&1
      local rc=$?
      local errors
      errors=$(grep "ERROR SUMMARY" "$OUT/sanitizer.log" | tail -1)
      [ "$rc" = 124 ] && errors="timed out after ${SANITIZER_TIMEOUT}s"
      note "sanitizer $tool, $label: exit $rc, ${errors:-no summary}"
    }
    # Most telling first, as the budget may stop the list: short training runs (the default path, then the
    # fast path: the fused step with --pdl, the slab GEMM), then the tests' kernels (every GEMM version included; the
    # 100-step runs left out), last the replicas' streams.
    if [ -d "$DATA" ]; then
      fast=(--pdl --gemm slab --steps-per-graph 64)
      run_tool memcheck "train ${steps[*]}" "$bin" train --data "$DATA" "${steps[@]}" --device cuda --no-progress
      run_tool memcheck "train ${steps[*]} ${fast[*]}" "$bin" train --data "$DATA" "${steps[@]}" --device cuda \
        --no-progress "${fast[@]}"
      run_tool racecheck "train ${steps[*]} ${fast[*]}" "$bin" train --data "$DATA" "${steps[@]}" --device cuda \
        --no-progress "${fast[@]}"
    fi
    # The kernels whose phases share memory through barriers (the persistent kernel's through grid-wide ones).
    run_tool racecheck "classifier head, fused step and persistent kernel tests" "$tests_bin" \
      "[classifier_head],[fused_step]~[slow],[persistent]~[slow]"
    run_tool memcheck "persistent kernel tests" "$tests_bin" "[persistent]~[slow]"
    run_tool memcheck "gpu tests ~[slow]" --leak-check full "$tests_bin" "[gpu]~[slow]"
    run_tool racecheck "replica tests ~[slow]" "$tests_bin" "[replica]~[slow]"
  else
    note "sanitizer: compute-sanitizer not found"
  fi
fi

# --- 7. The tests that need no GPU, if the budget leaves them time (they run wherever the project is tested). ---
if [ "$build_ok" = 1 ]; then
  if [ $((SECONDS + 150)) -gt "$BUDGET" ]; then
    note "other tests: skipped, ${SECONDS}s spent of the ${BUDGET}s budget (they need no GPU)"
  else
    section "the other tests (ctest -LE gpu)"
    ctest --test-dir "$BUILD_DIR" -LE gpu --output-on-failure -j 8 --timeout 300 >"$OUT/tests-other.log" 2>&1
    tail -25 "$OUT/tests-other.log"
    note "other tests: $(ctest_counts "$OUT/tests-other.log")"
    cat "$OUT/tests-other.log" >>"$OUT/tests.log" && rm -f "$OUT/tests-other.log"
  fi
fi

# --- 8. The summary, last. ---
{
  echo
  echo "=== gpu-check summary ==="
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  device: $device  (${SECONDS}s)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "logs: $OUT/{env.txt,build.log,tests.log,train.log,sanitizer.log,metrics-*.jsonl}"
  cat "$summary"
} >"$summary.tmp" && mv "$summary.tmp" "$summary"
cat "$summary"
[ "$build_ok" = 1 ] || exit 1
