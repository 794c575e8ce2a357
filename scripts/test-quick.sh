#!/usr/bin/env bash
# The everyday suite: the first stages of scripts/test.sh alone, the CPU suite (preset default, with the GPU
# tests skipped where no GPU is usable) and the CUDA path on emulated devices (preset emu). The sanitizer
# presets, the CPU suite under AddressSanitizer and fuzzing are left to scripts/test.sh, which CI runs.
#   scripts/test-quick.sh [CTEST_ARGS...]    (arguments go to the default preset's ctest)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/stages.sh
. scripts/stages.sh

setup() { scripts/setup.sh && scripts/setup-python.sh; }
stage "setup" setup
stage "build default" scripts/build.sh default
stage "test default" ctest --preset default -j "$(nproc)" "$@"
stage "build emu" scripts/build.sh emu
stage "test emu: the CUDA path on emulated devices" ctest --preset emu -L emu -j "$(nproc)"
stages_report
