#!/usr/bin/env bash
# Folded into bench/compare.sh, which this now calls: mnist-dp's CPU path against PyTorch with the data in one
# tensor, on the same machine, data, epochs and thread count. Takes compare.sh's options (--epochs, --threads,
# --data, --binary, ...); bench/compare.sh --help lists them.
exec "$(dirname "$0")/compare.sh" --device cpu --peers tensor "$@"
