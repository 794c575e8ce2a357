#!/usr/bin/env bash
# One command from a fresh machine to the whole test suite: installs what is missing, builds (every CUDA kernel
# included when the toolkit is there), runs ctest. GPU tests report "skipped" where no GPU is usable, and run
# again on emulated devices (preset emu), as separate "emulated:" entries. Every stage runs even when one
# before it failed; the end prints each stage's time and result, and the exit status is non-zero when any
# stage failed. For everyday work, --quick (scripts/test-quick.sh) runs the first two presets' stages alone.
#   scripts/test.sh [--quick] [CTEST_ARGS...]    (CTEST_ARGS go to the default preset's ctest)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/stages.sh
. scripts/stages.sh
quick=false
if [ "${1:-}" = "--quick" ]; then
  quick=true
  shift
fi

setup() { scripts/setup.sh && scripts/setup-python.sh; }   # PyTorch and safetensors: checkpoint interoperability
stage "setup" setup
stage "build default" scripts/build.sh default
stage "test default" ctest --preset default -j "$(nproc)" "$@"

# The CUDA path on emulated devices (docs/emulation.md): every GPU test, the emulation's own checks of broken
# kernels and the command line's CUDA path, executed on the CPU. Their entries are named "emulated:".
# Only what those entries run (the GPU benchmarks for their --check-only entries): the preset's CPU suite and
# other benchmarks (built and run by preset default) took 2.6 of its build's 6.6 CPU-minutes.
stage "build emu" scripts/build.sh emu mnist-dp checkpoint_tool mnistdp_gpu_tests mnistdp_emu_tests \
  mnistdp_emu_address_probe mnist-dp-bench mnist-dp-allreduce-bench
stage "test emu: the CUDA path on emulated devices" ctest --preset emu -L emu -j "$(nproc)"
if $quick; then
  stages_report
  exit
fi

# The CUDA path on emulated devices again, under AddressSanitizer and UBSan (preset emu-asan,
# docs/emulation.md): out-of-bounds and use-after-free accesses of device and shared memory in every kernel,
# and the probes that the sanitizer must report. Under a sanitizer the longer GPU tests run fewer steps and
# shapes (gpu_test::kUnderSanitizer); the test preset still leaves out, for time, the 100-step loss curve
# and the command line's two longer CUDA runs (preset emu runs them); three steps of every path from the
# command line stay. The kernels' tests and those three steps run once more with every launch checked for
# races between its blocks and with the kernels of other operations (MNISTDP_EMU_BLOCK_RACES=1), and a UBSan
# report stops any test.
# The same build compiles every program with both sanitizers, so the CPU suite runs there too, its entries
# (those without the label emu) after the emulated ones: any report fails its test. Left out for time, as
# each takes minutes under the sanitizers: the finite-difference check of the reference backward pass, the
# 5-epoch accuracy run and the command-line checkpoint and multi-process scripts (the TCP process group
# itself is covered there by its unit tests, its ranks on threads); and the GPU benchmark's command line,
# which the preset does not build (preset default runs it).
stage "build emu-asan" scripts/build.sh emu-asan
asan_ctest() {
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest "$@"
}
asan_tests() {
  local rc=0
  asan_ctest --preset emu-asan -j "$(nproc)" || rc=$?
  asan_ctest --test-dir build/emu-asan -LE emu -j "$(nproc)" \
    -E '^(ref::linear_backward dw, db, dx agree with finite differences|5 epochs on Fashion-MNIST|cli_checkpoints|cli_multiprocess|cli_benchmarks$)' ||
    rc=$?
  return "$rc"
}
stage "test emu-asan: AddressSanitizer, UBSan, races; the CPU suite" asan_tests

# The CUDA path on emulated devices again, under ThreadSanitizer (preset emu-tsan, docs/emulation.md): races
# between the threads of a block, the blocks of a kernel, streams, devices and programmatic launches in every
# kernel, the data-parallel comparisons, three steps of every path from the command line, and the probes that
# it must report (and their synchronised twins, which it must not).
# ThreadSanitizer maps memory for every emulated thread alive (a chain of programmatic launches holds tens of
# thousands at once), beyond Linux's default limit of 65530 mappings a process.
if [ "$(cat /proc/sys/vm/max_map_count)" -lt 262144 ]; then
  { echo 262144 >/proc/sys/vm/max_map_count; } 2>/dev/null || echo "test.sh: could not raise vm.max_map_count to 262144 (root needed);" \
    "tests of long programmatic chains may fail with 'ThreadSanitizer failed to allocate'" >&2
fi
stage "build emu-tsan" scripts/build.sh emu-tsan
tsan_tests() { TSAN_OPTIONS=halt_on_error=1 ctest --preset emu-tsan -j "$(nproc)"; }
stage "test emu-tsan: ThreadSanitizer" tsan_tests

# Preset gpu as a GPU machine without our Debian packages builds it: against .devdeps/ alone (the packages
# unpacked; scripts/gpu-prepare.sh downloads them with apt-get in a fresh clone, and keeps them while the list
# stays the same) and the CUDA toolkit, CMake finding nothing else; every header the compilers read and every
# library the programs load is checked (scripts/gpu/check-isolated-build.sh). Passes, saying so, without a toolkit.
stage "gpu preset against .devdeps alone" scripts/gpu/check-isolated-build.sh

# The GPU run rehearsed on emulated devices (docs/gpu-run.md): scripts/gpu-session.sh --emulated end to end, its
# summary, the files it leaves, and bench/gpu_record.py on them (in copies of the repository).
stage "gpu session rehearsed on emulated devices" tests/scripts/test_gpu_session.sh

# The IDX and checkpoint readers under libFuzzer, 20 s each, from the seed corpora (the build included).
stage "fuzz: the IDX and checkpoint readers" scripts/fuzz.sh 20

stages_report
