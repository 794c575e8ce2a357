#!/usr/bin/env bash
# Times mnist-dp's CPU path and the PyTorch reference program (data preloaded as one tensor, its fastest CPU
# variant) on the same machine, data, batch, epochs and thread count, one after the other, and prints the ratio.
#   bench/cpu_vs_pytorch.sh [--epochs N] [--threads N] [--data DIR] [--binary PATH]
# Needs: a built mnist-dp (scripts/build.sh) and Debian's python3-torch (scripts/setup.sh --peers).
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=3 threads=1 data=/usr/share/datasets/fashion-mnist binary=build/default/mnist-dp
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) epochs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "cpu_vs_pytorch.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || { echo "cpu_vs_pytorch.sh: $binary not found: run scripts/build.sh first" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "cpu_vs_pytorch.sh: no PyTorch: run scripts/setup.sh --peers" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Both use one BLAS thread unless told otherwise; OpenBLAS and PyTorch read these.
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

"$binary" train --device cpu --data "$data" --epochs "$epochs" --threads "$threads" --no-progress \
  --metrics "$work/mnistdp.jsonl" >"$work/mnistdp.log"
/usr/bin/python3 bench/peers/simplenet_pytorch.py --variant tensor --data "$data" --epochs "$epochs" \
  --threads "$threads" >"$work/pytorch.log"

/usr/bin/python3 - "$work" "$epochs" "$threads" <<'PY'
import json, statistics, sys
work, epochs, threads = sys.argv[1], sys.argv[2], sys.argv[3]
ours = [json.loads(l) for l in open(f"{work}/mnistdp.jsonl") if '"event":"epoch"' in l]
peer = [json.loads(l[7:]) for l in open(f"{work}/pytorch.log") if l.startswith("RESULT ")]
def row(name, recs):
    t = statistics.median(r["seconds"] for r in recs)
    return name, t, recs[-1]["test_accuracy"]
rows = [row("mnist-dp (cpu, OpenBLAS)", ours), row(f"PyTorch {peer[0]['torch']} (data in one tensor)", peer)]
print(f"{epochs} epochs, {threads} thread(s); median epoch time")
print(f"{'program':<40} {'s/epoch':>8} {'us/step':>8} {'test acc':>9}")
for name, t, acc in rows:
    print(f"{name:<40} {t:8.3f} {t / 938 * 1e6:8.1f} {100 * acc:8.2f}%")
print(f"ratio mnist-dp / PyTorch: {rows[0][1] / rows[1][1]:.2f}")
PY
