#!/usr/bin/env bash
# Runs mnist-dp and its PyTorch peers (bench/peers/simplenet_pytorch.py) one after the other on this machine, on the
# same data, epochs, batch (64) and thread count, and writes one table: time per epoch, samples/s, microseconds per
# step, final test accuracy, and each configuration's time over mnist-dp's. Also the plots (bench/plot.py).
#
#   bench/compare.sh [--device auto|cpu|cuda] [--epochs N] [--threads N] [--data DIR] [--binary PATH]
#                    [--gemm LIST] [--peers LIST] [--python PATH] [--coretype NAME] [--out DIR] [--no-plot]
#                    [--mnistdp-args "ARGS"] [--commit TEXT] [--rounds N] [--graphs] [--torch2 PYTHON|none]
#                    [--record DIR|none]
#
#   cpu  (default without a GPU): mnist-dp --device cpu, and PyTorch's tensor and loader variants with Debian's
#        /usr/bin/python3 (python3-torch, 1.13 on OpenBLAS), all with --threads threads; and the same variants,
#        named pytorch2-..., with PyTorch 2 from PyPI (MKL), the peer users would pick: --torch2 names its
#        python (default: the environment bench/peers/make_torch2_venv.sh makes, where it exists; none: skip).
#        The table adds each run's GFLOP/s (the products of a step, 2 x 64 x (2 x 784 x 256 + 3 x 256 x 10)
#        floating-point operations, over the time) and its time over the floor: those products at one core's
#        peak (mnist-dp-gemm-survey --peak, FMA chains in the widest vectors; the highest of one measurement before
#        each round) times the thread count.
#   cuda (default when nvidia-smi works): mnist-dp --device cuda once per --gemm (every version the binary lists),
#        and PyTorch eager with the data on the device (tensor), compile and graphs, with `python3`. --graphs adds a
#        run per --gemm with mnist-dp's --cuda-graphs (each step replayed as a CUDA graph), named ...-graphs, and
#        one with --fused-step as well (each step three kernels in one graph), named ...-fused-step, and one with
#        --pdl (the fused step with programmatic dependent launch), named ...-fused-pdl, and with 64 steps a
#        graph as well (--steps-per-graph 64), named ...-fused-pdl-64, and one with the persistent kernel, 64
#        steps a launch (--persistent --steps-per-graph 64), named ...-persistent-64.
# --mnistdp-args adds arguments to every mnist-dp run (e.g. "--devices 0" to train on one GPU of several, as the
# peers do). --coretype sets OPENBLAS_CORETYPE for every program (they share Debian's OpenBLAS); without it the
# machine's setting stands, and the table names the kernels OpenBLAS picked. The headline time is the median epoch
# time over the epochs after the first (the first pays for start-up, compilation and capture); every epoch is in
# the JSON.
# --rounds N runs the whole sequence N times (A B C, A B C, ...) and takes each configuration's median over the
# epochs after the first of every round: on a shared machine whose load drifts, the ratios then compare runs made
# under the same conditions rather than one after the other. --commit names the commit the binary was built from, when that is not this checkout's HEAD (the default:
# git rev-parse --short HEAD, with "+dirty" when tracked files differ from it).
# Output: the run's raw files in --out DIR: DIR/compare.md, DIR/compare.json (every epoch), DIR/loss.png,
# DIR/step_time.png, DIR/runs/* (logs and metrics); DIR defaults to build/bench-runs/DATE_DEVICE[-CORETYPE]_HOST.
# And its record (bench/make_record.py: the commit, the machine, the date, this command and the table's figures)
# in --record DIR/record.json, by default bench/results/ under --out's name; --record none writes none. An --out
# inside bench/results/ names the record's folder, and the raw files then go to build/bench-runs/ under that name
# (bench/results/ keeps records only; a plot that a doc shows is copied beside its record).
set -euo pipefail
cd "$(dirname "$0")/.."
command_line="bench/compare.sh$(printf ' %q' "$@")"
device=auto epochs=3 threads=1 data=/usr/share/datasets/fashion-mnist binary=build/default/mnist-dp
gemms="" peers="" python="" coretype="" out="" plot=1 extra="" commit="" rounds=1
graphs=0 torch2=auto record=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --gemm) gemms=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --coretype) coretype=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-plot) plot=0; shift ;;
    --mnistdp-args) extra=$2; shift 2 ;;
    --commit) commit=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --graphs) graphs=1; shift ;;
    --torch2) torch2=$2; shift 2 ;;
    --record) record=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^set /!p}' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$device" in
  auto) if nvidia-smi -L >/dev/null 2>&1; then device=cuda; else device=cpu; fi ;;
  cpu|cuda) ;;
  *) echo "compare.sh: --device must be auto, cpu or cuda, not '$device'" >&2; exit 2 ;;
esac
[[ "$epochs" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --epochs wants a positive whole number" >&2; exit 2; }
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --threads wants a positive whole number" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --rounds wants a positive whole number" >&2; exit 2; }
[ -x "$binary" ] || { echo "compare.sh: $binary not found: run scripts/build.sh first (or pass --binary)" >&2; exit 1; }
# Every GEMM version by default, as the binary lists them (kernels/cuda/gemm/gemm_version.hpp's table).
if [ -z "$gemms" ]; then
  gemms=$("$binary" train --help | sed -n 's/.*--gemm TEXT:{\([^}]*\)}.*/\1/p')
  [ -n "$gemms" ] || { echo "compare.sh: $binary train --help lists no --gemm choices" >&2; exit 1; }
fi
[ -d "$data" ] || { echo "compare.sh: --data $data: no such folder (scripts/setup.sh installs Fashion-MNIST)" >&2; exit 1; }
if [ "$device" = cpu ]; then
  : "${python:=/usr/bin/python3}"
  : "${peers:=tensor,loader}"
else
  nvidia-smi -L >/dev/null 2>&1 || { echo "compare.sh: --device cuda, but nvidia-smi finds no GPU" >&2; exit 1; }
  : "${python:=python3}"
  : "${peers:=tensor,compile,graphs}"
fi
"$python" -c "import torch, numpy" 2>/dev/null ||
  { echo "compare.sh: $python has no PyTorch and NumPy (CPU: scripts/setup.sh --peers)" >&2; exit 1; }
if [ "$torch2" = auto ]; then
  torch2=none
  default_torch2=${MNISTDP_PEERS_DIR:-$HOME/.cache/mnist-dp/peers}/torch2/bin/python
  [ "$device" = cpu ] && [ -x "$default_torch2" ] && torch2=$default_torch2
  [ "$torch2" = none ] && [ "$device" = cpu ] &&
    echo "compare.sh: no PyTorch 2 environment ($default_torch2): bench/peers/make_torch2_venv.sh makes it" >&2
fi
if [ "$torch2" != none ]; then
  "$torch2" -c "import torch, numpy" 2>/dev/null ||
    { echo "compare.sh: --torch2 $torch2 has no PyTorch and NumPy (bench/peers/make_torch2_venv.sh)" >&2; exit 1; }
fi
survey=$(dirname "$binary")/mnist-dp-gemm-survey
[ -n "$coretype" ] && export OPENBLAS_CORETYPE=$coretype
# One thread count for everyone: OpenBLAS (mnist-dp and PyTorch's BLAS) and PyTorch's own intra-op pool.
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

stamp=$(date -u +%Y-%m-%d)
# shellcheck source=bench/record_folders.sh
. bench/record_folders.sh
record_folders "$out" "$record" "${stamp}_${device}${coretype:+-$coretype}_$(hostname -s)"
out=$raw_dir
mkdir -p "$out/runs"

# What this machine is: for the table's header and the JSON.
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_before=$(cut -d' ' -f1 /proc/loadavg)
gpu="" driver=""
if [ "$device" = cuda ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
fi
openblas_core=$("$python" -c 'import ctypes; f = ctypes.CDLL("libopenblas.so.0").openblas_get_corename
f.restype = ctypes.c_char_p; print(f().decode())' 2>/dev/null || echo unknown)
if [ -z "$commit" ]; then
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit+dirty"
fi

failed=0
round=1
run_mnistdp() {  # name, then extra arguments
  local name=$1 file="$out/runs/$1.r$round"; shift
  echo "compare.sh: round $round: $name" >&2
  echo "$name $round $(cut -d' ' -f1 /proc/loadavg)" >>"$out/runs/load.txt"
  # $extra is split into words on purpose: it holds several arguments.
  # shellcheck disable=SC2086
  if ! "$binary" train --data "$data" --epochs "$epochs" --threads "$threads" --no-progress \
      --metrics "$file.jsonl" "$@" $extra >"$file.log" 2>&1; then
    echo "compare.sh: $name failed: $(tail -1 "$file.log")" >&2
    failed=1
  fi
}
run_peer() {  # variant [python name-prefix]
  local py=${2:-$python} prefix=${3:-pytorch}
  local name="$prefix-$1" file="$out/runs/$prefix-$1.r$round"
  echo "compare.sh: round $round: $name" >&2
  echo "$name $round $(cut -d' ' -f1 /proc/loadavg)" >>"$out/runs/load.txt"
  if ! "$py" bench/peers/simplenet_pytorch.py --variant "$1" --device "$device" --data "$data" \
      --epochs "$epochs" --threads "$threads" >"$file.log" 2>&1; then
    # A variant this PyTorch or device cannot run (compile before 2.0, graphs without a GPU) is noted, not fatal.
    echo "compare.sh: $name did not run: $(tail -1 "$file.log")" >&2
  fi
}

IFS=, read -r -a gemm_list <<<"$gemms"
IFS=, read -r -a peer_list <<<"$peers"
# One core's peak, measured before every round: a shared machine's speed drifts, and the highest measurement
# is the floor that is not flattered by a slow moment.
: >"$out/runs/peaks.jsonl"
for ((round = 1; round <= rounds; round++)); do
  [ "$device" = cpu ] && [ -x "$survey" ] && "$survey" --peak >>"$out/runs/peaks.jsonl"
  if [ "$device" = cpu ]; then
    run_mnistdp mnistdp-cpu --device cpu
  else
    for g in "${gemm_list[@]}"; do
      run_mnistdp "mnistdp-cuda-$g" --device cuda --gemm "$g"
      if [ "$graphs" = 1 ]; then
        run_mnistdp "mnistdp-cuda-$g-graphs" --device cuda --gemm "$g" --cuda-graphs
        run_mnistdp "mnistdp-cuda-$g-fused-step" --device cuda --gemm "$g" --fused-step
        run_mnistdp "mnistdp-cuda-$g-fused-pdl" --device cuda --gemm "$g" --pdl
        run_mnistdp "mnistdp-cuda-$g-fused-pdl-64" --device cuda --gemm "$g" --pdl --steps-per-graph 64
        run_mnistdp "mnistdp-cuda-$g-persistent-64" --device cuda --gemm "$g" --persistent --steps-per-graph 64
      fi
    done
  fi
  for p in "${peer_list[@]}"; do run_peer "$p"; done
  if [ "$torch2" != none ]; then
    for p in "${peer_list[@]}"; do run_peer "$p" "$torch2" pytorch2; done
  fi
done

cut -d' ' -f1 /proc/loadavg >"$out/runs/load_after.txt"
peak_json=$("$python" -c 'import json, sys
peaks = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
best = max(peaks, key=lambda p: p["peak_gflops"]) if peaks else {"peak_gflops": None, "peak_isa": "unmeasured"}
best["peak_gflops_measured"] = [p["peak_gflops"] for p in peaks]
print(json.dumps(best))' "$out/runs/peaks.jsonl")
cat >"$out/runs/machine.json" <<EOF
{"date": "$started", "host": "$(hostname -s)",
 "cpu": "$(lscpu | sed -n 's/^Model name: *//p' | head -1)", "cpus": $(getconf _NPROCESSORS_ONLN),
 "cpu_flags_avx512f": $(grep -q avx512f /proc/cpuinfo && echo true || echo false),
 "openblas_core": "$openblas_core", "openblas_coretype_env": "${OPENBLAS_CORETYPE:-}",
 "device": "$device", "gpu": "$gpu", "driver": "$driver", "commit": "$commit",
 "epochs": $epochs, "threads": $threads, "data": "$data", "python": "$("$python" -c 'import sys; print(sys.version.split()[0])')",
 "torch": "$("$python" -c 'import torch; print(torch.__version__)')", "rounds": $rounds,
 "torch2": "$([ "$torch2" != none ] && "$torch2" -c 'import torch; print(torch.__version__)')",
 "peak": $peak_json,
 "load_average_before": $load_before}
EOF
"$python" bench/compare_report.py "$out"
if [ "$plot" = 1 ]; then
  plotter=""
  for py in "$python" /usr/bin/python3; do
    if "$py" -c "import matplotlib" 2>/dev/null; then plotter=$py; break; fi
  done
  if [ -n "$plotter" ]; then
    "$plotter" bench/plot.py "$out" || failed=1
  else
    echo "compare.sh: no matplotlib (Debian: python3-matplotlib): no plots" >&2
  fi
fi
if [ -n "$record_dir" ]; then
  "$python" bench/make_record.py compare "$out" "$record_dir" --command "$command_line" || failed=1
fi
exit $failed
