#!/usr/bin/env bash
# Installs what mnist-dp needs to build, test and train, from Debian's packages. Safe to run again: it installs
# only what is missing. The CUDA toolkit is not a Debian package here; without it the build is CPU-only.
#   scripts/setup.sh            build and test dependencies, and Debian's Fashion-MNIST as default data
#   scripts/setup.sh --peers    also PyTorch (CPU build) and matplotlib for the side-by-side benchmarks
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config gdb
  clang-14 libclang-rt-14-dev libomp-14-dev
  libfmt-dev catch2 zlib1g-dev libcli11-dev nlohmann-json3-dev libssl-dev
  libopenblas-dev libopenblas0-pthread libbenchmark-dev
  libboost-context-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist
)
for arg in "$@"; do
  case "$arg" in
    --peers) packages+=(python3-torch python3-numpy python3-matplotlib) ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  echo "setup.sh: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null; then
  echo "setup.sh: ready (CUDA toolkit found: the build includes the CUDA path)"
else
  echo "setup.sh: ready (no CUDA toolkit: the build is CPU-only)"
fi
