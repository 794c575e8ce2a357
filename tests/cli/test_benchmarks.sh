#!/usr/bin/env bash
# mnist-dp-bench's command line, with or without a GPU: the benchmark ids it lists, and options it refuses
# before touching a device, with the bad value named.
#   test_benchmarks.sh MNIST_DP_BENCH
# Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"

"$bin" --list >"$work/list.txt" 2>&1
check "--list needs no GPU" test $? -eq 0
for id in step-b64/step/blocked step-b64/step/fused-step step-b64/step/fused-step+pdl step-b64/step/persistent train-b64/fc1.fwd/slab; do
  check "--list names $id" grep -qx "$id" "$work/list.txt"
done

"$bin" --epoch --epoch-variants plain,fused-step+pdl,bogus >"$work/bogus.txt" 2>&1
check "an unknown epoch variant is refused" test $? -ne 0
check "the refusal names the variant and the choices" grep -q "'bogus' is not a variant (plain, graphs, head, head+graphs, fused-step, fused-step+pdl, fused-step+pdl+64, persistent, persistent+64)" "$work/bogus.txt"

"$bin" --epoch --epoch-gemm bogus >"$work/gemm.txt" 2>&1
check "an unknown GEMM is refused" test $? -ne 0
check "the refusal names the option" grep -q -- "--epoch-gemm" "$work/gemm.txt"

"$bin" --epoch --epoch-tf32 >"$work/tf32.txt" 2>&1
check "--epoch-tf32 without cuBLAS is refused" test $? -ne 0
check "the refusal says what it needs" grep -q -- "--epoch-tf32 needs --epoch-gemm cublas" "$work/tf32.txt"

finish_checks
