#!/usr/bin/env bash
# Times the five products of a CPU training step in every matrix library installed here, and in mnist-dp's own
# cpu::gemm, each library in a process of its own (OpenBLAS, BLIS and MKL export the same symbols), and writes
# one table: for each product, the fastest layout each library found, in microseconds and GFLOP/s, beside one
# core's peak. How the CPU path's library was chosen (docs/benchmarks.md).
#
#   bench/gemm_survey.sh [--binary PATH] [--out DIR] [--repeats N] [--rounds N] [--mkl PATH] [--record DIR|none]
#
# Libraries: OpenBLAS as this machine's environment sets it (OPENBLAS_CORETYPE, if any) and as OpenBLAS picks by
# itself (the variable unset), BLIS, oneDNN and libxsmm where installed (Debian: libblis-dev, libdnnl-dev,
# libxsmm-dev), MKL from the PyTorch 2 environment (bench/peers/make_torch2_venv.sh) or --mkl, and cpu::gemm in
# each instruction set this CPU runs. One thread each. --rounds N runs the whole list N times (A B C, A B C, ...)
# and takes each product's median over the rounds, so that a drift in the machine's speed falls on every library
# alike. Besides the fastest layout of each product, the table gives each library's step in each consistent set of
# layouts (a step must store its activations and weights one way). Output: the run's raw files in --out DIR:
# DIR/survey.md, DIR/survey.json, DIR/*.json and DIR/*.txt (each library's rows, round by round); DIR defaults to
# build/bench-runs/DATE_cpu-gemm-survey_HOST. And its record (bench/make_record.py: the commit, the CPU, the date,
# this command and every library's figures) in --record DIR/record.json, by default bench/results/ under --out's
# name; --record none writes none. An --out inside bench/results/ names the record's folder, and the raw files
# then go to build/bench-runs/ under that name (bench/results/ keeps records only).
set -euo pipefail
cd "$(dirname "$0")/.."
command_line="bench/gemm_survey.sh$(printf ' %q' "$@")"
binary=build/default/mnist-dp-gemm-survey out="" repeats=15 rounds=1 record=""
mkl=${MNISTDP_PEERS_DIR:-$HOME/.cache/mnist-dp/peers}/torch2/lib/libmkl_rt.so.3
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --mkl) mkl=$2; shift 2 ;;
    --record) record=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^set /!p}' "$0"; exit 0 ;;
    *) echo "gemm_survey.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || { echo "gemm_survey.sh: $binary not found: run scripts/build.sh first" >&2; exit 1; }
# shellcheck source=bench/record_folders.sh
. bench/record_folders.sh
record_folders "$out" "$record" "$(date -u +%Y-%m-%d)_cpu-gemm-survey_$(hostname -s)"
out=$raw_dir
mkdir -p "$out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

run() {  # name, then environment assignments and arguments for the survey
  local name=$1 file="$out/$1.r$round"; shift
  echo "gemm_survey.sh: round $round: $name" >&2
  if ! env "$@" --json "$file.json" --repeats "$repeats" >"$file.txt" 2>&1; then
    echo "gemm_survey.sh: $name did not run: $(tail -1 "$file.txt")" >&2
    rm -f "$file.json"
  fi
}
for ((round = 1; round <= rounds; round++)); do
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
done

/usr/bin/python3 - "$out" <<'PY'
import json, os, re, socket, statistics, subprocess, sys
out = sys.argv[1]
runs = {}  # library -> list of rounds' JSON
for name in sorted(os.listdir(out)):
    m = re.match(r"^(.*)\.r(\d+)\.json$", name)
    if m:
        with open(os.path.join(out, name)) as f:
            runs.setdefault(m.group(1), []).append(json.load(f))
# (library, batch, layout) -> median over the rounds of each round's median time
times = {}
for lib, rounds in runs.items():
    samples = {}
    for r in rounds:
        for row in r["rows"]:
            if row["status"] == "ok":
                samples.setdefault((row["batch"], row["product"]), []).append(row["time"]["median_us"])
    for (batch, layout), us in samples.items():
        times[(lib, batch, layout)] = statistics.median(us)
# The products of a step, and the layouts a step could run together: bench/make_record.py's, which reads them
# back from the run's files.
sys.path.insert(0, "bench")
from make_record import PRODUCTS as products, LAYOUT_SETS as layout_sets
def product_of(layout):
    return layout.replace("fm ", "").split()[0].replace("dWT", "dW")
best = {}
for (lib, batch, layout), us in times.items():
    key = (lib, batch, product_of(layout))
    if key not in best or us < best[key]["us"]:
        best[key] = {"us": us, "layout": layout}
peaks = [r["peak_gflops"] for rounds in runs.values() for r in rounds]
peak = statistics.median(peaks)
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p' | head -1"], capture_output=True,
                     text=True).stdout.strip()
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
first = next(iter(runs.values()))[0]
lines = [f"# The products of a CPU step, library by library ({first['date'][:10]})", "",
         f"CPU: {cpu}; one core's peak {peak:.1f} GFLOP/s (median of {len(peaks)} measurements, AVX-512 FMA "
         f"chains; from {min(peaks):.1f} to {max(peaks):.1f}); one thread; commit {commit}; "
         f"{max(len(r) for r in runs.values())} round(s), each time the median over the rounds.", "",
         "First table: each product in the fastest layout the library ran (microseconds; GFLOP/s). Second: the "
         "step, the five products summed, in each consistent set of layouts; best in bold.", ""]
summary = []
for batch in sorted({k[1] for k in best}, reverse=True):
    flop = {"fc1.fwd": 2 * batch * 784 * 256, "fc1.dW": 2 * batch * 784 * 256, "fc2.fwd": 2 * batch * 256 * 10,
            "fc2.dW": 2 * batch * 256 * 10, "fc2.dX": 2 * batch * 256 * 10}
    step_flop = sum(flop.values())
    def set_total(lib, name):
        ts = [times.get((lib, batch, layout)) for layout in layout_sets[name]]
        return sum(ts) if all(t is not None for t in ts) else None
    def best_set(lib):
        totals = [(set_total(lib, n), n) for n in layout_sets if set_total(lib, n) is not None]
        return min(totals) if totals else (None, None)
    order = sorted(runs, key=lambda lib: best_set(lib)[0] or 1e12)
    lines += [f"Batch {batch}:", "", "| library | kernels | " + " | ".join(products) + " |",
              "|---|---|" + "---:|" * len(products)]
    for lib in order:
        cells = [best.get((lib, batch, op)) for op in products]
        lines.append(f"| {lib} | {runs[lib][0]['detail']} | " +
                     " | ".join(f"{c['us']:.1f} ({flop[op] / c['us'] / 1e3:.0f})" if c else "-"
                                for c, op in zip(cells, products)) + " |")
    lines += ["", "| library | " + " | ".join(layout_sets) + " | step GFLOP/s |",
              "|---|" + "---:|" * (len(layout_sets) + 1)]
    for lib in order:
        total, name = best_set(lib)
        cells = []
        for n in layout_sets:
            t = set_total(lib, n)
            cells.append("-" if t is None else (f"**{t:.1f}**" if n == name else f"{t:.1f}"))
        lines.append(f"| {lib} | " + " | ".join(cells) + (f" | {step_flop / total / 1e3:.0f} |" if total else " | - |"))
        summary.append({"library": lib, "batch": batch, "best_set": name, "step_us": total})
    lines.append("")
    # fc1's work with its element-wise passes (bias and ReLU, SGD on w1), as a step on each library runs it.
    work = {}
    for lib, rounds in runs.items():
        rows = [w for r in rounds for w in r.get("fc1_work", []) if w["batch"] == batch]
        if rows:
            fwd = statistics.median(w["forward"]["median_us"] for w in rows)
            upd = statistics.median(w["update"]["median_us"] for w in rows)
            work[lib] = (fwd, upd, rows[0]["fused"])
    if work:
        lines += [f"fc1 with its element-wise work, batch {batch} (microseconds): cpu::gemm with the bias and ReLU "
                  "and the SGD step on w1 in its epilogues, every library with the product, then a pass of "
                  "its own over the output (bias and ReLU) and ref::sgd_step over w1 and its stored gradient.", "",
                  "| library | fwd + bias + ReLU | dW + SGD on w1 | sum |", "|---|---:|---:|---:|"]
        for lib, (fwd, upd, fused) in sorted(work.items(), key=lambda kv: kv[1][0] + kv[1][1]):
            lines.append(f"| {lib}{' (fused)' if fused else ''} | {fwd:.1f} | {upd:.1f} | {fwd + upd:.1f} |")
            summary.append({"library": lib, "batch": batch, "fc1_work_us": fwd + upd, "fused": fused})
        lines.append("")
text = "\n".join(lines)
with open(os.path.join(out, "survey.md"), "w") as f:
    f.write(text)
with open(os.path.join(out, "survey.json"), "w") as f:
    json.dump({"cpu": cpu, "host": socket.gethostname().split(".")[0], "cpus": os.cpu_count(), "commit": commit,
               "peak_gflops": peak, "peaks": peaks, "steps": summary,
               "best": [{"library": k[0], "batch": k[1], "product": k[2], **v} for k, v in best.items()],
               "times": [{"library": k[0], "batch": k[1], "layout": k[2], "median_us": v} for k, v in times.items()],
               "details": {lib: rounds[0]["detail"] for lib, rounds in runs.items()}}, f, indent=1)
print(text)
PY
if [ -n "$record_dir" ]; then
  /usr/bin/python3 bench/make_record.py gemm-survey "$out" "$record_dir" --command "$command_line"
fi
