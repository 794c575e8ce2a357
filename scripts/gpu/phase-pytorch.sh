#!/usr/bin/env bash
# Phase 6 of scripts/gpu-session.sh: the peer, PyTorch (bench/peers/simplenet_pytorch.py), on the same data and
# GPU: eager with the data on the device, the whole step as a CUDA graph, torch.compile. Each prints one RESULT
# line an epoch, which scripts/gpu/session_report.py reads. Skipped with MODE=emulated (no GPU for PyTorch).
set -uo pipefail
: "${MODE:?run by scripts/gpu-session.sh}" "${ROOT:?}" "${BUILD_DIR:?}" "${DATA:?}" "${WORK:?}" "${LIMIT:?}" "${JOBS:?}"
cd "$ROOT" || exit 1
if [ "$MODE" = emulated ]; then
  echo "PyTorch needs a GPU: skipped on emulated devices" >>"$WORK/summary.txt"
  exit 77
fi
if ! "$PYTHON" -c "import torch, numpy; assert torch.cuda.is_available()" >"$WORK/python.txt" 2>&1; then
  echo "$PYTHON has no PyTorch with a usable GPU ($(tail -n 1 "$WORK/python.txt"))" >>"$WORK/summary.txt"
  exit 1
fi
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee "$WORK/torch.txt"
# shellcheck source=scripts/gpu/timed_steps.sh
. scripts/gpu/timed_steps.sh
# torch.compile last: its compilation takes the longest.
for variant in tensor graphs compile; do
  PYTHONUNBUFFERED=1 timed_step "$variant" "$LIMIT" 15 "$WORK/pytorch-$variant.log" "$PYTHON" \
    bench/peers/simplenet_pytorch.py --device cuda --variant "$variant" --epochs "$EPOCHS" --data "$DATA"
done
echo "PyTorch: $steps_done variants run, $steps_failed failed, $steps_skipped skipped for time" >>"$WORK/summary.txt"
[ "$steps_failed" = 0 ] && [ "$steps_done" -gt 0 ]
