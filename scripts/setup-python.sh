#!/usr/bin/env bash
# Sets up the Python that the interoperability tests (tests/python/) run with: Debian's PyTorch plus
# safetensors from PyPI, in a virtual environment at .venv-py (git-ignored) that sees Debian's packages.
# Debian 12 has no python3-safetensors (the script checks, and uses it where a newer Debian has one).
# Safe to run again: it changes nothing when the environment already works. Needs root (or sudo) only when
# Debian packages are missing. ctest finds the environment by itself; nothing needs reconfiguring.
#   scripts/setup-python.sh          set up, or check that it is set up
#   SAFETENSORS_VERSION=x.y.z scripts/setup-python.sh    another safetensors release from PyPI
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$root/.venv-py
safetensors_version=${SAFETENSORS_VERSION:-0.8.0}
case "${1:-}" in
  -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
  "") ;;
  *) echo "setup-python.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

works() { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch, safetensors.torch, numpy' 2>/dev/null; }
if works; then
  echo "setup-python.sh: ready ($("$venv/bin/python" -c 'import torch, safetensors; print("torch", torch.__version__, "safetensors", safetensors.__version__)') in $venv)"
  exit 0
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else echo "setup-python.sh: need root (or sudo) for: $*" >&2; exit 1
  fi
}

packages=(python3 python3-venv python3-torch python3-numpy)
missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
updated=no
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-python.sh: installing ${missing[*]} from Debian"
  as_root apt-get update -qq
  updated=yes
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A Debian safetensors, where one exists, keeps everything in Debian's hands; Debian 12 has none.
debian_safetensors=no
if ! /usr/bin/python3 -c 'import safetensors.torch' 2>/dev/null; then
  [ "$updated" = yes ] || [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ] ||
    { as_root apt-get update -qq; updated=yes; }
  if apt-cache policy python3-safetensors 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    echo "setup-python.sh: installing python3-safetensors from Debian"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-safetensors >/dev/null
    debian_safetensors=yes
  fi
else
  debian_safetensors=yes
fi

# --system-site-packages: the environment sees Debian's torch and numpy; pip adds only what Debian lacks.
# A half-made environment from an interrupted run is made again.
[ -x "$venv/bin/python" ] || { rm -rf "$venv"; /usr/bin/python3 -m venv --system-site-packages "$venv"; }
if [ "$debian_safetensors" = no ]; then
  echo "setup-python.sh: installing safetensors==$safetensors_version from PyPI into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "safetensors==$safetensors_version"
fi

if works; then
  echo "setup-python.sh: ready ($("$venv/bin/python" -c 'import torch, safetensors; print("torch", torch.__version__, "safetensors", safetensors.__version__)') in $venv)"
else
  echo "setup-python.sh: $venv/bin/python cannot import torch, safetensors.torch and numpy; see the errors above" >&2
  "$venv/bin/python" -c 'import torch, safetensors.torch, numpy' || true
  exit 1
fi
