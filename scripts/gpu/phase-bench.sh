#!/usr/bin/env bash
# Phase 5 of scripts/gpu-session.sh: the benchmarks (docs/benchmarks.md), most deciding first: every path's time
# over whole epochs (mnist-dp-bench --epoch) with the fast path's GEMM, each kernel and GEMM version beside cuBLAS
# at batch 64 (--filter -b64/), the all-reduce, then the epochs with the other GEMM versions and with cuBLAS in
# fp32 and TF32, as time allows. With MODE=emulated,
# each program runs --check-only: every output checked against the reference, nothing timed.
set -uo pipefail
: "${MODE:?run by scripts/gpu-session.sh}" "${ROOT:?}" "${BUILD_DIR:?}" "${DATA:?}" "${WORK:?}" "${LIMIT:?}" "${JOBS:?}"
cd "$ROOT" || exit 1
deadline=$((SECONDS + LIMIT - 5))
check=()
epoch_length=(--rounds 2)
reduce_bytes=67108864
if [ "$MODE" = emulated ]; then
  check=(--check-only)
  epoch_length=(--epoch-steps 4)
  reduce_bytes=1048576
fi
done_count=0 failed=0 skipped=0
# NAME LIMIT COMMAND...: one benchmark, within its limit and the phase's deadline.
bench() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 10 ]; then
    skipped=$((skipped + 1))
    echo "$name: skipped, no time left" | tee -a "$WORK/results.txt"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local start=$SECONDS
  timeout "$limit" "$@" >"$WORK/$name.txt" 2>&1
  local rc=$?
  tail -n 12 "$WORK/$name.txt"
  local result
  case $rc in
    0) result="done in $((SECONDS - start))s" ;;
    124) result="stopped at its ${limit}s limit" ;;
    *) result="exit $rc" ;;
  esac
  if [ "$rc" = 0 ]; then done_count=$((done_count + 1)); else failed=$((failed + 1)); fi
  echo "$name: $result" | tee -a "$WORK/results.txt"
  return "$rc"
}
bench epoch-slab 45 "$BUILD_DIR/mnist-dp-bench" --epoch --epoch-gemm slab "${epoch_length[@]}" "${check[@]}" \
  --json "$WORK/epoch-slab.json"
rc=$?
# The variants share one process, so a fault in one (a kernel's first run on a GPU) loses them all: when the run
# failed without its JSON (not when it was stopped), the plain path and the fast paths run again one by one.
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ ! -f "$WORK/epoch-slab.json" ]; then
  for variant in plain graphs fused-step fused-step+pdl fused-step+pdl+64 persistent+64; do
    bench "epoch-slab-$variant" 10 "$BUILD_DIR/mnist-dp-bench" --epoch --epoch-gemm slab --epoch-variants "$variant" \
      "${epoch_length[@]}" "${check[@]}" --json "$WORK/epoch-slab-$variant.json"
  done
fi
bench kernels 45 "$BUILD_DIR/mnist-dp-bench" --quick --filter -b64/ "${check[@]}" --json "$WORK/kernels.json"
bench allreduce 25 "$BUILD_DIR/mnist-dp-allreduce-bench" --quick --max-bytes "$reduce_bytes" "${check[@]}" \
  --json "$WORK/allreduce.json"
for gemm in blocked naive tiled; do
  bench "epoch-$gemm" 25 "$BUILD_DIR/mnist-dp-bench" --epoch --epoch-gemm "$gemm" "${epoch_length[@]}" "${check[@]}" \
    --json "$WORK/epoch-$gemm.json"
done
# cuBLAS, in fp32 and in TF32 (tensor cores; its accuracy is the training phase's tf32 path), plain and as graphs:
# what the library gives the products. Last, as it decides no default.
bench epoch-cublas 20 "$BUILD_DIR/mnist-dp-bench" --epoch --epoch-gemm cublas --epoch-variants plain,graphs \
  "${epoch_length[@]}" "${check[@]}" --json "$WORK/epoch-cublas.json"
bench epoch-cublas-tf32 20 "$BUILD_DIR/mnist-dp-bench" --epoch --epoch-gemm cublas --epoch-tf32 \
  --epoch-variants plain,graphs "${epoch_length[@]}" "${check[@]}" --json "$WORK/epoch-cublas-tf32.json"
what="benchmarks"
[ "$MODE" = emulated ] && what="benchmarks, checked on emulated devices and not timed"
echo "$what: $done_count done, $failed failed, $skipped skipped for time" >>"$WORK/summary.txt"
[ "$failed" = 0 ] && [ "$done_count" -gt 0 ]
