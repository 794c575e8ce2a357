#!/usr/bin/env bash
# Phase 5 of scripts/gpu-session.sh: the benchmarks (docs/benchmarks.md), most deciding first: every path's time
# over whole epochs (mnist-dp-bench --epoch) with the fast path's GEMM, each kernel and GEMM version beside cuBLAS
# at batch 64 (--filter -b64/), the all-reduce, then the epochs with the other GEMM versions and with cuBLAS in
# fp32 and TF32, as time allows. With MODE=emulated,
# each program runs --check-only: every output checked against the reference, nothing timed.
set -uo pipefail
: "${MODE:?run by scripts/gpu-session.sh}" "${ROOT:?}" "${BUILD_DIR:?}" "${DATA:?}" "${WORK:?}" "${LIMIT:?}" "${JOBS:?}"
cd "$ROOT" || exit 1
check=()
epoch_length=(--rounds 2)
reduce_bytes=67108864
if [ "$MODE" = emulated ]; then
  check=(--check-only)
  epoch_length=(--epoch-steps 4)
  reduce_bytes=1048576
fi
# shellcheck source=scripts/gpu/timed_steps.sh
. scripts/gpu/timed_steps.sh
# NAME LIMIT COMMAND...: one benchmark, its output in NAME.txt.
bench() {
  local name=$1 limit=$2
  shift 2
  timed_step "$name" "$limit" 10 "$WORK/$name.txt" "$@"
  local rc=$?
  [ "$rc" = 125 ] || tail -n 12 "$WORK/$name.txt"
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
# The two strategies (--strategy allreduce and dataparallel) with 1 and 2 replicas on the GPU: their raw
# results come back in the logs (bench/make_record.py strategies turns them into a record). Timed on a GPU only.
if [ "$MODE" = gpu ]; then
  bench strategies 25 bench/strategies.sh "$WORK/strategies" --build "$BUILD_DIR" --data "$DATA" --device cuda \
    --replicas "1 2" --rounds 2 --steps 300 --record none
fi
what="benchmarks"
[ "$MODE" = emulated ] && what="benchmarks, checked on emulated devices and not timed"
echo "$what: $steps_done done, $steps_failed failed, $steps_skipped skipped for time" >>"$WORK/summary.txt"
[ "$steps_failed" = 0 ] && [ "$steps_done" -gt 0 ]
