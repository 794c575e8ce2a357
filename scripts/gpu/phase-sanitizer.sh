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
log=$WORK/sanitizer.log
: >"$log"
deadline=$((SECONDS + LIMIT - 5))
runs=0 clean=0 failed=0 skipped=0
# TOOL LABEL CATCH-SPEC [EXTRA-OPTIONS...]: one tool over the tests that SPEC selects, within what time is left.
check() {
  local tool=$1 label=$2 spec=$3
  shift 3
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 15 ]; then
    skipped=$((skipped + 1))
    echo "$tool, $label: skipped, no time left" | tee -a "$WORK/results.txt"
    return
  fi
  [ "$left" -gt 60 ] && left=60
  echo "--- $tool: $label ($spec)" >>"$log"
  timeout "$left" compute-sanitizer --tool "$tool" --error-exitcode 99 "$@" "$tests_bin" "$spec" >>"$log" 2>&1
  local rc=$?
  local summary
  summary=$(grep "ERROR SUMMARY" "$log" | tail -n 1)
  [ "$rc" = 124 ] && summary="stopped after ${left}s"
  runs=$((runs + 1))
  if [ "$rc" = 0 ]; then clean=$((clean + 1)); else failed=$((failed + 1)); fi
  echo "$tool, $label: exit $rc, ${summary:-no summary}" | tee -a "$WORK/results.txt"
}
# The kernels' own tests (the replicas' and training tests run the same kernels, longer).
kernels="[linear],[gather],[softmax_xent],[sgd],[reduce],[accuracy],[order],[classifier_head],[fused_step]~[slow],[persistent]~[slow]"
check memcheck "the kernels' tests" "$kernels"
check racecheck "classifier head, fused step, persistent kernel" "[classifier_head],[fused_step]~[slow],[persistent]~[slow]"
check synccheck "classifier head, fused step, persistent kernel" "[classifier_head],[fused_step]~[slow],[persistent]~[slow]"
check initcheck "the kernels' tests" "$kernels"
check memcheck "every GPU test, leaks too" "[gpu]~[slow]" --leak-check full
check racecheck "the replicas' tests" "[replica]~[slow]"
echo "compute-sanitizer: $runs runs, $clean clean, $failed with errors, $skipped skipped for time" >>"$WORK/summary.txt"
[ "$runs" -gt 0 ] && [ "$failed" = 0 ]
