#!/usr/bin/env bash
# Phase 4 of scripts/gpu-session.sh: compute-sanitizer's four tools on the kernels' GPU tests, as time allows, the
# most telling first. None of them checks the order between two kernels, so a clean run says nothing about the
# programmatic waits: the GPU test "the fused step launched programmatically gives the serial launch's bits" does.
# Skipped with MODE=emulated: the emulated build has its own checks (scripts/test.sh's emu-asan and emu-tsan stages).
set -uo pipefail
: "${MODE:?run by scripts/gpu-session.sh}" "${ROOT:?}" "${BUILD_DIR:?}" "${DATA:?}" "${WORK:?}" "${LIMIT:?}" "${JOBS:?}"
cd "$ROOT" || exit 1
if [ "$MODE" = emulated ]; then
  echo "compute-sanitizer needs a GPU: skipped on emulated devices" >>"$WORK/summary.txt"
  exit 77
fi
if ! command -v compute-sanitizer >/dev/null 2>&1; then
  echo "compute-sanitizer is not on the PATH" >>"$WORK/summary.txt"
  exit 1
fi
tests_bin=$BUILD_DIR/tests/mnistdp_gpu_tests
# shellcheck source=scripts/gpu/timed_steps.sh
. scripts/gpu/timed_steps.sh
step_detail() { grep "ERROR SUMMARY" "$1" | tail -n 1; }
runs=0
# TOOL LABEL CATCH-SPEC [EXTRA-OPTIONS...]: one tool over the tests that SPEC selects, at most 60 s.
check() {
  local tool=$1 label=$2 spec=$3
  shift 3
  runs=$((runs + 1))
  timed_step "$tool, $label" 60 15 "$WORK/sanitizer-$runs-$tool.log" \
    compute-sanitizer --tool "$tool" --error-exitcode 99 "$@" "$tests_bin" "$spec"
}
# The kernels' own tests (the replicas' and training tests run the same kernels, longer).
kernels="[linear],[gather],[softmax_xent],[sgd],[reduce],[accuracy],[order],[classifier_head],[fused_step]~[slow],[persistent]~[slow]"
check memcheck "the kernels' tests" "$kernels"
check racecheck "classifier head, fused step, persistent kernel" "[classifier_head],[fused_step]~[slow],[persistent]~[slow]"
check synccheck "classifier head, fused step, persistent kernel" "[classifier_head],[fused_step]~[slow],[persistent]~[slow]"
check initcheck "the kernels' tests" "$kernels"
check memcheck "every GPU test, leaks too" "[gpu]~[slow]" --leak-check full
check racecheck "the replicas' tests" "[replica]~[slow]"
echo "compute-sanitizer: $steps_done clean, $steps_failed with errors or stopped, $steps_skipped skipped for time" \
  >>"$WORK/summary.txt"
[ "$steps_done" -gt 0 ] && [ "$steps_failed" = 0 ]
