#!/usr/bin/env bash
# Phase 2 of scripts/gpu-session.sh: the GPU tests. The persistent kernel's run last and alone: a grid-wide barrier
# that never opened would hold every SM and stall the tests beside it. With MODE=emulated, a few of the same tests
# on emulated devices (every one runs in the emulated suite of scripts/test.sh).
set -uo pipefail
: "${MODE:?run by scripts/gpu-session.sh}" "${ROOT:?}" "${BUILD_DIR:?}" "${DATA:?}" "${WORK:?}" "${LIMIT:?}" "${JOBS:?}"
cd "$ROOT" || exit 1
log=$WORK/tests.log
: >"$log"
persistent="persistent|queued steps"
if [ "$MODE" = emulated ]; then
  ctest --test-dir "$BUILD_DIR" -L emu -R "emulated:(gather_normalize|softmax_xent|sgd_step|mark_correct)" \
    -j "$JOBS" --output-on-failure >>"$log" 2>&1
  rc=$?
else
  ctest --test-dir "$BUILD_DIR" -L gpu -E "$persistent" -j 4 --timeout 200 --output-on-failure >>"$log" 2>&1
  rc=$?
  ctest --test-dir "$BUILD_DIR" -L gpu -R "$persistent" -j 1 --timeout 90 --output-on-failure >>"$log" 2>&1 ||
    rc=1
fi
tail -n 25 "$log"
# "N passed, N failed, N skipped, of N", summed over the ctest runs above.
total=$(grep -oE "tests failed out of [0-9]+" "$log" | grep -oE "[0-9]+$" | awk '{ s += $1 } END { print s + 0 }')
failed=$(grep -oE "[0-9]+ tests failed out of" "$log" | grep -oE "^[0-9]+" | awk '{ s += $1 } END { print s + 0 }')
skipped=$(grep -c '\*\*\*Skipped' "$log")
what="GPU tests"
[ "$MODE" = emulated ] && what="GPU tests on emulated devices (a few)"
echo "$what: $((total - failed - skipped)) passed, $failed failed, $skipped skipped, of $total" >>"$WORK/summary.txt"
[ "$total" -gt 0 ] || exit 1
# A GPU test that skips on a GPU machine did not run: that fails this phase, except the one that needs several
# GPUs ("NCCL over several GPUs ...") on a machine with one.
if [ "$MODE" = gpu ]; then
  unexpected=$(grep '\*\*\*Skipped' "$log" | grep -v 'over several GPUs' | sed 's/^ *[0-9]*\/[0-9]* *//')
  if [ -n "$unexpected" ]; then
    echo "skipped on a GPU machine, so not run: $unexpected" | head -n 5
    exit 1
  fi
fi
exit "$rc"
