#!/usr/bin/env bash
# A short training run of every CUDA path on emulated devices, sized for the sanitizer presets (emu-asan and
# emu-tsan, docs/emulation.md), where an emulated step costs seconds: the plain launches, CUDA graphs, the
# fused head, the fused step, its programmatic launches, the persistent kernel, several steps a graph (and a
# shorter graph for the steps left), the persistent kernel over several steps, and three devices through
# NCCL. Three steps each, on the first 192 training and 64 test images of DATA_DIR.
#   test_emulated_paths.sh MNIST_DP CHECKPOINT_TOOL DATA_DIR
# A run passes when it exits 0 with no sanitizer report in its output (the presets' tests run with
# halt_on_error) and gives the plain path's parameters: to the bit on one device, within 1e-5 on three (their
# gradients are summed in another order). Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
tool=$2
data=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"

small_data_set "$data" "$work/data" 192 64
# Whether the run that wrote LOG exited 0 (its code on the log's last line) with no sanitizer's report.
clean() {
  tail -1 "$1" | grep -q "^exit 0$" && ! grep -Eq "Sanitizer|runtime error:" "$1"
}
run() {  # run NAME OPTIONS...: trains three steps, saving NAME.st, logging to NAME.log
  local name=$1
  shift
  "$bin" train --data "$work/data" --device cuda --no-progress --epochs 1 --log-interval 1 \
    --save "$work/$name.st" "$@" >"$work/$name.log" 2>&1
  echo "exit $?" >>"$work/$name.log"
  check "$name: the run ends cleanly" clean "$work/$name.log" || tail -30 "$work/$name.log"
}

run plain
check "plain: on an emulated device" grep -q "^device: .*emulated" "$work/plain.log"
check "plain: three steps" grep -q "Epoch 0, Step 2, Loss" "$work/plain.log" || tail -5 "$work/plain.log"

for variant in "--cuda-graphs" "--fused-head" "--fused-step" "--pdl" "--persistent" "--steps-per-graph 2" \
  "--persistent --steps-per-graph 2"; do
  name=$(echo "$variant" | tr -d ' -')
  # shellcheck disable=SC2086
  run "$name" $variant
  check "$variant gives the plain path's parameters to the bit" cmp -s "$work/plain.st" "$work/$name.st"
done

MNISTDP_EMU_DEVICES=3 run three
check "three devices: through the emulated NCCL" grep -q "all-reduce: NCCL .*(emulated)" "$work/three.log"
check "three devices give one device's parameters within 1e-5" \
  "$tool" compare "$work/three.st" "$work/plain.st" 1e-5

finish_checks
