#!/usr/bin/python3
"""Writes the record of a benchmark run: RECORD_DIR/record.json, one small file with what the docs quote from the
run (the commit, the machine, the date, the command and the headline figures), read from the run's raw files.
The raw files (logs, JSON lines, every round's figures, plots) stay where the run wrote them, outside
bench/results/, which keeps records only.

    bench/make_record.py KIND RAW_DIR RECORD_DIR [--command TEXT] [--add] [--title TEXT] [--note TEXT]...

KIND, and what RAW_DIR must hold:
  compare       compare.json (bench/compare.sh, through bench/compare_report.py)
  gemm-survey   survey.json and LIBRARY.rN.json / LIBRARY.rN.txt (bench/gemm_survey.sh)
  multiprocess  results.json (bench/multiprocess_cpu.sh)
  strategies    results.json, and strategies.png when there is one, which is copied beside the record
                (bench/strategies.sh)
  emu-step      emu_step.json and emu_step.txt (bench/emu_step.sh)
  cpu-ops       cpu_ops.json, and cpu_ops.txt when there is one (mnist-dp-cpu-bench --benchmark_out=cpu_ops.json
                --benchmark_out_format=json, with --benchmark_repetitions so that it reports medians)

--command names the command that made the run (it goes into the record's "commands"); --add puts the figures
beside those of the record already in RECORD_DIR (another program's, in the same run) instead of writing it anew;
--title and --note set the record's one-line title and add a line to its notes.

A record is JSON:
  record    1, the format's version
  name      RECORD_DIR's name (DATE_WHAT_HOST[_COMMIT])
  title     what was measured, in a line
  date      when the run started (UTC, ISO 8601)
  commit    the commit mnist-dp was built from
  machine   host, cpu (the model lscpu names), cpus, gpu ("" for none), and what else the run reports
  commands  the commands that made the run
  figures   one entry per program: compare, gemm_survey, multiprocess, strategies, emu_step, emu_epoch_check,
            cpu_ops, fuzz
  notes     (optional) what the figures alone do not say
Every figure is copied from the raw files, unrounded; bench/results_tables.py prints a record's tables
(--show RECORD_DIR) and the docs' tables from the records. Standard library only.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import sys

FORMAT = 1


def load(path):
    with open(path) as f:
        return json.load(f)


def dumps(value, indent=0):
    """JSON with objects one key a line and lists of plain values on one line: small, and readable in a diff."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return "{}"
        flat = json.dumps(value)
        if all(not isinstance(v, (dict, list)) for v in value.values()) and len(flat) <= 100:
            return flat
        items = [f'{pad} {json.dumps(k)}: {dumps(v, indent + 1)}' for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            return json.dumps(value)
        if all(isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v) for v in value):
            return "[" + ", ".join(json.dumps(v) for v in value) + "]"
        return "[\n" + ",\n".join(f"{pad} {dumps(v, indent + 1)}" for v in value) + "\n" + pad + "]"
    return json.dumps(value)


def write(record_dir, record):
    os.makedirs(record_dir, exist_ok=True)
    path = os.path.join(record_dir, "record.json")
    with open(path, "w") as f:
        f.write(dumps(record) + "\n")
    return path


# --- compare.sh -----------------------------------------------------------------------------------------------

ROW_FIELDS = ["name", "label", "status", "seconds_per_epoch", "epochs_in_median", "steps_per_epoch",
              "samples_per_second", "us_per_step", "gflops", "floor_seconds", "time_over_floor",
              "final_test_accuracy", "time_over_mnistdp", "load_at_start"]


def from_compare(raw):
    report = load(os.path.join(raw, "compare.json"))
    m = report["machine"]
    rows = []
    for r in report["rows"]:
        row = {k: r[k] for k in ROW_FIELDS if k in r}
        # Each round's epochs, in seconds: the spread the headline median is taken from.
        row["epoch_seconds"] = [[e["seconds"] for e in epochs] for epochs in r.get("rounds", [])]
        rows.append(row)
    figures = {k: m[k] for k in ["device", "epochs", "threads", "rounds", "data", "python", "torch", "torch2",
                                 "openblas_core", "openblas_coretype_env"] if k in m}
    figures["batch"] = 64
    if m.get("peak"):
        figures["peak"] = m["peak"]
    figures["load_average_before"] = m.get("load_average_before")
    figures["load_average_after"] = m.get("load_average_after")
    figures.update(headline=report["headline"], base=report["base"], rows=rows)
    machine = {"host": m["host"], "cpu": m["cpu"], "cpus": m["cpus"], "avx512f": m.get("cpu_flags_avx512f"),
               "gpu": m.get("gpu", ""), "driver": m.get("driver", "")}
    threads = f", {m['threads']} thread{'s' if m['threads'] != 1 else ''}"
    return {"title": f"mnist-dp against PyTorch, {m['device']}{threads}", "date": m["date"],
            "commit": m["commit"], "machine": machine, "figures": {"compare": figures}}


# --- gemm_survey.sh -------------------------------------------------------------------------------------------

PRODUCTS = ["fc1.fwd", "fc2.fwd", "fc2.dW", "fc2.dX", "fc1.dW"]
# The layouts a step could run together, one per product, in the order of PRODUCTS (as bench/gemm_survey.sh).
LAYOUT_SETS = {
    "feature-major": ["fm fc1.fwd w1.xT", "fm fc2.fwd w2.hT", "fm fc2.dWT hT.dl", "fm fc2.dX w2T.dlT",
                      "fm fc1.dW dHT.x"],
    "by rows, w [out, in]": ["fc1.fwd x.w1T", "fc2.fwd h.w2T", "fc2.dW dlT.h", "fc2.dX dl.w2", "fc1.dW dHT.x"],
    "by rows, w [in, out]": ["fc1.fwd x.w1", "fc2.fwd h.w2", "fc2.dWT hT.dl", "fc2.dX dl.w2T", "fc1.dWT xT.dH"],
}


def from_gemm_survey(raw):
    survey = load(os.path.join(raw, "survey.json"))
    runs, not_run = {}, {}
    for name in sorted(os.listdir(raw)):
        m = re.match(r"^(.*)\.r(\d+)\.(json|txt)$", name)
        if not m:
            continue
        lib, rnd, ext = m.group(1), int(m.group(2)), m.group(3)
        if ext == "json":
            runs.setdefault(lib, []).append((rnd, load(os.path.join(raw, name))))
    for name in sorted(os.listdir(raw)):
        m = re.match(r"^(.*)\.r1\.txt$", name)
        if m and m.group(1) not in runs:
            with open(os.path.join(raw, name)) as f:
                lines = [l.strip() for l in f if l.strip()]
            not_run[m.group(1)] = lines[-1] if lines else "no output"
    times = {(t["library"], t["batch"], t["layout"]): t["median_us"] for t in survey["times"]}
    best = {(b["library"], b["batch"], b["product"]): b for b in survey["best"]}
    repeats = None
    libraries = {}
    for lib in sorted(runs, key=lambda l: l):
        rounds = [r for _, r in sorted(runs[lib], key=lambda x: x[0])]
        for r in rounds:
            for row in r["rows"]:
                if row.get("status") == "ok" and "time" in row and repeats is None:
                    repeats = row["time"].get("repeats")
        batches = {}
        for batch in sorted({k[1] for k in times if k[0] == lib}, reverse=True):
            entry = {"products": {}, "layout_sets": {}}
            for op in PRODUCTS:
                b = best.get((lib, batch, op))
                if b:
                    entry["products"][op] = {"us": b["us"], "layout": b["layout"]}
            for set_name, layouts in LAYOUT_SETS.items():
                ts = [times.get((lib, batch, layout)) for layout in layouts]
                entry["layout_sets"][set_name] = sum(ts) if all(t is not None for t in ts) else None
            totals = [(t, n) for n, t in entry["layout_sets"].items() if t is not None]
            entry["best_set"] = min(totals)[1] if totals else None
            work = [w for r in rounds for w in r.get("fc1_work", []) if w["batch"] == batch]
            if work:
                entry["fc1_work"] = {"forward_us": statistics.median(w["forward"]["median_us"] for w in work),
                                     "update_us": statistics.median(w["update"]["median_us"] for w in work),
                                     "fused": work[0]["fused"]}
            batches[str(batch)] = entry
        libraries[lib] = {"kernels": rounds[0].get("detail", ""), "batches": batches}
    dates = sorted(r["date"] for rs in runs.values() for _, r in rs if r.get("date"))
    figures = {"threads": 1, "rounds": max(len(r) for r in runs.values()), "repeats": repeats,
               "peak_gflops": survey["peak_gflops"], "peaks": survey["peaks"],
               "peak_isa": next((r["peak_isa"] for rs in runs.values() for _, r in rs if r.get("peak_isa")), None),
               "libraries": libraries}
    if not_run:
        figures["not_run"] = not_run
    machine = {"host": survey.get("host", ""), "cpu": survey["cpu"], "cpus": survey.get("cpus"), "gpu": ""}
    return {"title": "the products of a CPU step, library by library", "date": dates[0] if dates else "",
            "commit": survey["commit"], "machine": machine, "figures": {"gemm_survey": figures}}


# --- multiprocess_cpu.sh --------------------------------------------------------------------------------------

def timing(t):
    return {k: t[k] for k in ["median_us", "p10_us", "p90_us", "repeats"] if k in t}


def from_multiprocess(raw):
    res = load(os.path.join(raw, "results.json"))
    m = res["machine"]
    training = [{k: c[k] for k in ["name", "kind", "processes", "replicas_per_process", "replicas",
                                   "oversubscribed", "median_us_per_step", "us_per_step", "steps", "load_before"]}
                for c in res["training"]]
    groups = []
    for p in res["process_group"]:
        a = p["all_reduce"]
        groups.append({"kind": p["kind"], "processes": p["processes"], "group": p["group"],
                       "oversubscribed": p["oversubscribed"], "load_before": p["load_before"],
                       "all_reduce": {"bytes": a["bytes"], "algbw_gbs": a["algbw_gbs"], "busbw_gbs": a["busbw_gbs"],
                                      "slowest_rank": timing(a["slowest_rank"])},
                       "any": {"slowest_rank": timing(p["any"]["slowest_rank"])},
                       "broadcast": {"bytes": p["broadcast"]["bytes"],
                                     "slowest_rank": timing(p["broadcast"]["slowest_rank"])}})
    figures = {"options": res["options"], "openblas": m.get("openblas"), "mpi": m.get("mpi"),
               "load_average_before": m.get("load_average_1min_before"),
               "load_average_after": m.get("load_average_1min_after"),
               "training": training, "process_group": groups}
    return {"title": "CPU training over several processes, and the collectives they exchange",
            "date": res["date"], "commit": res["commit"],
            "machine": {"host": m.get("host", ""), "cpu": m.get("cpu_model", ""), "cpus": m.get("nproc"), "gpu": ""},
            "commands": [res["command"]], "figures": {"multiprocess": figures}}


# --- strategies.sh ----------------------------------------------------------------------------------------------
# What each strategy copies between replicas in one step, from the model's sizes (host/model/params.hpp) and the
# way host/training/communicator.cpp, host/training/data_parallel.cpp, host/cuda/cuda_data_parallel.cpp and
# host/cuda/cuda_communicators.cpp copy. One convention for both: the bytes that cross from one replica's memory
# to another's in a step, summed over every copy (a copy within one replica's memory, such as device 0's own
# logits into its batch buffer, is not counted).

PARAMETERS = 203_530            # ParamLayout::kCount: fc1 256 x 784 + 256, fc2 10 x 256 + 10
GRADIENT_FLOATS = PARAMETERS + 1  # ParamLayout::kGradCount: the parameters and the loss slot
CLASSES = 10                    # ParamLayout::kClasses
FLOAT_BYTES = 4
LABEL_BYTES = 1                 # the labels are uint8
BATCH = 64


def shard_sizes(batch, replicas):
    """torch.chunk's sizes, as shard_of (host/training/shard.hpp): ceil(batch / replicas) rows each, the tail
    what is left, possibly 0 (64 over 3: 22, 22, 20; 5 over 4: 2, 2, 1, 0)."""
    if replicas < 1 or batch < 0:
        raise ValueError(f"shard_sizes: {batch} rows over {replicas} replicas")
    chunk = (batch + replicas - 1) // replicas
    return [max(0, min(batch, chunk * (r + 1)) - min(batch, chunk * r)) for r in range(replicas)]


def strategy_bytes(replicas, batch=BATCH):
    """The bytes each strategy moves between replicas in one step of `batch` rows over `replicas` replicas.

    allreduce: the host sum adds replicas 1..N-1's gradient buffers (with the loss slot) into replica 0's and
      copies the sum back to each, 2 (N-1) buffers; the same-device CUDA sum reads N-1 other buffers and writes
      N-1 copies back, the same; NCCL's ring sends 2 (N-1) / N of the buffer from each of N ranks, the same total.
    dataparallel: replica 0's parameters to each of the N-1 others; the logits (float) and labels (uint8) of
      replicas 1..N-1's rows gathered onto device 0; their rows of d(logits) scattered back; their parameter
      gradients (no loss slot) copied onto device 0 to be added.
    """
    sizes = shard_sizes(batch, replicas)
    others = replicas - 1
    other_rows = sum(sizes[1:])
    gradients = 2 * others * GRADIENT_FLOATS * FLOAT_BYTES
    dp = {"parameters_broadcast": others * PARAMETERS * FLOAT_BYTES,
          "logits_gathered": other_rows * CLASSES * FLOAT_BYTES,
          "labels_gathered": other_rows * LABEL_BYTES,
          "dlogits_scattered": other_rows * CLASSES * FLOAT_BYTES,
          "gradients_reduced": others * PARAMETERS * FLOAT_BYTES}
    dp["total"] = sum(dp.values())
    return {"replicas": replicas, "batch": batch, "shards": sizes,
            "allreduce": {"gradients": gradients, "total": gradients}, "dataparallel": dp}


STRATEGY_CONFIG_FIELDS = ["name", "strategy", "replicas", "placement", "shared_by", "oversubscribed",
                          "median_us_per_step", "us_per_step", "steps", "load_before"]


def from_strategies(raw):
    res = load(os.path.join(raw, "results.json"))
    m = res["machine"]
    figures = {"options": res["options"], "device": res["device"], "emulated": res.get("emulated", False),
               "matrix_products": m.get("matrix_products"),
               "load_average_before": m.get("load_average_1min_before"),
               "load_average_after": m.get("load_average_1min_after"),
               "bytes_convention": res["bytes_convention"],
               "training": [{k: c[k] for k in STRATEGY_CONFIG_FIELDS if k in c} for c in res["training"]],
               "bytes": [strategy_bytes(n, res["options"]["batch"]) for n in res["options"]["replicas"]]}
    plot = os.path.join(raw, "strategies.png")
    return {"title": f"the two strategies, all-reduce and nn.DataParallel's, on {res['device']} replicas",
            "date": res["date"], "commit": res["commit"],
            "machine": {"host": m.get("host", ""), "cpu": m.get("cpu_model", ""), "cpus": m.get("nproc"),
                        "gpu": m.get("gpu", "")},
            "commands": [res["command"]], "figures": {"strategies": figures},
            "copy": [plot] if os.path.exists(plot) else []}


# --- emu_step.sh ----------------------------------------------------------------------------------------------

def from_emu_step(raw):
    data = load(os.path.join(raw, "emu_step.json"))
    rounds, machine_line = {}, ""
    with open(os.path.join(raw, "emu_step.txt")) as f:
        lines = f.read().splitlines()
    names = list(data["variants"])
    for line in lines:
        if line.startswith("machine: "):
            machine_line = line[len("machine: "):]
        for name in names:
            if line.startswith(name + " ") and re.match(r"^\s+[0-9.]+(\s+[0-9.]+)*$", line[len(name):]):
                values = [float(v) for v in line[len(name):].split()]
                rounds[name] = values[1:]
    variants = {name: {"ms_per_step": ms, "rounds_ms": rounds.get(name, [])} for name, ms in data["variants"].items()}
    m = re.match(r"^(.*), (\d+) CPUs; commit (\S+)", machine_line)
    machine = {"host": data.get("host", ""), "cpu": m.group(1) if m else data.get("cpu", ""),
               "cpus": int(m.group(2)) if m else data.get("cpus"), "gpu": ""}
    figures = {"steps": data["steps"], "rounds": data["rounds"], "build": data.get("build", "build/emu"),
               "unit": data["unit"], "variants": variants}
    commit = data.get("commit", "")
    return {"title": "the emulated build's training step, on the CPU", "date": data.get("date", ""),
            "commit": commit[:7] if re.match(r"^[0-9a-f]{40}$", commit) else commit, "machine": machine,
            "figures": {"emu_step": figures}}


# --- mnist-dp-cpu-bench ---------------------------------------------------------------------------------------

GBENCH_KEYS = {"name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
               "repetition_index", "threads", "aggregate_name", "aggregate_unit", "iterations", "real_time",
               "cpu_time", "time_unit"}


def from_cpu_ops(raw):
    bench = load(os.path.join(raw, "cpu_ops.json"))
    ctx = bench["context"]
    rows = {}
    for b in bench["benchmarks"]:
        if b.get("run_type") != "aggregate":
            continue
        name = re.sub(r"/process_time/real_time$", "", b["run_name"])
        row = rows.setdefault(name, {"repetitions": b.get("repetitions"), "time_unit": b.get("time_unit")})
        agg = b["aggregate_name"]
        if agg == "median":
            row["real_time"] = b["real_time"]
            row["cpu_time"] = b["cpu_time"]
            # The user counters (FLOP/s, bytes_per_second, items_per_second), at the median.
            row.update({k: v for k, v in b.items() if k not in GBENCH_KEYS and isinstance(v, (int, float))})
        elif agg == "cv":
            row["cv"] = b["real_time"]
    load_after = None
    txt = os.path.join(raw, "cpu_ops.txt")
    if os.path.exists(txt):
        with open(txt) as f:
            m = re.search(r"load average \(1 min\) before [0-9.]+, after ([0-9.]+)", f.read())
            load_after = float(m.group(1)) if m else None
    keep = ["mhz_per_cpu", "library_build_type", "openblas_core", "openblas_coretype_env", "openblas_threads",
            "cpu_gemm_isa"]
    figures = {"date": ctx.get("date", "")}
    figures.update({k: ctx[k] for k in keep if k in ctx})
    figures["load_average_before"] = float(ctx["load_average_1min_before"]) \
        if "load_average_1min_before" in ctx else None
    figures["load_average_after"] = load_after
    figures["aggregate"] = "median of the repetitions; cv: the real time's coefficient of variation"
    figures["benchmarks"] = rows
    machine = {"host": ctx.get("host_name", ""), "cpu": "", "cpus": ctx.get("num_cpus"), "gpu": ""}
    return {"title": "the CPU ops (mnist-dp-cpu-bench)", "date": ctx.get("date", ""), "commit": "",
            "machine": machine, "figures": {"cpu_ops": figures}}


READERS = {"compare": from_compare, "gemm-survey": from_gemm_survey, "multiprocess": from_multiprocess,
           "strategies": from_strategies, "emu-step": from_emu_step, "cpu-ops": from_cpu_ops}


def merge_machine(old, new):
    for k, v in new.items():
        if v not in ("", None) and old.get(k) in ("", None):
            old[k] = v
    return old


def make(kind, raw, record_dir, command=None, add=False, title=None, notes=()):
    part = READERS[kind](raw)
    path = os.path.join(record_dir, "record.json")
    if add and os.path.exists(path):
        record = load(path)
        record["figures"].update(part["figures"])
        merge_machine(record["machine"], part["machine"])
        for k in ["date", "commit"]:
            if not record.get(k):
                record[k] = part[k]
    else:
        record = {"record": FORMAT, "name": os.path.basename(os.path.normpath(record_dir)),
                  "title": part["title"], "date": part["date"], "commit": part["commit"],
                  "machine": part["machine"], "commands": [], "figures": part["figures"]}
    commands = part.get("commands") or ([command] if command else [])
    for c in commands:
        if c not in record["commands"]:
            record["commands"].append(c)
    if title:
        record["title"] = title
    if notes:
        record.setdefault("notes", []).extend(notes)
    # The keys in one order in every record.
    order = ["record", "name", "title", "date", "commit", "machine", "commands", "figures", "notes"]
    return {k: record[k] for k in order if k in record}, part.get("copy", [])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=sorted(READERS))
    parser.add_argument("raw_dir")
    parser.add_argument("record_dir")
    parser.add_argument("--command")
    parser.add_argument("--add", action="store_true")
    parser.add_argument("--title")
    parser.add_argument("--note", action="append", default=[])
    a = parser.parse_args()
    try:
        record, copies = make(a.kind, a.raw_dir, a.record_dir, a.command, a.add, a.title, a.note)
    except (OSError, KeyError, ValueError) as e:
        sys.exit(f"make_record.py: {a.raw_dir}: cannot read the run's files ({type(e).__name__}: {e})")
    print(f"make_record.py: wrote {write(a.record_dir, record)}")
    # A plot beside the record: bench/results_tables.py --check keeps it there only while a doc shows it.
    for path in copies:
        shutil.copy(path, a.record_dir)
        print(f"make_record.py: copied {os.path.basename(path)} beside it (a doc must show it, or delete it)")


if __name__ == "__main__":
    main()
