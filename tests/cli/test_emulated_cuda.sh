#!/usr/bin/env bash
# The CUDA path of the command line on emulated devices (the emu preset, docs/emulation.md): `--device cuda`
# trains there and says so, follows the CPU path's losses, spreads over several devices through the emulated
# NCCL, queries only the devices asked for, and every fast-path option gives the plain path's parameters.
#   test_emulated_cuda.sh MNIST_DP CHECKPOINT_TOOL DATA_DIR
# Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
tool=$2
data=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"
train() { "$bin" train --data "$data" --no-progress --epochs 1 "$@"; }
# The losses of the log lines, one a line.
losses() { sed -n 's/^Epoch [0-9]*, Step [0-9]*, Loss: //p' "$1"; }
# Whether two files of losses agree within a relative 1e-4 (the GPU tests' tolerance for the CUDA path
# against the CPU path: their sums are not in the same order).
same_losses() {
  paste "$1" "$2" | awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2;
    if (d > 1e-4 * m + 1e-6) bad = 1; n++ } END { exit (bad || n < 2) }'
}

# 1. One emulated device, against the CPU.
train --device cuda --max-steps 30 --log-interval 10 >"$work/cuda.log" 2>&1
check "--device cuda trains on an emulated device" grep -q "^device: .*emulated" "$work/cuda.log" ||
  tail -5 "$work/cuda.log"
check "the epoch's times are marked as the emulator's" grep -q "^Epoch 0 stopped: .*(emulated, no GPU time" \
  "$work/cuda.log"
train --device cpu --max-steps 30 --log-interval 10 >"$work/cpu.log" 2>&1
losses "$work/cuda.log" >"$work/cuda.losses"
losses "$work/cpu.log" >"$work/cpu.losses"
check "the emulated device's losses follow the CPU path's" same_losses "$work/cuda.losses" "$work/cpu.losses" ||
  paste "$work/cuda.losses" "$work/cpu.losses"
train --max-steps 2 >"$work/auto.log" 2>&1
check "--device auto trains on the CPU, never on an emulated device" grep -q "^device: cpu" "$work/auto.log" ||
  grep "^device" "$work/auto.log"

# 2. Three emulated devices through the emulated NCCL: the losses of one device.
MNISTDP_EMU_DEVICES=3 train --device cuda --max-steps 30 --log-interval 10 >"$work/three.log" 2>&1
check "three emulated devices train through NCCL" grep -q "all-reduce: NCCL .*(emulated)" "$work/three.log" ||
  tail -5 "$work/three.log"
losses "$work/three.log" >"$work/three.losses"
check "three devices follow one device's losses" same_losses "$work/three.losses" "$work/cuda.losses"

# 3. A device that does not answer: only the devices asked for are queried, and a failure names its device.
export MNISTDP_EMU_DEVICES=3 MNISTDP_EMU_FAILING_DEVICE=2
train --device cuda --devices 0,1 --max-steps 2 >"$work/beside.log" 2>&1
rc=$?
check "--devices 0,1 trains beside a device that does not answer (exit $rc)" test "$rc" -eq 0 ||
  tail -3 "$work/beside.log"
train --device cuda --max-steps 2 >"$work/failing.log" 2>&1
check "every device asked for: the one that does not answer is named" \
  grep -q "CUDA device 2 did not answer" "$work/failing.log" || tail -3 "$work/failing.log"
unset MNISTDP_EMU_DEVICES MNISTDP_EMU_FAILING_DEVICE

# 4. Every fast-path option and GEMM gives the plain path's parameters (cuBLAS and TF32 within their rounding).
# On the first 1,600 training and 64 test images: the runs' 24 steps, without the 10,000 test images'
# evaluation that took most of each run's time.
small_data_set "$data" "$work/small" 1600 64
data=$work/small
steps=24
train --device cuda --max-steps $steps --save "$work/plain.st" >/dev/null 2>&1
mapfile -t gemm_variants < <(common_bits_gemm_options "$bin")
check "the hand-written GEMMs besides blocked are read from --help (${#gemm_variants[@]})" \
  test "${#gemm_variants[@]}" -ge 3
for variant in "--cuda-graphs" "--fused-head" "--fused-step" "--pdl" "--persistent" "--steps-per-graph 8" \
  "--persistent --steps-per-graph 8" "${gemm_variants[@]}"; do
  name=$(echo "$variant" | tr -d ' -')
  # shellcheck disable=SC2086
  train --device cuda --max-steps $steps --save "$work/$name.st" $variant >"$work/$name.log" 2>&1
  check "$variant gives the plain path's parameters to the bit" cmp -s "$work/plain.st" "$work/$name.st" ||
    tail -3 "$work/$name.log"
done
train --device cuda --max-steps $steps --gemm cublas --save "$work/cublas.st" >/dev/null 2>&1
check "--gemm cublas gives the plain path's parameters within 1e-5" \
  "$tool" compare "$work/cublas.st" "$work/plain.st" 1e-5
train --device cuda --max-steps $steps --gemm cublas --tf32 --save "$work/tf32.st" >/dev/null 2>&1
check "--tf32 gives the plain path's parameters within TF32's rounding (1e-2)" \
  "$tool" compare "$work/tf32.st" "$work/plain.st" 1e-2
check "--tf32 changes the parameters (its products are rounded)" \
  bash -c "! cmp -s '$work/tf32.st' '$work/cublas.st'"

finish_checks
