#!/usr/bin/env bash
# Makes (or checks) the virtual environment of the speed peer users would pick on a CPU: PyTorch 2 from PyPI
# (`pip install torch`: MKL and oneDNN inside, AVX-512 kernels chosen at run time), with NumPy for the peer
# program. A benchmark's dependency, never a test's: the wheel pulls its CUDA libraries too (some GB).
#
#   bench/peers/make_torch2_venv.sh [DIR]     DIR defaults to $MNISTDP_PEERS_DIR/torch2, that to
#                                            ~/.cache/mnist-dp/peers/torch2
# Prints the environment's python on its last line; bench/compare.sh --torch2 DIR uses it.
set -euo pipefail
dir=${1:-${MNISTDP_PEERS_DIR:-$HOME/.cache/mnist-dp/peers}/torch2}
python=/usr/bin/python3
if [ ! -x "$dir/bin/python" ]; then
  "$python" -m venv --help >/dev/null 2>&1 ||
    { echo "make_torch2_venv.sh: $python has no venv module (Debian: apt-get install python3-venv)" >&2; exit 1; }
  echo "make_torch2_venv.sh: creating $dir" >&2
  "$python" -m venv "$dir"
fi
if ! "$dir/bin/python" -c "import torch, numpy" 2>/dev/null; then
  echo "make_torch2_venv.sh: installing torch and numpy from PyPI into $dir (large download)" >&2
  "$dir/bin/pip" install --quiet --disable-pip-version-check torch numpy
fi
version=$("$dir/bin/python" -c "import torch; print(torch.__version__)")
case "$version" in
  1.*) echo "make_torch2_venv.sh: $dir holds PyTorch $version, not 2.x" >&2; exit 1 ;;
esac
echo "make_torch2_venv.sh: PyTorch $version in $dir" >&2
echo "$dir/bin/python"
