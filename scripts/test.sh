#!/usr/bin/env bash
# One command from a fresh machine to the whole test suite: installs what is missing, builds (every CUDA kernel
# included when the toolkit is there), runs ctest. GPU tests report "skipped" where no GPU is usable.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup-python.sh   # PyTorch and safetensors, for the checkpoint interoperability tests
scripts/build.sh default
ctest --preset default -j "$(nproc)" "$@"
