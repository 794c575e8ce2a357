#!/usr/bin/env bash
# The GPU benchmarks on emulated devices (docs/emulation.md). With --check-only they set up, check and launch
# what a timed run does, say that nothing was timed and that the devices are emulated, and print and write no
# time; without it they refuse emulated devices as a machine without a GPU (exit 77). One part per ctest entry:
#   test_emulated_benchmarks.sh kernels MNIST_DP_BENCH       --check-only --filter -b64/
#   test_emulated_benchmarks.sh epoch MNIST_DP_BENCH         --epoch --check-only --epoch-steps 4 --epoch-gemm slab
#   test_emulated_benchmarks.sh allreduce ALLREDUCE_BENCH    --check-only --max-bytes 1048576
#   test_emulated_benchmarks.sh refused MNIST_DP_BENCH ALLREDUCE_BENCH
#                                    each without --check-only exits 77; a device that does not answer fails
#                                    a check-only run; --help names the options
# Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
part=$1
bin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"

# A figure of time in a printed line: a number with two decimals or more (as times are printed), a number
# with a unit of time, a rate, or a timing's statistics.
time_figure='[0-9]+\.[0-9]{2,}|[0-9] ?(ns|us|ms|s)\b|/s\b|us/step|ms/epoch|\bp10\b|\bp90\b|median|xlaunch|algbw|busbw'
# A key of a time in the JSON.
time_key='"([a-z_0-9]*(_us|_ms|_gbs|gflops|median|p10|p90|timing)|hot|cold|graph|sum|all_reduce|in_place|out_of_place|ceilings|persistent_phases)":'

# rehearsal NAME ROWS COMMAND...: runs COMMAND --json NAME.json into NAME.txt, then checks that it passed,
# said what it was, checked at least ROWS rows and reported no time.
rehearsal() {
  local name=$1 rows=$2
  shift 2
  "$@" --json "$work/$name.json" >"$work/$name.txt" 2>&1
  local status=$?
  check "$name: exits 0" test "$status" -eq 0 || tail -n 20 "$work/$name.txt"
  check "$name: the first line says that nothing was timed" \
    bash -c "head -n 1 '$work/$name.txt' | grep -q 'NOTHING TIMED'"
  check "$name: the first line says that the devices are emulated" \
    bash -c "head -n 1 '$work/$name.txt' | grep -q 'EMULATED on the CPU'"
  local checked
  checked=$(grep -c ' checked$' "$work/$name.txt")
  check "$name: $rows or more rows say checked ($checked)" test "$checked" -ge "$rows"
  # The work folder's random name (mktemp) may itself look like a time ("tmp.ab4s/"): it is masked first.
  sed "s|$work|WORK|g" "$work/$name.txt" >"$work/$name.masked.txt"
  check "$name: no row failed" bash -c "! grep -Eq 'FAIL|ERROR' '$work/$name.masked.txt'"
  check "$name: no time printed" bash -c "! grep -Eq '$time_figure' '$work/$name.masked.txt'" ||
    grep -E "$time_figure" "$work/$name.masked.txt" | head -n 5
  check "$name: the JSON says check_only" grep -q '"check_only": true' "$work/$name.json"
  check "$name: the JSON says emulated" grep -q '"emulated": true' "$work/$name.json"
  check "$name: no time in the JSON" bash -c "! grep -Eq '$time_key' '$work/$name.json'" ||
    grep -E "$time_key" "$work/$name.json" | head -n 5
}

case "$part" in
  kernels)
    rows=$("$bin" --list --filter -b64/ | wc -l)
    rehearsal kernels "$rows" "$bin" --check-only --filter -b64/
    check "kernels: the persistent kernel's 64 steps a launch ran" \
      grep -q "64 steps a launch, with the phase timer: launched once, untimed" "$work/kernels.txt"
    check "kernels: a GEMM row launched every mode" \
      grep -Eq "^train-b64/fc1.fwd .* slab +hot, cold, graph +checked$" "$work/kernels.txt"
    ;;
  epoch)
    rehearsal epoch 9 "$bin" --epoch --check-only --epoch-steps 4 --epoch-gemm slab
    check "epoch: 4 steps an epoch" grep -q "256 random training rows (4 steps an epoch)" "$work/epoch.txt"
    check "epoch: the variants end bit-identical" \
      grep -q "final parameters of the variants: bit-identical" "$work/epoch.txt"
    check "epoch: the persistent kernel ran 64 steps a launch (one launch an epoch)" \
      grep -Eq "^persistent\+64 +4 +4 .* 4  checked$" "$work/epoch.txt"
    ;;
  allreduce)
    devices=${MNISTDP_EMU_DEVICES:-1}
    # Ranks 1 to the devices, in powers of two and the count itself: 10 sizes each (4 KB to 1 MB and the
    # gradient buffer), and the same-device section's 4 replica counts of them.
    worlds=0
    for ((w = 1; w < devices; w *= 2)); do worlds=$((worlds + 1)); done
    rehearsal allreduce $((10 * (worlds + 1) + 40)) "$bin" --check-only --max-bytes 1048576
    check "allreduce: every rank count up to $devices ran" \
      grep -Eq "^ +$devices +1048576 +262144 +checked$" "$work/allreduce.txt"
    check "allreduce: no size over --max-bytes" \
      bash -c "! grep -Eq '^ +[0-9]+ +2097152 ' '$work/allreduce.txt'"
    ;;
  refused)
    allreduce=$3
    # refusal COMMAND...: exits 77, saying why, as on a machine without a GPU.
    refusal() {
      "$@" >"$work/refused.txt" 2>&1
      local status=$?
      check "without --check-only, '$(basename "$1") ${*:2}' exits 77" test "$status" -eq 77
      check "... saying that the devices are emulated and nothing was measured" \
        bash -c "grep -q 'no usable GPU (this build.s CUDA devices are emulated on the CPU' '$work/refused.txt' &&
                 grep -q 'nothing was measured' '$work/refused.txt'"
    }
    refusal "$bin" --filter -b64/
    refusal "$bin" --epoch --epoch-steps 4
    refusal "$allreduce" --max-bytes 8192
    # A device that does not answer: the check-only run fails rather than passing or skipping.
    MNISTDP_EMU_DEVICES=2 MNISTDP_EMU_FAILING_DEVICE=0 "$bin" --check-only --filter train-b64/fc2.fwd/naive \
      >"$work/failing.txt" 2>&1
    check "a check-only run on a device that does not answer exits 1" test $? -eq 1
    MNISTDP_EMU_DEVICES=2 MNISTDP_EMU_FAILING_DEVICE=1 "$allreduce" --check-only --max-bytes 8192 \
      >"$work/failing.txt" 2>&1
    check "an all-reduce check-only run with a device that does not answer exits 1" test $? -eq 1
    "$bin" --help >"$work/help.txt" 2>&1
    check "--help describes --check-only and --epoch-steps" \
      bash -c "grep -q -- --check-only '$work/help.txt' && grep -q -- --epoch-steps '$work/help.txt'"
    "$allreduce" --help >"$work/help.txt" 2>&1
    check "the all-reduce's --help describes --check-only" grep -q -- --check-only "$work/help.txt"
    "$bin" --epoch-steps 4 >"$work/steps.txt" 2>&1
    check "--epoch-steps without --epoch is refused" test $? -eq 1
    ;;
  *)
    echo "test_emulated_benchmarks.sh: unknown part '$part'" >&2
    exit 2
    ;;
esac
finish_checks
