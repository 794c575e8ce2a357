#!/usr/bin/env python3
"""The report of one scripts/gpu-session.sh run, from the phases' files in its work folder.

    session_report.py WORK --mode gpu|emulated --commit C --started T --seconds S --total S --out DIR
        writes DIR/session.json (every phase's result and time, and the figures) and DIR/summary.md
    session_report.py --train WORK --mode gpu|emulated
        prints the training phase's table (WORK is that phase's folder); its last line is the phase's summary

Figures are copied from the programs' own output, unrounded; none is made up for what did not run (a missing one
is absent, and the summary says "not measured"). On emulated devices every time is the emulator's on the CPU:
the report says so and keeps no time at all. Standard library only.
"""
import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
import targets_report  # noqa: E402  (the fast path's targets, and the rule for an epoch's headline time)

# The training paths which promise the plain path's bits (README.md, "Options"): their loss lines must be equal.
SAME_BITS_AS_PLAIN = ["cuda-graphs", "fused-head", "fused-step", "pdl", "steps-per-graph-64", "persistent-64",
                      "fast-path"]
# Paths that promise another path's parameters (the checkpoints, byte for byte), not its loss lines:
# --strategy dataparallel adds the whole batch's loss at once where the all-reduce adds the shards'
# (docs/how-dataparallel-works.md), and the two add the replicas' gradients in the same order on one GPU.
SAME_PARAMETERS_AS = {"dataparallel-2": "replicas-2"}
PHASES = ["build", "tests", "train", "sanitizer", "bench", "pytorch"]


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_lines_json(path, prefix=""):
    """The JSON objects of a JSON-lines file (or of the lines that start with prefix), skipping what is not JSON."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                if not line.startswith(prefix):
                    continue
                try:
                    out.append(json.loads(line[len(prefix):]))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def per_step_us(epochs):
    """Microseconds a step: the median over the epochs after the first (which pays for start-up and capture), as
    bench/targets_report.py takes an epoch's time; None without a timed step."""
    timed = [e["seconds"] / e["steps"] * 1e6 for e in epochs if e.get("steps")]
    return targets_report.median_epoch(timed)


# --- The training phase ------------------------------------------------------------------------------------------

def train_runs(folder, emulated):
    runs = []
    try:
        with open(os.path.join(folder, "runs.tsv")) as f:
            rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    except OSError:
        rows = []
    for name, options, rc, wall, digest in rows:
        metrics = read_lines_json(os.path.join(folder, f"metrics-{name}.jsonl"))
        epochs = [m for m in metrics if m.get("event") == "epoch"]
        losses = [m["loss"] for m in metrics if m.get("event") == "step"]
        run = {"name": name, "options": options, "exit": int(rc), "wall_s": float(wall), "epochs": len(epochs),
               "steps": sum(e.get("steps", 0) for e in epochs), "logged_losses": len(losses)}
        if epochs:
            run["test_accuracy"] = epochs[-1]["test_accuracy"]
            run["test_loss"] = epochs[-1]["test_loss"]
        if not emulated and epochs:
            run["step_us"] = per_step_us(epochs)
            run["epoch_s"] = [e["seconds"] for e in epochs]
        run["_losses"] = losses
        run["_digest"] = digest if digest != "none" else None
        runs.append(run)
    by_name = {r["name"]: r for r in runs}
    plain = by_name.get("plain")
    for name in SAME_BITS_AS_PLAIN:
        r = by_name.get(name)
        if r is None or plain is None:
            continue
        r["same_bits_as_plain"] = bool(plain["_digest"]) and r["_digest"] == plain["_digest"] and \
            bool(plain["_losses"]) and r["_losses"] == plain["_losses"] and \
            r.get("test_accuracy") == plain.get("test_accuracy")
    for name, other in SAME_PARAMETERS_AS.items():
        r, ref = by_name.get(name), by_name.get(other)
        if r is None or ref is None:
            continue
        r["same_parameters_as"] = other
        r["same_bits_as_plain"] = bool(ref["_digest"]) and r["_digest"] == ref["_digest"]
    cpu = by_name.get("cpu")
    for r in runs:
        if cpu is not None and r is not cpu and "test_accuracy" in r and "test_accuracy" in cpu:
            r["accuracy_minus_cpu_points"] = (r["test_accuracy"] - cpu["test_accuracy"]) * 100
    for r in runs:
        del r["_losses"]
        r["parameters_sha256"] = r.pop("_digest")
    return runs


def train_table(runs, emulated):
    lines = ["| path | options | exit | steps | us/step | test accuracy | vs CPU (points) | plain's bits |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        if emulated:
            us = "-" if r["name"] == "cpu" else "emulated"
        else:
            us = f"{r['step_us']:.2f}" if r.get("step_us") else "-"
        acc = f"{r['test_accuracy'] * 100:.2f}%" if "test_accuracy" in r else "-"
        vs = f"{r['accuracy_minus_cpu_points']:+.2f}" if "accuracy_minus_cpu_points" in r else "-"
        bits = {True: "equal", False: "DIFFER"}.get(r.get("same_bits_as_plain"), "")
        if bits and "same_parameters_as" in r:
            bits += f" ({r['same_parameters_as']}'s parameters)"
        lines.append(f"| {r['name']} | `{r['options']}` | {r['exit']} | {r['steps']} | {us} | {acc} | {vs} | {bits} |")
    ran = [r for r in runs if r["exit"] == 0 and r["epochs"]]
    differ = [r["name"] for r in runs if r.get("same_bits_as_plain") is False]
    summary = f"training: {len(ran)} of {len(runs)} paths ran"
    gpu = [r for r in ran if r["name"] != "cpu" and r.get("step_us")]
    if gpu:
        best = min(gpu, key=lambda r: r["step_us"])
        summary += f"; fastest {best['name']} {best['step_us']:.2f} us/step"
    checked = [r for r in runs if "same_bits_as_plain" in r]
    if differ:
        summary += f"; DIFFER from the plain path's parameters or losses: {', '.join(differ)}"
    elif checked:
        summary += f"; {len(checked)} paths end with the plain path's parameters and losses, to the bit"
        if any("same_parameters_as" in r for r in checked):
            summary += " (dataparallel-2 with replicas-2's parameters)"
    return lines, summary, not differ and len(ran) == len(runs)


# --- The other phases' figures -----------------------------------------------------------------------------------

def bench_figures(folder, emulated):
    figures = {}
    for path in sorted(glob.glob(os.path.join(folder, "epoch-*.json"))):
        data = read_json(path) or {}
        gemm = os.path.basename(path)[len("epoch-"):-len(".json")]
        rows = {}
        for row in data.get("variants", data.get("rows", [])):
            entry = {"steps_per_epoch": row.get("steps_per_epoch")}
            if not emulated and isinstance(row.get("step_us"), dict):
                entry["step_us"] = row["step_us"].get("median_us")
            rows[row.get("variant", "?")] = entry
        figures[f"epoch_{gemm}"] = {"same_parameters": data.get("same_parameters"), "variants": rows}
    kernels = read_json(os.path.join(folder, "kernels.json")) or {}
    rows = {}
    for row in kernels.get("rows", []):
        entry = {"check": row.get("check")}
        for mode in ("hot", "graph"):
            if not emulated and isinstance(row.get(mode), dict):
                entry[f"{mode}_us"] = row[mode].get("median_us")
        rows[row.get("id", "?")] = entry
    if rows:
        figures["kernels_b64"] = rows
    reduce = read_json(os.path.join(folder, "allreduce.json")) or {}
    rows = []
    for row in reduce.get("rows", []):
        if not row.get("gradient_buffer"):
            continue
        entry = {"ranks": row.get("ranks"), "bytes": row.get("bytes"), "check": row.get("check")}
        if not emulated and isinstance(row.get("in_place"), dict):
            entry["in_place_us"] = row["in_place"].get("median_us")
            entry["busbw_gbs"] = row["in_place"].get("busbw_gbs")
        rows.append(entry)
    if rows:
        figures["allreduce_gradients"] = rows
    return figures


def pytorch_figures(folder):
    figures = {}
    for path in sorted(glob.glob(os.path.join(folder, "pytorch-*.log"))):
        epochs = read_lines_json(path, "RESULT ")
        if not epochs:
            continue
        variant = epochs[0].get("variant", os.path.basename(path)[len("pytorch-"):-len(".log")])
        figures[variant] = {"epochs": len(epochs), "step_us": per_step_us(epochs),
                            "epoch_s": [e["seconds"] for e in epochs],
                            "test_accuracy": epochs[-1].get("test_accuracy"), "torch": epochs[0].get("torch")}
    return figures


def sanitizer_results(folder):
    try:
        with open(os.path.join(folder, "results.txt")) as f:
            return [line.strip() for line in f if line.strip()]
    except OSError:
        return []


def read_phases(work):
    phases = []
    try:
        with open(os.path.join(work, "phases.tsv")) as f:
            for line in f:
                name, result, secs, detail = (line.rstrip("\n").split("\t") + [""] * 4)[:4]
                phases.append({"name": name, "result": result, "seconds": int(secs or 0), "detail": detail})
    except OSError:
        pass
    named = {p["name"] for p in phases}
    for name in PHASES:  # a phase that never wrote its line (the whole run stopped) is named too
        if name not in named:
            phases.append({"name": name, "result": "not run", "seconds": 0, "detail": "the run ended before it"})
    return phases


def environment(work):
    env = {}
    try:
        with open(os.path.join(work, "environment.txt")) as f:
            text = f.read()
    except OSError:
        return env
    for line in text.splitlines():
        if line.startswith("host: "):
            env["host"] = line.split(": ", 1)[1].strip()
        elif line.startswith("cores: "):
            env["cpus"] = int(line.split(": ", 1)[1])
        elif "Model name" in line:
            env["cpu"] = line.split(":", 1)[1].strip()
        elif line.startswith("cmake version"):
            env["cmake"] = line.split()[-1]
        elif "Driver Version" in line:
            parts = line.replace("|", " ").split()
            if "Version:" in parts:
                env["driver"] = parts[parts.index("Version:") + 1]
        elif "release" in line and "Cuda compilation tools" in line:
            env["nvcc"] = line.split("release", 1)[1].split(",")[0].strip()
    gpu_lines = [line for line in text.splitlines() if "NVIDIA H" in line or "NVIDIA A" in line]
    if gpu_lines:
        env["gpu"] = " ".join(gpu_lines[0].replace("|", " ").split()[1:4])
    return env


def write_report(args):
    work = args.work
    emulated = args.mode == "emulated"
    phases = read_phases(work)
    train = train_runs(os.path.join(work, "train"), emulated)
    session = {
        "session": 1,
        "mode": args.mode,
        "emulated": emulated,
        "commit": args.commit,
        "started": args.started,
        "seconds": args.seconds,
        "total_seconds": args.total,
        "machine": environment(work),
        "phases": phases,
        "figures": {
            "train": train,
            "bench": bench_figures(os.path.join(work, "bench"), emulated),
            "pytorch": pytorch_figures(os.path.join(work, "pytorch")),
            "sanitizer": sanitizer_results(os.path.join(work, "sanitizer")),
        },
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "session.json"), "w") as f:
        json.dump(session, f, indent=1, sort_keys=False)
        f.write("\n")

    title = "GPU run" if not emulated else "GPU run, REHEARSED on emulated devices (no GPU result)"
    lines = [f"# {title}", "",
             f"commit {args.commit}, started {args.started}, {args.seconds} s of {args.total} s",
             f"machine: {json.dumps(session['machine'])}", "",
             "| phase | result | seconds | detail |", "|---|---|---:|---|"]
    for p in phases:
        lines.append(f"| {p['name']} | {p['result']} | {p['seconds']} | {p['detail']} |")
    if train:
        table, _, _ = train_table(train, emulated)
        lines += ["", "## Training paths", ""] + table
    pt = session["figures"]["pytorch"]
    if pt:
        lines += ["", "## PyTorch on the same GPU", "", "| variant | us/step | test accuracy |", "|---|---:|---:|"]
        for variant, v in pt.items():
            us = f"{v['step_us']:.2f}" if v.get("step_us") else "-"
            lines.append(f"| {variant} | {us} | {v['test_accuracy'] * 100:.2f}% |")
    if session["figures"]["sanitizer"]:
        lines += ["", "## compute-sanitizer", ""] + [f"- {s}" for s in session["figures"]["sanitizer"]]
    if emulated:
        lines += ["", "Emulated devices: every figure above is a rehearsal of the script, not a GPU result."]
    else:
        # The fast path's targets, from this run's epochs, paths and PyTorch runs.
        text = targets_report.report(os.path.join(work, "bench"), session)
        lines += [""] + text[text.find("## Targets"):].rstrip("\n").splitlines()
    lines += ["", "Files: summary.md, session.json, logs.tar.gz; bench/gpu_record.py DIR records them."]
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work")
    parser.add_argument("--train", action="store_true", help="print the training phase's table (WORK: its folder)")
    parser.add_argument("--mode", choices=["gpu", "emulated"], required=True)
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--started", default="")
    parser.add_argument("--seconds", type=int, default=0)
    parser.add_argument("--total", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.train:
        lines, summary, ok = train_table(train_runs(args.work, args.mode == "emulated"), args.mode == "emulated")
        print("\n".join(lines))
        print(summary)
        return 0 if ok else 1
    if not args.out:
        parser.error("--out is needed to write the report")
    write_report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
