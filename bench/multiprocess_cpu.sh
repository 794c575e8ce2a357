#!/usr/bin/env bash
# CPU training split over N processes against one process with N replicas, side by side in one run, and the
# collectives that the processes exchange, on this machine:
#
#   bench/multiprocess_cpu.sh [OUT_DIR] [--build DIR] [--data DIR] [--steps N] [--rounds N] [--worlds "2 3"]
#                             [--repeats N] [--warmup N] [--mpirun PATH] [--commit TEXT] [--record DIR|none]
#
# (i) Training, `mnist-dp train --device cpu --no-progress --epochs 1 --max-steps STEPS` (default 300), for each N
#     in WORLDS (default 2 and 3), in three ways:
#       1 process, N replicas    --replicas N: N threads, the in-process sum
#       N processes, TCP         RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT as torchrun sets them, a
#                                free port each time: the TCP group through rank 0
#       N processes, MPI         mpirun --allow-run-as-root --oversubscribe -np N: MPI_Allreduce
#     plus 1 process with 1 replica as the baseline. Time per step: the epoch record of the metrics file (seconds
#     / steps; the epoch's time excludes start-up, data loading and the test evaluation). The whole sequence runs
#     ROUNDS times (default 3; A B C, A B C, ...), so that the load of a shared machine falls on every
#     configuration alike; a configuration's figure is the median over the rounds.
# (ii) mnist-dp-process-group-bench under TCP and under MPI for each N: the gradient all-reduce (814,124 bytes),
#     the any() vote and a 4 KB broadcast, checked then timed (--repeats, --warmup passed on).
#
# Writes the run's raw files, OUT_DIR/README.md (the command, date, machine, commit and the tables),
# OUT_DIR/results.json (every run) and OUT_DIR/runs/ (each run's log, metrics and JSON); OUT_DIR defaults to
# build/bench-runs/DATE_multiprocess_cpu_HOST. And the run's record (bench/make_record.py: the commit, the machine,
# the date, this command and both tables' figures) in --record DIR/record.json, by default bench/results/ under
# OUT_DIR's name; --record none writes none. An OUT_DIR inside bench/results/ (bench/results/DATE_multiprocess_cpu_HOST,
# as before) names the record's folder, and the raw files then go to build/bench-runs/ under that name
# (bench/results/ keeps records only). N processes on fewer CPUs oversubscribe the cores; the tables say so for
# every such row. Without mpirun the MPI rows are left out and the output says so. Exits
# non-zero, naming the log, when a run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/default data=/usr/share/datasets/fashion-mnist steps=300 rounds=3 worlds="2 3" repeats=100 warmup=20
mpirun="" commit="" out="" record=""
command_line="bench/multiprocess_cpu.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --worlds) worlds=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --mpirun) mpirun=$2; shift 2 ;;
    --commit) commit=$2; shift 2 ;;
    --record) record=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^set /!p}' "$0"; exit 0 ;;
    -*) echo "multiprocess_cpu.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "multiprocess_cpu.sh: one results folder only ('$out', '$1')" >&2; exit 2; }
       out=$1; shift ;;
  esac
done
fail() { echo "multiprocess_cpu.sh: $*" >&2; exit "${code:-1}"; }
# shellcheck source=bench/record_folders.sh
. bench/record_folders.sh
record_folders "$out" "$record" "$(date -u +%F)_multiprocess_cpu_$(hostname -s)"
out=$raw_dir
for v in steps rounds repeats; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || code=2 fail "--$v wants a positive whole number, not '${!v}'"
done
[[ "$warmup" =~ ^[0-9]+$ ]] || code=2 fail "--warmup wants a whole number, not '$warmup'"
for n in $worlds; do
  if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 2 ]; then
    code=2 fail "--worlds wants process counts of 2 or more, not '$n'"
  fi
done
bin=$build/mnist-dp bench=$build/mnist-dp-process-group-bench
[ -x "$bin" ] || fail "$bin not found: build it first (cmake --build $build --target mnist-dp)"
[ -x "$bench" ] ||
  fail "$bench not found: build it first (cmake --build $build --target mnist-dp-process-group-bench)"
[ -d "$data" ] || fail "no data at $data (pass --data DIR: a folder with the four MNIST files)"
command -v python3 >/dev/null || fail "python3 is needed to write the tables"
[ -n "$mpirun" ] || mpirun=$(command -v mpirun || true)
if [ -n "$mpirun" ] && ! "$mpirun" --version >/dev/null 2>&1; then
  fail "$mpirun --version failed: pass --mpirun PATH, or leave mpirun off the PATH to skip the MPI rows"
fi
[ -n "$commit" ] || commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo +dirty)"

mkdir -p "$out/runs"
# The ranks of a run that failed may still be waiting for the others: end them with the script.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
runs=$out/runs
records=$runs/records.jsonl  # one line per run, for the report
: >"$records"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
loadavg() { cut -d' ' -f1 /proc/loadavg; }

load_before=$(loadavg)
date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
cpus=$(nproc)
cpu_model=$(lscpu | sed -n 's/^Model name: *//p' | head -n1)
mpi_version=""
[ -z "$mpirun" ] || mpi_version=$("$mpirun" --version 2>&1 | head -n1)
echo "multiprocess_cpu.sh: $cpu_model, $cpus CPUs, load $load_before; commit $commit; ${mpi_version:-no mpirun}"

train=(train --data "$data" --device cpu --no-progress --epochs 1 --max-steps "$steps")

# A run that failed ends the benchmark: figures from a partial set would compare unlike things.
check_rc() {  # check_rc RC LOG WHAT
  [ "$1" = 0 ] && return
  tail -n 15 "$2" >&2 || true
  fail "$3 exited with status $1 (log: $2)"
}

# record NAME KIND PROCESSES REPLICAS ROUND METRICS LOAD: one training run's line, from its metrics file.
record() {
  python3 - "$@" >>"$records" <<'EOF'
import json, sys
name, kind, procs, replicas, rnd, metrics, load = sys.argv[1:8]
epochs = [json.loads(l) for l in open(metrics) if '"event":"epoch"' in l.replace(" ", "")]
if not epochs:
    sys.exit(f"multiprocess_cpu.sh: {metrics}: no epoch record (the run ended before its first epoch closed)")
e = epochs[-1]
print(json.dumps({"type": "train", "name": name, "kind": kind, "processes": int(procs),
                  "replicas_per_process": int(replicas), "round": int(rnd), "steps": e["steps"],
                  "seconds": e["seconds"], "us_per_step": 1e6 * e["seconds"] / e["steps"],
                  "load_before": float(load), "metrics": metrics}))
EOF
}

# train_single NAME REPLICAS ROUND
train_single() {
  local name=$1 replicas=$2 rnd=$3 load log metrics rc=0
  log=$runs/$name.r$rnd.log metrics=$runs/$name.r$rnd.metrics.jsonl load=$(loadavg)
  timeout 600 "$bin" "${train[@]}" --replicas "$replicas" --metrics "$metrics" >"$log" 2>&1 || rc=$?
  check_rc $rc "$log" "$name (round $rnd)"
  record "$name" single 1 "$replicas" "$rnd" "$metrics" "$load"
}

# train_tcp NAME N ROUND: N processes as torchrun would start them, each with its own log.
train_tcp() {
  local name=$1 n=$2 rnd=$3 load metrics port pids=() r rc=0
  metrics=$runs/$name.r$rnd.metrics.jsonl load=$(loadavg) port=$(free_port)
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 600 "$bin" "${train[@]}" --metrics "$metrics" >"$runs/$name.r$rnd.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    wait "${pids[$r]}" || rc=$?
    check_rc $rc "$runs/$name.r$rnd.rank$r.log" "$name (round $rnd), rank $r"
  done
  record "$name" tcp "$n" 1 "$rnd" "$metrics" "$load"
}

# train_mpi NAME N ROUND
train_mpi() {
  local name=$1 n=$2 rnd=$3 load log metrics rc=0
  log=$runs/$name.r$rnd.log metrics=$runs/$name.r$rnd.metrics.jsonl load=$(loadavg)
  timeout 600 "$mpirun" --allow-run-as-root --oversubscribe -np "$n" "$bin" "${train[@]}" --metrics "$metrics" \
    >"$log" 2>&1 || rc=$?
  check_rc $rc "$log" "$name (round $rnd)"
  record "$name" mpi "$n" 1 "$rnd" "$metrics" "$load"
}

for ((rnd = 1; rnd <= rounds; rnd++)); do
  echo "training, round $rnd of $rounds (load $(loadavg))"
  train_single single-1x1 1 "$rnd"
  for n in $worlds; do
    train_single "single-1x$n" "$n" "$rnd"
    train_tcp "tcp-${n}x1" "$n" "$rnd"
    [ -z "$mpirun" ] || train_mpi "mpi-${n}x1" "$n" "$rnd"
  done
done

# The collectives alone. A bench run that fails ends the benchmark as a training run does.
pg=(--repeats "$repeats" --warmup "$warmup")
for n in $worlds; do
  echo "process group, $n ranks (load $(loadavg))"
  port=$(free_port) pids=()
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 600 "$bench" "${pg[@]}" --json "$runs/pg-tcp-$n.json" >"$runs/pg-tcp-$n.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    rc=0
    wait "${pids[$r]}" || rc=$?
    check_rc $rc "$runs/pg-tcp-$n.rank$r.log" "mnist-dp-process-group-bench over TCP, $n ranks, rank $r"
  done
  echo "{\"type\": \"pg\", \"kind\": \"tcp\", \"processes\": $n, \"json\": \"$runs/pg-tcp-$n.json\"}" >>"$records"
  if [ -n "$mpirun" ]; then
    rc=0
    timeout 600 "$mpirun" --allow-run-as-root --oversubscribe -np "$n" "$bench" "${pg[@]}" \
      --json "$runs/pg-mpi-$n.json" >"$runs/pg-mpi-$n.log" 2>&1 || rc=$?
    check_rc $rc "$runs/pg-mpi-$n.log" "mnist-dp-process-group-bench under mpirun, $n ranks"
    echo "{\"type\": \"pg\", \"kind\": \"mpi\", \"processes\": $n, \"json\": \"$runs/pg-mpi-$n.json\"}" >>"$records"
  fi
done
load_after=$(loadavg)
openblas=$(sed -n 's/^device: cpu: .*\(OpenBLAS ([^)]*)\).*/\1/p' "$runs/single-1x1.r1.log" | head -n1)

# The report reads what the shell knows from the environment (a quoted here-document: nothing in it is expanded).
host=$(hostname -s)
export MP_COMMAND=$command_line MP_DATE=$date_utc MP_COMMIT=$commit MP_CPU_MODEL=$cpu_model MP_CPUS=$cpus \
  MP_HOST=$host MP_LOAD_BEFORE=$load_before MP_LOAD_AFTER=$load_after MP_OPENBLAS=$openblas \
  MP_MPI=$mpi_version MP_STEPS=$steps MP_ROUNDS=$rounds MP_WORLDS=$worlds MP_REPEATS=$repeats MP_WARMUP=$warmup \
  MP_DATA=$data
python3 - "$out" "$records" <<'EOF'
import json, os, statistics, sys
out, records = sys.argv[1], sys.argv[2]
env = os.environ
rows = [json.loads(l) for l in open(records)]
cpus = int(env["MP_CPUS"])
meta = {
    "command": env["MP_COMMAND"],
    "date": env["MP_DATE"],
    "commit": env["MP_COMMIT"],
    "machine": {"cpu_model": env["MP_CPU_MODEL"], "nproc": cpus, "host": env["MP_HOST"],
                "load_average_1min_before": float(env["MP_LOAD_BEFORE"]),
                "load_average_1min_after": float(env["MP_LOAD_AFTER"]),
                "openblas": env["MP_OPENBLAS"], "mpi": env["MP_MPI"] or None},
    "options": {"steps": int(env["MP_STEPS"]), "rounds": int(env["MP_ROUNDS"]),
                "worlds": [int(n) for n in env["MP_WORLDS"].split()], "pg_repeats": int(env["MP_REPEATS"]),
                "pg_warmup": int(env["MP_WARMUP"]), "data": env["MP_DATA"]},
}
train = [r for r in rows if r["type"] == "train"]
configs = []
for name in dict.fromkeys(r["name"] for r in train):
    runs = [r for r in train if r["name"] == name]
    first = runs[0]
    threads = first["processes"] * first["replicas_per_process"]
    configs.append({"name": name, "kind": first["kind"], "processes": first["processes"],
                    "replicas_per_process": first["replicas_per_process"], "replicas": threads,
                    "oversubscribed": threads > cpus,
                    "median_us_per_step": statistics.median(r["us_per_step"] for r in runs),
                    "us_per_step": [r["us_per_step"] for r in runs], "steps": first["steps"],
                    "load_before": [r["load_before"] for r in runs]})
by_name = {c["name"]: c for c in configs}
pg = []
for r in rows:
    if r["type"] != "pg":
        continue
    j = json.load(open(r["json"]))
    ops = {o["operation"]: o for o in j["operations"]}
    pg.append({"kind": r["kind"], "processes": r["processes"], "group": j["process_group"],
               "oversubscribed": j["oversubscribed"], "load_before": j["load_average_1min_before"],
               "all_reduce": ops["all_reduce_sum"], "any": ops["any(false)"],
               "broadcast": next(o for k, o in ops.items() if k.startswith("broadcast")), "json": r["json"]})
with open(f"{out}/results.json", "w") as f:
    json.dump({**meta, "training": configs, "process_group": pg, "runs": rows}, f, indent=2)
    f.write("\n")

label = {"single": "1 process, {n} replica{s}", "tcp": "{n} processes, TCP (rank 0 the hub)",
         "mpi": "{n} processes, MPI (mpirun)"}
def name_of(c):
    n = c["processes"] if c["kind"] != "single" else c["replicas"]
    return label[c["kind"]].format(n=n, s="" if n == 1 else "s")
def over(flag):
    return " (oversubscribed)" if flag else ""
m, o = meta["machine"], meta["options"]
md = ["# CPU training over several processes, and the collectives they exchange", "",
      f"    {meta['command']}", "",
      f"- date: {meta['date']}; mnist-dp commit {meta['commit']}",
      f"- machine: {m['cpu_model'] or 'CPU model not named'}, {m['nproc']} CPUs (nproc), host {m['host']}; "
      f"{m['openblas'] or 'OpenBLAS kernels not reported'}, 1 thread per replica; "
      f"{m['mpi'] or 'no mpirun: MPI rows not run'}",
      f"- load average (1 min): {m['load_average_1min_before']} before, {m['load_average_1min_after']} after",
      f"- training: `mnist-dp train --device cpu --no-progress --epochs 1 --max-steps {o['steps']}`, batch 64, data "
      f"{o['data']}; us/step = the epoch record's seconds / steps; median of {o['rounds']} rounds (each round runs "
      f"every configuration once, in the order below)",
      f"- collectives: `mnist-dp-process-group-bench --repeats {o['pg_repeats']} --warmup {o['pg_warmup']}` (each "
      f"checked first; a timing is the slowest rank's; median, p10-p90)"]
if any(c["oversubscribed"] for c in configs) or any(p["oversubscribed"] for p in pg):
    md.append(f"- **oversubscribed**: the rows marked so run more processes or replica threads than the {cpus} "
              f"CPUs; they time the sharing of the cores as much as the program")
md += ["", "## Training, time per step", "",
       "| configuration | replicas in all | us/step (median) | each round | x 1 process, same replicas |",
       "|---|---:|---:|---|---:|"]
for c in configs:
    ref = by_name.get(f"single-1x{c['replicas']}")
    ratio = f"{c['median_us_per_step'] / ref['median_us_per_step']:.2f}" if ref else ""
    md.append(f"| {name_of(c)}{over(c['oversubscribed'])} | {c['replicas']} | {c['median_us_per_step']:.1f} | "
              f"{', '.join(f'{u:.1f}' for u in c['us_per_step'])} | {ratio} |")
md += ["", "x 1 process: the time per step over that of one process with as many replicas (above 1: slower).", "",
       "## Collectives (mnist-dp-process-group-bench)", "",
       "| group | ranks | all-reduce of 814,124 B: us (p10-p90) | algbw GB/s | busbw GB/s | any() us | "
       "broadcast 4 KB us | all-reduce / training step |",
       "|---|---:|---:|---:|---:|---:|---:|---:|"]
for p in pg:
    a = p["all_reduce"]
    s = a["slowest_rank"]
    step = by_name.get(f"{p['kind']}-{p['processes']}x1")
    share = f"{100 * s['median_us'] / step['median_us_per_step']:.0f}%" if step else ""
    md.append(f"| {p['kind'].upper()}{over(p['oversubscribed'])} | {p['processes']} | {s['median_us']:.1f} "
              f"({s['p10_us']:.1f}-{s['p90_us']:.1f}) | {a['algbw_gbs']:.3f} | {a['busbw_gbs']:.3f} | "
              f"{p['any']['slowest_rank']['median_us']:.1f} | {p['broadcast']['slowest_rank']['median_us']:.1f} | "
              f"{share} |")
md += ["", "all-reduce / training step: the all-reduce's median here over the median time per step of the training "
       "runs with the same group and number of ranks (measured apart, not inside the step).", "",
       "Files: `results.json` (every run and every figure), `runs/` (each run's log and metrics, each benchmark's "
       "JSON and log)."]
with open(f"{out}/README.md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
EOF
echo "multiprocess_cpu.sh: wrote $out/README.md and $out/results.json (load $load_before before, $load_after after)"
if [ -n "$record_dir" ]; then
  python3 bench/make_record.py multiprocess "$out" "$record_dir"
fi
