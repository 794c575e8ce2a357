#!/usr/bin/env bash
# Phase 1 of scripts/gpu-session.sh: the build. On a GPU machine, preset gpu against .devdeps/ (the arguments
# scripts/gpu/deps.sh gave the session); with MODE=emulated, preset emu's programs that the later phases run.
set -uo pipefail
: "${MODE:?run by scripts/gpu-session.sh}" "${ROOT:?}" "${BUILD_DIR:?}" "${DATA:?}" "${WORK:?}" "${LIMIT:?}" "${JOBS:?}"
cd "$ROOT" || exit 1
log=$WORK/build.log
if [ "$MODE" = emulated ]; then
  scripts/build.sh emu mnist-dp mnistdp_gpu_tests mnist-dp-bench mnist-dp-allreduce-bench >"$log" 2>&1
  rc=$?
else
  # The arguments scripts/gpu/deps.sh gave the session (.devdeps/ and NCCL), one a line.
  mapfile -t cmake_args <"${GPU_CMAKE_ARGS_FILE:?run by scripts/gpu-session.sh}"
  cmake --preset gpu -B "$BUILD_DIR" "${cmake_args[@]}" >"$log" 2>&1 &&
    cmake --build "$BUILD_DIR" -j "$JOBS" >>"$log" 2>&1
  rc=$?
fi
if [ "$rc" != 0 ]; then
  grep -E -B2 -A12 "error|FAILED|Could NOT|not found" "$log" | head -60
  echo "build: FAILED (build.log)" >>"$WORK/summary.txt"
  exit 1
fi
tail -3 "$log"
kernels=$(grep -c 'Compiling entry function' "$log")
spills=$(grep -cE "[1-9][0-9]* bytes spill (stores|loads)" "$log")
if [ "$MODE" = emulated ]; then
  echo "built $BUILD_DIR (emulated devices)" >>"$WORK/summary.txt"
else
  echo "built $BUILD_DIR; ptxas: $kernels kernels, $spills with spills" >>"$WORK/summary.txt"
fi
