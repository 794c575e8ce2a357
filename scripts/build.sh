#!/usr/bin/env bash
# Configures and builds with a CMake preset (default: "default", which includes CUDA when a toolkit is found):
# the preset's targets, or the targets named after it.
# The full compiler output, with ptxas's register and spill report for every kernel, goes to build/PRESET/build.log.
#   scripts/build.sh [preset [target...]]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-default}
targets=("${@:2}")
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake --preset "$preset" | grep -E "^-- mnist-dp:" || true
mkdir -p "build/$preset"
log="build/$preset/build.log"
echo "build.sh: building preset '$preset' (log: $log)"
if ! cmake --build --preset "$preset" ${targets[@]+--target "${targets[@]}"} >"$log" 2>&1; then
  grep -E -B2 -A12 "error|FAILED" "$log" | head -120 >&2
  echo "build.sh: the build failed; the whole log is $log" >&2
  exit 1
fi
if grep -q "bytes spill stores" "$log" && grep -E "[1-9][0-9]* bytes spill stores" "$log" >/dev/null; then
  echo "build.sh: note: some kernels spill registers (grep 'spill' $log)"
fi
echo "build.sh: built build/$preset"
