#!/usr/bin/env bash
# One epoch of Fashion-MNIST on emulated devices (docs/emulation.md), against the CPU path: one device and three
# (through the emulated NCCL) follow the CPU path's losses and parameters within the GPU tests' tolerance, and
# every fast-path option and GEMM gives the plain path's parameters (to the bit; cuBLAS and TF32 within their
# rounding). About ten minutes on two cores; the command-line test of the same (tests/cli/test_emulated_cuda.sh)
# runs 24 steps of each in CI.
#   scripts/emu-epoch-check.sh OUT_DIR [DATA_DIR]
# Needs build/emu (scripts/build.sh emu). Writes the logs, the checkpoints and OUT_DIR/summary.txt; closes with
# 'N passed, M failed'.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: scripts/emu-epoch-check.sh OUT_DIR [DATA_DIR]}
data=${2:-/usr/share/datasets/fashion-mnist}
bin=build/emu/mnist-dp
tool=build/emu/tests/checkpoint_tool
[ -x "$bin" ] && [ -x "$tool" ] || { echo "emu-epoch-check.sh: run scripts/build.sh emu first" >&2; exit 1; }
mkdir -p "$out"
summary=$out/summary.txt
# shellcheck source=tests/cli/checks.sh
. tests/cli/checks.sh
exec > >(tee "$summary") 2>&1
echo "one epoch on $(basename "$data"), emulated devices; commit $(git rev-parse --short HEAD); $(date -u +%F)"
train() {
  local name=$1
  shift
  "$bin" train --data "$data" --no-progress --epochs 1 --log-interval 100 --save "$out/$name.st" "$@" \
    >"$out/$name.log" 2>&1
}
losses() { sed -n 's/^Epoch [0-9]*, Step [0-9]*, Loss: //p' "$out/$1.log"; }
same_losses() {
  paste <(losses "$1") <(losses "$2") | awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d;
    m = $2 < 0 ? -$2 : $2; if (d > 1e-4 * m + 1e-6) bad = 1; n++ } END { exit (bad || n < 9) }'
}

train cpu --device cpu
train cuda --device cuda
MNISTDP_EMU_DEVICES=3 train cuda3 --device cuda
grep -h "^Epoch 0 done" "$out/cpu.log" "$out/cuda.log" "$out/cuda3.log"
check "one emulated device follows the CPU path's losses (1e-4)" same_losses cuda cpu
check "one emulated device ends at the CPU path's parameters (1e-4)" "$tool" compare "$out/cuda.st" "$out/cpu.st" 1e-4
check "three emulated devices follow one device's losses (1e-4)" same_losses cuda3 cuda
check "three emulated devices end at one device's parameters (1e-4)" \
  "$tool" compare "$out/cuda3.st" "$out/cuda.st" 1e-4
mapfile -t gemm_variants < <(common_bits_gemm_options "$bin")
check "the hand-written GEMMs besides blocked are read from --help (${#gemm_variants[@]})" \
  test "${#gemm_variants[@]}" -ge 3
for variant in "--cuda-graphs" "--fused-head" "--fused-step" "--pdl" "--steps-per-graph 8" \
  "--persistent --steps-per-graph 64" "${gemm_variants[@]}"; do
  name=$(echo "$variant" | tr -d ' -')
  # shellcheck disable=SC2086
  train "$name" --device cuda $variant
  check "$variant gives the plain path's parameters to the bit after an epoch" cmp -s "$out/cuda.st" "$out/$name.st"
done
train cublas --device cuda --gemm cublas
check "--gemm cublas ends within 1e-5 of the plain path" "$tool" compare "$out/cublas.st" "$out/cuda.st" 1e-5
train tf32 --device cuda --gemm cublas --tf32
check "--tf32 ends within 1e-2 of the plain path" "$tool" compare "$out/tf32.st" "$out/cuda.st" 1e-2
grep -h "test accuracy" "$out/tf32.log" "$out/cuda.log" | grep "^Epoch"
rm -f "$out"/*.st
finish_checks
