#!/usr/bin/env bash
# Times the five products of a CPU training step in every matrix library installed here, and in mnist-dp's own
# cpu::gemm, each library in a process of its own (OpenBLAS, BLIS and MKL export the same symbols), and writes
# one table: for each product, the fastest layout each library found, in microseconds and GFLOP/s, beside one
# core's peak. How the CPU path's library was chosen (docs/benchmarks.md).
#
#   bench/gemm_survey.sh [--binary PATH] [--out DIR] [--repeats N] [--mkl PATH]
#
# Libraries: OpenBLAS as this machine's environment sets it (OPENBLAS_CORETYPE, if any) and as OpenBLAS picks by
# itself (the variable unset), BLIS, oneDNN and libxsmm where installed (Debian: libblis-dev, libdnnl-dev,
# libxsmm-dev), MKL from the PyTorch 2 environment (bench/peers/make_torch2_venv.sh) or --mkl, and cpu::gemm in
# each instruction set this CPU runs. One thread each. Output: DIR/survey.md, DIR/survey.json, DIR/*.json
# (each library's rows); DIR defaults to bench/results/DATE_cpu-gemm-survey_HOST.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=build/default/mnist-dp-gemm-survey out="" repeats=15
mkl=${MNISTDP_PEERS_DIR:-$HOME/.cache/mnist-dp/peers}/torch2/lib/libmkl_rt.so.3
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --mkl) mkl=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^set /!p}' "$0"; exit 0 ;;
    *) echo "gemm_survey.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || { echo "gemm_survey.sh: $binary not found: run scripts/build.sh first" >&2; exit 1; }
: "${out:=bench/results/$(date -u +%Y-%m-%d)_cpu-gemm-survey_$(hostname -s)}"
mkdir -p "$out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

run() {  # name, then environment assignments and arguments for the survey
  local name=$1; shift
  echo "gemm_survey.sh: $name" >&2
  if ! env "$@" --json "$out/$name.json" --repeats "$repeats" >"$out/$name.txt" 2>&1; then
    echo "gemm_survey.sh: $name did not run: $(tail -1 "$out/$name.txt")" >&2
    rm -f "$out/$name.json"
  fi
}
run mnistdp "$binary" --library mnistdp
grep -q avx2 /proc/cpuinfo && run mnistdp-avx2 "$binary" --library mnistdp-avx2
run mnistdp-portable "$binary" --library mnistdp-portable
run openblas-env "$binary" --library openblas
run openblas-own -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$binary" --library openblas
run blis "$binary" --library blis
run dnnl "$binary" --library dnnl
run xsmm "$binary" --library xsmm
if [ -e "$mkl" ]; then
  run mkl LD_LIBRARY_PATH="$(dirname "$mkl")" "$binary" --library mkl --mkl "$(basename "$mkl")"
else
  echo "gemm_survey.sh: no MKL at $mkl: skipped" >&2
fi

/usr/bin/python3 - "$out" <<'PY'
import json, os, subprocess, sys
out = sys.argv[1]
runs = {}
for name in sorted(os.listdir(out)):
    if name.endswith(".json") and name != "survey.json":
        with open(os.path.join(out, name)) as f:
            runs[name[:-5]] = json.load(f)
products = ["fc1.fwd", "fc2.fwd", "fc2.dW", "fc2.dX", "fc1.dW"]
table = {}
for lib, r in runs.items():
    for row in r["rows"]:
        if row["status"] != "ok":
            continue
        op = row["product"].replace("fm ", "").split()[0].replace("dWT", "dW")
        key = (lib, row["batch"], op)
        us = row["time"]["median_us"]
        if key not in table or us < table[key]["us"]:
            table[key] = {"us": us, "gflops": row["gflops"], "layout": row["product"]}
peak = max(r["peak_gflops"] for r in runs.values())
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p' | head -1"], capture_output=True,
                     text=True).stdout.strip()
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
lines = [f"# The products of a CPU step, library by library ({runs[next(iter(runs))]['date'][:10]})", "",
         f"CPU: {cpu}; one core's peak {peak:.1f} GFLOP/s (AVX-512 FMA chains); one thread; commit {commit}.",
         "Each cell: the fastest layout the library ran (microseconds, median of the repeats; GFLOP/s). "
         "The step: the sum of the five.", ""]
for batch in sorted({k[1] for k in table}, reverse=True):
    lines += [f"Batch {batch}:", "", "| library | kernels | " + " | ".join(products) + " | step | step GFLOP/s |",
              "|---|---|" + "---:|" * (len(products) + 2)]
    flop = 2 * batch * (2 * 784 * 256 + 3 * 256 * 10)
    order = sorted(runs, key=lambda lib: sum(table.get((lib, batch, op), {"us": 1e9})["us"] for op in products))
    for lib in order:
        cells = [table.get((lib, batch, op)) for op in products]
        step = sum(c["us"] for c in cells) if all(cells) else None
        lines.append(f"| {lib} | {runs[lib]['detail']} | " +
                     " | ".join(f"{c['us']:.1f} ({c['gflops']:.0f})" if c else "-" for c in cells) +
                     (f" | {step:.1f} | {flop / step / 1e3:.0f} |" if step else " | - | - |"))
    lines.append("")
text = "\n".join(lines)
with open(os.path.join(out, "survey.md"), "w") as f:
    f.write(text)
with open(os.path.join(out, "survey.json"), "w") as f:
    json.dump({"cpu": cpu, "commit": commit, "peak_gflops": peak,
               "best": [{"library": k[0], "batch": k[1], "product": k[2], **v} for k, v in table.items()],
               "runs": runs}, f, indent=1)
print(text)
PY
