#!/usr/bin/env bash
# Walks docs/kernels.md's "Adding a matrix-product version" through once, on a copy of the committed tree: a
# made-up v5 (v1's kernel under another name) added by the recipe's places alone, then built on emulated
# devices, where the table's test, the command line and every GEMM test must take it in without another edit.
# Nothing is kept: the copy is removed at the end. About 15 CPU-minutes (the emulated build of the tests).
#   scripts/check-gemm-recipe.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
copy=$(mktemp -d -t mnistdp-gemm-recipe.XXXXXX)
trap 'rm -rf "$copy"' EXIT
git archive HEAD | tar -x -C "$copy"
cd "$copy"

# 1. The kernel file, and its launcher declared in gemm.hpp.
sed -e 's/gemm_naive_kernel/gemm_made_up_kernel/g' -e 's/gemm_v1_naive/gemm_v5_made_up/g' \
  kernels/cuda/gemm/v1_naive.cu >kernels/cuda/gemm/v5_made_up.cu
sed -i '/^void gemm_v4_slab(/a void gemm_v5_made_up(const GemmProblem\& p, cudaStream_t stream);' \
  kernels/cuda/gemm/gemm.hpp
# 2. One row of kGemmVersions, and its GemmImpl value.
sed -i -e 's/enum class GemmImpl { naive, tiled, blocked, slab, cublas };/enum class GemmImpl { naive, tiled, blocked, slab, made_up, cublas };/' \
  -e '/{GemmImpl::cublas, "cublas"/i \    {GemmImpl::made_up, "made_up", "v1 again", "kernels/cuda/gemm/v5_made_up.cu", true, false},' \
  kernels/cuda/gemm/gemm_version.hpp
# 3. One row of kLaunchers.
sed -i '/{GemmImpl::cublas, launch_cublas},/i \    {GemmImpl::made_up, launch_hand_written<gemm_v5_made_up>},' kernels/cuda/gemm/dispatch.cpp
# 4. The file in kernels/CMakeLists.txt.
sed -i 's#^\( *\)cuda/gemm/v4_slab.cu#&\n\1cuda/gemm/v5_made_up.cu#' kernels/CMakeLists.txt
# 5. README's row of --gemm.
sed -i 's/| `--gemm naive\\|tiled\\|blocked\\|slab\\|cublas` |/| `--gemm naive\\|tiled\\|blocked\\|slab\\|made_up\\|cublas` |/' README.md

for place in kernels/cuda/gemm/v5_made_up.cu; do [ -f "$place" ] || { echo "check-gemm-recipe.sh: $place not made" >&2; exit 1; }; done
for file in kernels/cuda/gemm/gemm.hpp kernels/cuda/gemm/gemm_version.hpp kernels/cuda/gemm/dispatch.cpp \
  kernels/CMakeLists.txt README.md; do
  if cmp -s "$file" "$root/$file"; then
    echo "check-gemm-recipe.sh: the recipe's edit of $file did not apply (has the file changed?)" >&2
    exit 1
  fi
done

scripts/build.sh emu mnist-dp mnistdp_tests mnistdp_gpu_tests
build/emu/mnist-dp train --help | grep -q 'made_up (v1 again)' || {
  echo "check-gemm-recipe.sh: --help does not list the new version" >&2
  exit 1
}
build/emu/tests/mnistdp_tests '[gemm_versions]'
# Every GEMM test of the CUDA path, with the new version among the versions it sweeps.
build/emu/tests/mnistdp_gpu_tests '[linear]'
echo "check-gemm-recipe.sh: a version added at the recipe's places builds, is listed and passes every GEMM test"
