#!/usr/bin/env bash
# The two ways the replicas share a step, side by side on this machine: `--strategy allreduce` (each replica
# its own loss, one all-reduce of the gradient buffer, every replica steps) and `--strategy dataparallel`
# (nn.DataParallel's own: parameters broadcast from device 0, logits gathered there, d(logits) scattered back,
# gradients reduced onto device 0, which alone steps), for 1 to 4 replicas:
#
#   bench/strategies.sh [OUT_DIR] [--build DIR] [--data DIR] [--steps N] [--rounds N] [--replicas "1 2 3 4"]
#                       [--device cpu|cuda] [--commit TEXT] [--record DIR|none]
#
# Training: `mnist-dp train --device cpu --no-progress --epochs 1 --max-steps STEPS` (default 300) with
# --replicas N and --strategy S, for each N in REPLICAS (default "1 2 3 4") and both strategies. On the CPU the
# replicas are threads of one process. With --device cuda: one replica per GPU while there are GPUs enough
# (--devices 0,...,N-1), else N replicas sharing GPU 0 (--devices 0 --replicas N); the emulated build's devices
# (MNISTDP_EMU_DEVICES, docs/emulation.md) stand for GPUs there and its times are no GPU's; without a GPU the
# script says so and exits 77. Time per step: the metrics file's epoch record (seconds / steps: start-up, data
# loading and the test evaluation excluded). The whole sequence runs ROUNDS times (default 5; A B C ..., A B C
# ...), so that the load of a shared machine falls on every configuration alike; a configuration's figure is
# the median over the rounds.
#
# Bytes per step: what each strategy copies from one replica's memory to another's in a step of 64 rows,
# computed from the model's sizes by strategy_bytes in bench/make_record.py (not measured): the all-reduce's
# gradient buffer, 2 (N-1) x 814,124 bytes; DataParallel's parameters broadcast and gradients reduced,
# (N-1) x 814,120 bytes each, and the logits, labels and d(logits) of replicas 1..N-1's rows.
#
# Writes the run's raw files, OUT_DIR/README.md (the command, date, machine, commit and the tables),
# OUT_DIR/results.json (every run), OUT_DIR/strategies.png (us/step and bytes/step against replicas, when
# python3 has matplotlib: Debian's python3-matplotlib, which scripts/setup.sh --peers installs) and
# OUT_DIR/runs/ (each run's log and metrics); OUT_DIR defaults to build/bench-runs/DATE_strategies_DEVICE_HOST.
# And the run's record (bench/make_record.py strategies: the commit, the machine, the date, this command and the
# figures), with the plot beside it, in --record DIR, by default bench/results/ under OUT_DIR's name; --record
# none writes none. An OUT_DIR inside bench/results/ names the record's folder, and the raw files then go to
# build/bench-runs/ under that name. bench/results/ keeps a plot only while a doc shows it
# (bench/results_tables.py --check). Rows with more replica threads than CPUs are marked oversubscribed. Exits
# non-zero, naming the log, when a run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/default data=/usr/share/datasets/fashion-mnist steps=300 rounds=5 replicas="1 2 3 4" device=cpu
commit="" out="" record=""
command_line="bench/strategies.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --commit) commit=$2; shift 2 ;;
    --record) record=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^set /!p}' "$0"; exit 0 ;;
    -*) echo "strategies.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "strategies.sh: one results folder only ('$out', '$1')" >&2; exit 2; }
       out=$1; shift ;;
  esac
done
fail() { echo "strategies.sh: $*" >&2; exit "${code:-1}"; }
for v in steps rounds; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || code=2 fail "--$v wants a positive whole number, not '${!v}'"
done
[ -n "$replicas" ] || code=2 fail "--replicas wants replica counts, as \"1 2 3 4\""
for n in $replicas; do
  if ! [[ "$n" =~ ^[1-9][0-9]*$ ]] || [ "$n" -gt 64 ]; then
    code=2 fail "--replicas wants counts from 1 to 64, not '$n'"
  fi
done
case "$device" in cpu|cuda) ;; *) code=2 fail "--device wants cpu or cuda, not '$device'" ;; esac
# shellcheck source=bench/record_folders.sh
. bench/record_folders.sh
record_folders "$out" "$record" "$(date -u +%F)_strategies_${device}_$(hostname -s)"
out=$raw_dir
bin=$build/mnist-dp
[ -x "$bin" ] || fail "$bin not found: build it first (cmake --build $build --target mnist-dp)"
[ -d "$data" ] || fail "no data at $data (pass --data DIR: a folder with the four MNIST files)"
command -v python3 >/dev/null || fail "python3 is needed to write the tables"

# The GPUs: nvidia-smi's, or the emulated build's devices.
gpus=0 gpu="" emulated=false
if [ "$device" = cuda ]; then
  if grep -q '^MNISTDP_CUDA:STRING=EMU$' "$build/CMakeCache.txt" 2>/dev/null; then
    emulated=true gpus=${MNISTDP_EMU_DEVICES:-1} gpu="emulated devices (docs/emulation.md)"
  elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
  fi
  if ! [[ "$gpus" =~ ^[0-9]+$ ]] || [ "$gpus" -eq 0 ]; then
    code=77 fail "--device cuda: no GPU here (nvidia-smi lists none); nothing measured"
  fi
fi
if [ -z "$commit" ]; then
  if commit=$(git rev-parse --short HEAD 2>/dev/null); then
    git diff --quiet HEAD -- . 2>/dev/null || commit+=+dirty
  else
    commit="unknown (not a git checkout; --commit names it)"
  fi
fi

mkdir -p "$out/runs"
runs=$out/runs
records=$runs/records.jsonl  # one line per run, for the report
: >"$records"
loadavg() { cut -d' ' -f1 /proc/loadavg; }

load_before=$(loadavg)
date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
cpus=$(nproc)
cpu_model=$(lscpu | sed -n 's/^Model name: *//p' | head -n1)
echo "strategies.sh: $cpu_model, $cpus CPUs${gpu:+, $gpus x $gpu}, load $load_before; commit $commit"

train=(train --data "$data" --device "$device" --no-progress --epochs 1 --max-steps "$steps")

# placement N: the options that put N replicas on this device, and their description.
placement() {
  local n=$1 list r
  if [ "$device" = cpu ]; then
    place_args=(--replicas "$n") place_text="$n CPU thread$([ "$n" = 1 ] || echo s)"
  elif [ "$n" -le "$gpus" ]; then
    list=0
    for ((r = 1; r < n; r++)); do list+=",$r"; done
    place_args=(--devices "$list") place_text="$n GPU$([ "$n" = 1 ] || echo s)"
  else
    place_args=(--devices 0 --replicas "$n") place_text="$n replicas on GPU 0"
  fi
}

# run_one STRATEGY N ROUND: one training run, and its line in the records.
run_one() {
  local strategy=$1 n=$2 rnd=$3 name="$1-$2" load log metrics rc=0
  log=$runs/$name.r$rnd.log metrics=$runs/$name.r$rnd.metrics.jsonl load=$(loadavg)
  placement "$n"
  timeout 600 "$bin" "${train[@]}" "${place_args[@]}" --strategy "$strategy" --metrics "$metrics" \
    >"$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 15 "$log" >&2 || true
    fail "$name (round $rnd) exited with status $rc (log: $log)"
  fi
  python3 - "$name" "$strategy" "$n" "$place_text" "$rnd" "$metrics" "$load" "$log" >>"$records" <<'EOF'
import json, sys
name, strategy, n, place, rnd, metrics, load, log = sys.argv[1:9]
epochs = [json.loads(l) for l in open(metrics) if '"event":"epoch"' in l.replace(" ", "")]
if not epochs:
    sys.exit(f"strategies.sh: {metrics}: no epoch record (the run ended before its first epoch closed)")
e = epochs[-1]
# The line that names how the replicas share the step (the all-reduce's communicator, or DataParallel's copies).
shared = next((l.split(":", 1)[1].strip() for l in open(log) if l.startswith(("all-reduce:", "strategy:"))), "")
print(json.dumps({"name": name, "strategy": strategy, "replicas": int(n), "placement": place, "round": int(rnd),
                  "steps": e["steps"], "seconds": e["seconds"], "us_per_step": 1e6 * e["seconds"] / e["steps"],
                  "load_before": float(load), "shared_by": shared, "metrics": metrics}))
EOF
}

for ((rnd = 1; rnd <= rounds; rnd++)); do
  echo "training, round $rnd of $rounds (load $(loadavg))"
  for n in $replicas; do
    run_one allreduce "$n" "$rnd"
    run_one dataparallel "$n" "$rnd"
  done
done
load_after=$(loadavg)
first_logs=("$runs"/*.r1.log)
kernels=$(sed -n 's/^device: cpu: .*\(matrix products in .*\)$/\1/p' "${first_logs[0]}" | head -n1)
# The report, and the plot when a python3 has matplotlib (the one on the PATH, or Debian's).
report_python=python3
for py in python3 /usr/bin/python3; do
  if "$py" -c "import matplotlib" 2>/dev/null; then report_python=$py; break; fi
done

# The report reads what the shell knows from the environment (a quoted here-document: nothing in it is expanded).
host=$(hostname -s)
export ST_COMMAND=$command_line ST_DATE=$date_utc ST_COMMIT=$commit ST_CPU_MODEL=$cpu_model ST_CPUS=$cpus \
  ST_HOST=$host ST_LOAD_BEFORE=$load_before ST_LOAD_AFTER=$load_after ST_KERNELS=$kernels \
  ST_STEPS=$steps ST_ROUNDS=$rounds ST_REPLICAS=$replicas ST_DATA=$data ST_DEVICE=$device ST_GPU=$gpu \
  ST_GPUS=$gpus ST_EMULATED=$emulated ST_BUILD=$build
"$report_python" - "$out" "$records" <<'EOF'
import json, os, statistics, sys
sys.path.insert(0, "bench")
from make_record import strategy_bytes  # noqa: E402  (the bytes per step, from the model's sizes)

out, records = sys.argv[1], sys.argv[2]
env = os.environ
rows = [json.loads(l) for l in open(records)]
cpus, device = int(env["ST_CPUS"]), env["ST_DEVICE"]
counts = [int(n) for n in env["ST_REPLICAS"].split()]
CONVENTION = ("bytes copied from one replica's memory to another's in one step of 64 rows, summed over every "
              "copy, computed from the model's sizes (strategy_bytes in bench/make_record.py), not measured")
meta = {
    "command": env["ST_COMMAND"], "date": env["ST_DATE"], "commit": env["ST_COMMIT"],
    "device": device, "emulated": env["ST_EMULATED"] == "true",
    "machine": {"cpu_model": env["ST_CPU_MODEL"], "nproc": cpus, "host": env["ST_HOST"],
                "gpu": env["ST_GPU"], "gpus": int(env["ST_GPUS"]),
                "load_average_1min_before": float(env["ST_LOAD_BEFORE"]),
                "load_average_1min_after": float(env["ST_LOAD_AFTER"]), "matrix_products": env["ST_KERNELS"]},
    "options": {"steps": int(env["ST_STEPS"]), "rounds": int(env["ST_ROUNDS"]), "replicas": counts,
                "batch": 64, "data": env["ST_DATA"], "build": env["ST_BUILD"]},
    "bytes_convention": CONVENTION,
}
configs = []
for name in dict.fromkeys(r["name"] for r in rows):
    runs = [r for r in rows if r["name"] == name]
    first = runs[0]
    configs.append({"name": name, "strategy": first["strategy"], "replicas": first["replicas"],
                    "placement": first["placement"], "shared_by": first["shared_by"],
                    "oversubscribed": device == "cpu" and first["replicas"] > cpus,
                    "median_us_per_step": statistics.median(r["us_per_step"] for r in runs),
                    "us_per_step": [r["us_per_step"] for r in runs], "steps": first["steps"],
                    "load_before": [r["load_before"] for r in runs]})
by = {(c["strategy"], c["replicas"]): c for c in configs}
sizes = {n: strategy_bytes(n) for n in counts}
with open(f"{out}/results.json", "w") as f:
    json.dump({**meta, "training": configs,
               "bytes": [sizes[n] for n in counts], "runs": rows}, f, indent=2)
    f.write("\n")

m, o = meta["machine"], meta["options"]
where = (f"{m['gpus']} x {m['gpu']}" + (" (emulated: no GPU's times)" if meta["emulated"] else "")
         if device == "cuda" else f"{m['matrix_products'] or 'the CPU path'}; 1 thread per replica")
md = ["# The two strategies: all-reduce and nn.DataParallel's own", "",
      f"    {meta['command']}", "",
      f"- date: {meta['date']}; mnist-dp commit {meta['commit']} (build {o['build']})",
      f"- machine: {m['cpu_model'] or 'CPU model not named'}, {m['nproc']} CPUs (nproc), host {m['host']}; {where}",
      f"- load average (1 min): {m['load_average_1min_before']} before, {m['load_average_1min_after']} after",
      f"- training: `mnist-dp train --device {device} --no-progress --epochs 1 --max-steps {o['steps']}` with "
      f"`--strategy allreduce` and `--strategy dataparallel`, batch 64, data {o['data']}; us/step = the epoch "
      f"record's seconds / steps; median of {o['rounds']} round{'s' if o['rounds'] != 1 else ''} (each round runs "
      f"every configuration once, in "
      f"the order below)",
      f"- bytes/step: {CONVENTION}"]
if any(c["oversubscribed"] for c in configs):
    md.append(f"- **oversubscribed**: the rows marked so run more replica threads than the {cpus} CPUs; they time "
              f"the sharing of the cores as much as the program")
md += ["", "## Time and bytes per step", "",
       "| replicas | all-reduce us/step | DataParallel us/step | DataParallel / all-reduce | all-reduce bytes/step "
       "| DataParallel bytes/step |", "|---:|---:|---:|---:|---:|---:|"]
for n in counts:
    a, d = by[("allreduce", n)], by[("dataparallel", n)]
    mark = " (oversubscribed)" if a["oversubscribed"] else ""
    md.append(f"| {n}{mark} | {a['median_us_per_step']:.1f} | {d['median_us_per_step']:.1f} | "
              f"{d['median_us_per_step'] / a['median_us_per_step']:.2f} | {sizes[n]['allreduce']['total']:,} | "
              f"{sizes[n]['dataparallel']['total']:,} |")
md += ["", "## Each round (us/step)", "",
       "| configuration | placement | how the replicas share the step | median | each round |", "|---|---|---|---:|---|"]
for c in configs:
    md.append(f"| {c['name']}{' (oversubscribed)' if c['oversubscribed'] else ''} | {c['placement']} | "
              f"{c['shared_by'] or '-'} | {c['median_us_per_step']:.1f} | "
              f"{', '.join(f'{u:.1f}' for u in c['us_per_step'])} |")
md += ["", "## DataParallel's bytes per step, by copy", "",
       "| replicas | shards | parameters broadcast | logits gathered | labels gathered | d(logits) scattered | "
       "gradients reduced | total | all-reduce: gradients |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
for n in counts:
    d = sizes[n]["dataparallel"]
    md.append(f"| {n} | {', '.join(map(str, sizes[n]['shards']))} | {d['parameters_broadcast']:,} | "
              f"{d['logits_gathered']:,} | {d['labels_gathered']:,} | {d['dlogits_scattered']:,} | "
              f"{d['gradients_reduced']:,} | {d['total']:,} | {sizes[n]['allreduce']['gradients']:,} |")
md += ["", "Files: `results.json` (every run and every figure), `runs/` (each run's log and metrics)"]

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is None:
    md[-1] += "; no plot (python3 has no matplotlib: Debian's python3-matplotlib)."
    print("strategies.sh: no matplotlib (Debian: apt-get install python3-matplotlib): no plot drawn",
          file=sys.stderr)
else:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for strategy, label, marker in [("allreduce", "--strategy allreduce", "o"),
                                    ("dataparallel", "--strategy dataparallel", "s")]:
        med = [by[(strategy, n)]["median_us_per_step"] for n in counts]
        low = [med[i] - min(by[(strategy, n)]["us_per_step"]) for i, n in enumerate(counts)]
        high = [max(by[(strategy, n)]["us_per_step"]) - med[i] for i, n in enumerate(counts)]
        left.errorbar(counts, med, yerr=[low, high], marker=marker, capsize=3, label=label)
    over = [n for n in counts if device == "cpu" and n > cpus]
    if over:
        left.axvspan(min(over) - 0.5, max(counts) + 0.5, color="0.9", zorder=0,
                     label=f"more replicas than the {cpus} CPUs")
    # Bytes: the all-reduce's bar beside DataParallel's, stacked by copy.
    mb = 1e6
    ar = [sizes[n]["allreduce"]["total"] / mb for n in counts]
    bc = [sizes[n]["dataparallel"]["parameters_broadcast"] / mb for n in counts]
    rd = [sizes[n]["dataparallel"]["gradients_reduced"] / mb for n in counts]
    act = [(sizes[n]["dataparallel"]["logits_gathered"] + sizes[n]["dataparallel"]["labels_gathered"] +
            sizes[n]["dataparallel"]["dlogits_scattered"]) / mb for n in counts]
    xa, xd = [n - 0.2 for n in counts], [n + 0.2 for n in counts]
    right.bar(xa, ar, width=0.38, color="C0", label="all-reduce: 2(N-1) gradient buffers")
    right.bar(xd, bc, width=0.38, color="C1", label="DataParallel: parameters broadcast")
    right.bar(xd, rd, width=0.38, bottom=bc, color="C1", alpha=0.55, label="DataParallel: gradients reduced")
    right.bar(xd, act, width=0.38, bottom=[b + r for b, r in zip(bc, rd)], color="C3",
              label="DataParallel: logits, labels, d(logits)")
    for n, a, d in zip(counts, ar, [sizes[n]["dataparallel"]["total"] / mb for n in counts]):
        if a or d:
            right.annotate(f"{a:.3f}", (n - 0.2, a), ha="center", va="bottom", fontsize=7)
            right.annotate(f"{d:.3f}", (n + 0.2, d), ha="center", va="bottom", fontsize=7)
    left.set(xlabel="replicas", ylabel="us per step (median; bars: min to max)",
             title=f"time per step, {device}, {o['rounds']} rounds of {o['steps']} steps", xticks=counts)
    right.set(xlabel="replicas", ylabel="MB copied between replicas per step",
              title="bytes per step, batch 64 (from the model's sizes)", xticks=counts)
    left.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{m['host']}: {m['cpu_model']}, {cpus} CPUs{', ' + m['gpu'] if device == 'cuda' else ''}; "
                 f"commit {meta['commit']}; load {m['load_average_1min_before']} before, "
                 f"{m['load_average_1min_after']} after", fontsize=9)
    fig.tight_layout()
    fig.savefig(f"{out}/strategies.png", dpi=100)
    md[-1] += ", `strategies.png` (the plot)."
with open(f"{out}/README.md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
EOF
echo "strategies.sh: wrote $out/README.md and $out/results.json (load $load_before before, $load_after after)"
if [ -n "$record_dir" ]; then
  python3 bench/make_record.py strategies "$out" "$record_dir"
fi
