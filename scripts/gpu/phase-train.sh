#!/usr/bin/env bash
# Phase 3 of scripts/gpu-session.sh: training on every CUDA path, then on the CPU with the same seed. Each run's
# metrics (every epoch's time, steps and test accuracy) go to metrics-NAME.jsonl; scripts/gpu/session_report.py
# turns them into each path's step time and accuracy, and checks that the paths which promise the plain path's
# bits end with its parameters (the checkpoints each run saves, byte for byte) and its loss lines. With MODE=emulated, a few steps of each path on emulated devices.
set -uo pipefail
: "${MODE:?run by scripts/gpu-session.sh}" "${ROOT:?}" "${BUILD_DIR:?}" "${DATA:?}" "${WORK:?}" "${LIMIT:?}" "${JOBS:?}"
cd "$ROOT" || exit 1
bin=$BUILD_DIR/mnist-dp
if [ ! -d "$DATA" ]; then
  echo "no data at $DATA (scripts/gpu-prepare.sh puts the four IDX files in .devdeps/data)" >>"$WORK/summary.txt"
  exit 1
fi
if [ "$MODE" = emulated ]; then
  length=(--epochs 1 --max-steps 24 --log-interval 1)
  per_run=60
else
  length=(--epochs "$EPOCHS" --log-interval 100)
  per_run=$(((LIMIT - 10) / 6))  # the slow paths take most of it; the others a few seconds
fi
# NAME and its options; the NAMEs are session_report.py's keys.
runs=(
  "plain|--device cuda"
  "cuda-graphs|--device cuda --cuda-graphs"
  "fused-head|--device cuda --fused-head"
  "fused-step|--device cuda --fused-step"
  "pdl|--device cuda --pdl"
  "steps-per-graph-64|--device cuda --steps-per-graph 64"
  "persistent-64|--device cuda --persistent --steps-per-graph 64"
  "fast-path|--device cuda --pdl --gemm slab --steps-per-graph 64"
  "cublas|--device cuda --gemm cublas"
  "tf32|--device cuda --gemm cublas --tf32"
  "replicas-2|--device cuda --replicas 2 --devices 0"
  "dataparallel-2|--device cuda --replicas 2 --devices 0 --strategy dataparallel"
  "cpu|--device cpu"
)
: >"$WORK/runs.tsv"
failed=0
for run in "${runs[@]}"; do
  name=${run%%|*}
  read -r -a args <<<"${run#*|}"
  start=$(date +%s.%N)
  params=$WORK/params-$name.safetensors
  rm -f "$params"
  timeout "$per_run" "$bin" train --data "$DATA" "${length[@]}" "${args[@]}" --seed 0 --no-progress \
    --metrics "$WORK/metrics-$name.jsonl" --save "$params" >"$WORK/train-$name.log" 2>&1
  rc=$?
  digest=$(sha256sum "$params" 2>/dev/null | cut -c1-64)
  rm -f "$params"
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "${run#*|}" "$rc" "$secs" "${digest:-none}" >>"$WORK/runs.tsv"
  echo "$name (${run#*|}): exit $rc, ${secs}s: $(tail -n 1 "$WORK/train-$name.log")"
  [ "$rc" = 0 ] || failed=$((failed + 1))
done
python3 scripts/gpu/session_report.py --train "$WORK" --mode "$MODE" >"$WORK/train-table.txt" || failed=$((failed + 1))
cat "$WORK/train-table.txt"
tail -n 1 "$WORK/train-table.txt" >>"$WORK/summary.txt"
[ "$failed" = 0 ]
