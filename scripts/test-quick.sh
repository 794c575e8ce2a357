#!/usr/bin/env bash
# The everyday suite: the first stages of scripts/test.sh alone, the CPU suite (preset default, with the GPU
# tests skipped where no GPU is usable) and the CUDA path on emulated devices (preset emu). The sanitizer
# presets, the CPU suite under AddressSanitizer and fuzzing are left to scripts/test.sh, which CI runs.
#   scripts/test-quick.sh [CTEST_ARGS...]    (arguments go to the default preset's ctest)
exec "$(dirname "$0")/test.sh" --quick "$@"
