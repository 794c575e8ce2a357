#!/usr/bin/env bash
# One command from a fresh machine to a training run: installs what is missing, builds, trains.
# Trains on a GPU when one is usable, on the CPU otherwise; on ./data when it holds MNIST files, else on Debian's
# Fashion-MNIST. Extra arguments go to `mnist-dp train` (for example --epochs 1, --data DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh default
exec build/default/mnist-dp train "$@"
