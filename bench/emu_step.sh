#!/usr/bin/env bash
# The speed of the emulated build (docs/emulation.md): milliseconds a training step on an emulated device, for
# the plain path with each GEMM and for the fast paths, beside the CPU path in the same run. Each figure is the
# host CPU time of the emulator running the CUDA code, for planning test sizes: never a GPU time.
#   bench/emu_step.sh OUT_DIR [--steps N] [--rounds R] [--data DIR] [--build DIR] [--record DIR|none]
# Needs build/emu (scripts/build.sh emu), or the build folder --build names (build/emu-tsan: the same under
# ThreadSanitizer). Writes OUT_DIR/emu_step.json and OUT_DIR/emu_step.txt (each round's figures), and the run's
# record (bench/make_record.py: the commit, the machine, the date, this command and the figures) in
# --record DIR/record.json, by default bench/results/ under OUT_DIR's name; --record none writes none. An OUT_DIR
# inside bench/results/ names the record's folder, and OUT_DIR's files then go to build/bench-runs/ under that
# name (bench/results/ keeps records only).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/emu_step.sh OUT_DIR [--steps N] [--rounds R] [--data DIR] [--build DIR] [--record DIR|none]"
case "${1:-}" in
  -h|--help) sed -n '2,/^set /{/^set /!p}' "$0"; exit 0 ;;
  ""|-*) echo "$usage" >&2; exit 2 ;;
esac
command_line="bench/emu_step.sh$(printf ' %q' "$@")"
out=$1
shift
steps=60 rounds=3 data=/usr/share/datasets/fashion-mnist build=build/emu record=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --record) record=$2; shift 2 ;;
    *) echo "emu_step.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bin=$build/mnist-dp
[ -x "$bin" ] || { echo "emu_step.sh: $bin is missing: run scripts/build.sh $(basename "$build")" >&2; exit 1; }
# shellcheck source=bench/record_folders.sh
. bench/record_folders.sh
record_folders "$out" "$record" ""
out=$raw_dir
mkdir -p "$out"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
variants=("cpu|--device cpu" "plain, gemm blocked|--device cuda" "plain, gemm naive|--device cuda --gemm naive"
  "plain, gemm tiled|--device cuda --gemm tiled" "plain, gemm slab|--device cuda --gemm slab"
  "plain, gemm cublas|--device cuda --gemm cublas" "cuda graphs|--device cuda --cuda-graphs"
  "fused head|--device cuda --fused-head" "fused step|--device cuda --fused-step"
  "persistent, 8 steps a launch|--device cuda --persistent --steps-per-graph 8"
  "3 devices, NCCL|--device cuda --emu-devices 3")
# ms a step of one run: the epoch line's training time over its steps (data loading and evaluation excluded).
ms_per_step() {
  sed -n 's/^Epoch 0 stopped: \([0-9]*\) steps in \([0-9.]*\) s.*/\2 \1/p' "$1" | awk '{ printf "%.3f", 1000 * $1 / $2 }'
}
{
  echo "emulated training step, batch 64, $steps steps a run, median of $rounds rounds (alternated)"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -n1), $(nproc) CPUs; commit $(git rev-parse --short HEAD)"
  echo "build: $build"
  echo "host CPU time of the emulator: not a GPU time"
} >"$out/emu_step.txt"
declare -A times
for ((r = 1; r <= rounds; r++)); do
  for v in "${variants[@]}"; do
    name=${v%%|*}
    args=${v#*|}
    env_devices=1
    if [[ $args == *"--emu-devices 3"* ]]; then env_devices=3; args=${args/--emu-devices 3/}; fi
    # shellcheck disable=SC2086
    MNISTDP_EMU_DEVICES=$env_devices "$bin" train --data "$data" --no-progress --max-steps "$steps" \
      --log-interval 100000 $args >"$out/run.log" 2>&1
    times[$name]="${times[$name]:-} $(ms_per_step "$out/run.log")"
  done
done
rm -f "$out/run.log"
printf '%-32s %10s %s\n' "variant" "ms/step" "(each round)" >>"$out/emu_step.txt"
json="{\"steps\": $steps, \"rounds\": $rounds, \"unit\": \"ms per step, emulated (host CPU), not a GPU time\", \"commit\": \"$(git rev-parse HEAD)\", \"date\": \"$started\", \"host\": \"$(hostname -s)\", \"build\": \"$build\", \"variants\": {"
first=1
for v in "${variants[@]}"; do
  name=${v%%|*}
  median=$(echo "${times[$name]}" | tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  printf '%-32s %10s %s\n' "$name" "$median" "${times[$name]}" >>"$out/emu_step.txt"
  [ $first -eq 1 ] || json+=", "
  json+="\"$name\": $median"
  first=0
done
echo "$json}}" >"$out/emu_step.json"
cat "$out/emu_step.txt"
if [ -n "$record_dir" ]; then
  python3 bench/make_record.py emu-step "$out" "$record_dir" --command "$command_line"
fi
