#!/usr/bin/python3
"""Reads a bench/compare.sh run folder and writes its table (compare.md) and all of its numbers (compare.json).

    bench/compare_report.py DIR

DIR/runs/ holds machine.json, load.txt, and per configuration and round NAME.rK.log (and NAME.rK.jsonl, mnist-dp's
--metrics). DIR is the run's raw folder (build/bench-runs/NAME by default); compare.sh then writes the run's record
into bench/results/ from compare.json (bench/make_record.py compare DIR RECORD_DIR). Standard library only.

Headline time: the median epoch time over the epochs after the first of every round (the first pays for start-up,
compilation and graph capture), or over every epoch when a round has only one. samples/s and us/step follow from it and the epoch's
samples and steps. "x mnist-dp" is the configuration's headline time over mnist-dp's default configuration (cpu,
or cuda with --gemm blocked): above 1, mnist-dp is faster. On the CPU, GFLOP/s is the products of an epoch's steps
(2 x rows x (2 x 784 x 256 + 3 x 256 x 10): fc1 and fc2 forward, both weight gradients, fc2's input gradient) over
the headline time, and "x floor" the headline time over those products at the peak machine.json records (one
core's, FMA chains in its widest vectors, the highest of the measurements compare.sh made before each round, times
the thread count).
"""
import json
import os
import re
import statistics
import sys

LOSS_LINE = re.compile(r"^Epoch (\d+), Step (\d+), Loss: (\S+)")


def read_mnistdp(path):
    """Epoch records and loss points from mnist-dp's --metrics JSON lines."""
    epochs, losses, start = [], [], {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("event") == "epoch":
                epochs.append(r)
            elif r.get("event") == "step":
                losses.append((r["epoch"], r["step"], r["loss"]))
            elif r.get("event") == "start":
                start = r
    return epochs, losses, start


def read_peer(path):
    """Epoch records (RESULT lines) and loss points (the reference program's log lines) from a peer's output."""
    epochs, losses = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("RESULT "):
                epochs.append(json.loads(line[len("RESULT "):]))
            else:
                m = LOSS_LINE.match(line)
                if m:
                    losses.append((int(m.group(1)), int(m.group(2)), float(m.group(3))))
    return epochs, losses


def headline(rounds):
    """rounds: one list of epoch records per round."""
    pooled = []
    for epochs in rounds:
        complete = [e for e in epochs if e.get("complete", True)] or epochs
        pooled += complete[1:] if len(complete) > 1 else complete
    seconds = statistics.median(e["seconds"] for e in pooled)
    return seconds, pooled[0]["steps"], pooled[0].get("samples", 60000), len(pooled)


# Floating-point operations of the matrix products per training row (the step's products are linear in the rows).
PRODUCT_FLOP_PER_ROW = 2 * (2 * 784 * 256 + 3 * 256 * 10)

KERNELS_LINE = re.compile(r"matrix products in (.+?) \(chosen")


def describe(name, machine, log_text, first_epoch):
    if name.startswith("mnistdp-"):
        device = name[len("mnistdp-"):]
        if device == "cpu":
            m = KERNELS_LINE.search(log_text)
            kernels = f"hand-written {m.group(1)}" if m else "kernels unknown"
            return f"mnist-dp, cpu ({kernels}, {machine['threads']} thread(s))"
        gemm = device.split('-', 1)[1]
        if gemm.endswith("-fused-step"):
            return f"mnist-dp, cuda, --gemm {gemm[:-len('-fused-step')]} --fused-step"
        if gemm.endswith("-graphs"):
            return f"mnist-dp, cuda, --gemm {gemm[:-len('-graphs')]} --cuda-graphs"
        return f"mnist-dp, cuda, --gemm {gemm}"
    prefix, variant = name.split("-", 1)
    what = {"tensor": "data in one tensor" + (" on the GPU (eager)" if machine["device"] == "cuda" else ""),
            "loader": "as written (DataLoader)",
            "compile": "torch.compile reduce-overhead",
            "graphs": "whole step in a CUDA graph"}.get(variant, variant)
    version = machine["torch2"] if prefix == "pytorch2" else machine["torch"]
    e = first_epoch or {}
    if e.get("blas") == "mkl":
        lib = f"MKL {e.get('mkl', '')}".strip()
    elif "openblas_core" in e:
        lib = f"OpenBLAS {e['openblas_core']}"
    else:
        lib = e.get("blas", "")
    if e.get("cpu_capability"):
        lib += f", {e['cpu_capability']}"
    return f"PyTorch {version}" + (f" ({lib})" if lib and machine["device"] == "cpu" else "") + f", {what}"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    runs = os.path.join(folder, "runs")
    with open(os.path.join(runs, "machine.json")) as f:
        machine = json.load(f)
    load_after = None
    if os.path.exists(os.path.join(runs, "load_after.txt")):
        with open(os.path.join(runs, "load_after.txt")) as f:
            load_after = float(f.read().split()[0])
    machine["load_average_after"] = load_after

    # NAME.rK.log, one per configuration and round (NAME.log from a run before --rounds counts as round 1).
    files = {}
    for n in os.listdir(runs):
        m = re.match(r"^(.*?)(?:\.r(\d+))?\.log$", n)
        if m:
            files.setdefault(m.group(1), []).append((int(m.group(2) or 1), n[:-len(".log")]))
    loads = {}
    if os.path.exists(os.path.join(runs, "load.txt")):
        with open(os.path.join(runs, "load.txt")) as f:
            for line in f:
                name, _, load = line.split()
                loads.setdefault(name, []).append(float(load))
    names = sorted(files, key=lambda n: (not n.startswith("mnistdp"), n))
    rows = []
    for name in names:
        row = {"name": name, "label": "", "rounds": [], "loss": []}
        last_line = "no output"
        for k, stem in sorted(files[name]):
            with open(os.path.join(runs, stem + ".log")) as f:
                log_text = f.read()
            if log_text.strip():
                last_line = log_text.strip().splitlines()[-1]
            try:
                if name.startswith("mnistdp-"):
                    epochs, losses, _ = read_mnistdp(os.path.join(runs, stem + ".jsonl"))
                else:
                    epochs, losses = read_peer(os.path.join(runs, stem + ".log"))
            except (OSError, ValueError) as e:
                epochs, losses = [], []
                row["status"] = f"unreadable: {e}"
            if epochs:
                row["rounds"].append(epochs)
            if k == 1:
                row["loss"] = [{"epoch": e, "step": s, "loss": v} for e, s, v in losses]
        row["label"] = describe(name, machine, log_text, row["rounds"][0][0] if row["rounds"] else None)
        row["load_at_start"] = loads.get(name, [])
        row["epochs"] = [e for r in row["rounds"] for e in r]
        if not row["rounds"]:
            row.setdefault("status", f"did not run: {last_line}")
            rows.append(row)
            continue
        seconds, steps, samples, counted = headline(row["rounds"])
        row.update(status="ok", seconds_per_epoch=seconds, epochs_in_median=counted, steps_per_epoch=steps,
                   samples_per_second=samples / seconds, us_per_step=seconds / steps * 1e6,
                   final_test_accuracy=row["rounds"][-1][-1].get("test_accuracy"))
        if machine["device"] == "cpu":
            flop = PRODUCT_FLOP_PER_ROW * samples
            row["gflops"] = flop / seconds / 1e9
            peak = (machine.get("peak") or {}).get("peak_gflops")
            if peak:
                row["floor_seconds"] = flop / (peak * 1e9 * machine["threads"])
                row["time_over_floor"] = seconds / row["floor_seconds"]
        rows.append(row)

    base_name = "mnistdp-cpu" if machine["device"] == "cpu" else "mnistdp-cuda-blocked"
    base = next((r for r in rows if r["name"] == base_name and r["status"] == "ok"), None)
    if base is None:
        base = next((r for r in rows if r["name"].startswith("mnistdp") and r["status"] == "ok"), None)
    for r in rows:
        if base and r["status"] == "ok":
            r["time_over_mnistdp"] = r["seconds_per_epoch"] / base["seconds_per_epoch"]

    all_loads = [x for r in rows for x in r.get("load_at_start", [])]
    where = machine["gpu"] + f" (driver {machine['driver']})" if machine["device"] == "cuda" else \
        f"{machine['cpus']} vCPU {machine['cpu']}"
    lines = [
        f"# mnist-dp against PyTorch: {machine['device']}, {machine['date'][:10]}",
        "",
        f"Machine: {machine['host']}, {where}; Debian's OpenBLAS (Debian's PyTorch's BLAS) picks its {machine['openblas_core']} kernels"
        + (f" (OPENBLAS_CORETYPE={machine['openblas_coretype_env']})" if machine["openblas_coretype_env"] else
           " (OPENBLAS_CORETYPE unset)")
        + f"; load average {machine['load_average_before']} before, {load_after} after"
        + (f", {min(all_loads):.2f} to {max(all_loads):.2f} at the start of each run." if all_loads else "."),
        f"Commit {machine['commit']}; data {machine['data']}; batch 64; {machine['epochs']} epoch(s); "
        f"{machine['threads']} thread(s); Python {machine['python']}, PyTorch {machine['torch']}.",
        "",
        f"Time per epoch: the median over the epochs after the first of {machine.get('rounds', 1)} round(s) "
        "(every epoch is in compare.json). "
        + (f"x mnist-dp: time over {base['label']}." if base else ""),
        "",
    ]
    cpu = machine["device"] == "cpu"
    peak = (machine.get("peak") or {}).get("peak_gflops")
    if cpu and peak:
        measured = machine["peak"].get("peak_gflops_measured") or [peak]
        spread = (f"the highest of {len(measured)} measurements, one before each round, from "
                  f"{min(measured):.1f} up" if len(measured) > 1 else "one measurement")
        lines += [f"Peak: {peak:.1f} GFLOP/s a core ({machine['peak']['peak_isa']}; {spread}), so the floor of an "
                  f"epoch's products is {PRODUCT_FLOP_PER_ROW * 60000 / (peak * 1e9 * machine['threads']):.3f} s "
                  f"on {machine['threads']} thread(s); x floor: time over it.", ""]
    extra_head = " GFLOP/s | x floor |" if cpu else ""
    lines += [
        "| configuration | s/epoch | samples/s | us/step |" + extra_head + " final test accuracy | x mnist-dp |",
        "|---|---:|---:|---:|" + ("---:|---:|" if cpu else "") + "---:|---:|",
    ]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['label']} | {r['status']} | | |" + (" | |" if cpu else "") + " | |")
            continue
        acc = r["final_test_accuracy"]
        extra = ""
        if cpu:
            extra = f" {r['gflops']:.1f} |" + (f" {r['time_over_floor']:.2f} |" if "time_over_floor" in r else " |")
        lines.append(f"| {r['label']} | {r['seconds_per_epoch']:.3f} | {r['samples_per_second']:,.0f} | "
                     f"{r['us_per_step']:.1f} |{extra} " + (f"{100 * acc:.2f}%" if acc is not None else "") +
                     f" | {r.get('time_over_mnistdp', float('nan')):.2f} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(folder, "compare.md"), "w") as f:
        f.write(table)
    with open(os.path.join(folder, "compare.json"), "w") as f:
        json.dump({"machine": machine,
                   "headline": "median epoch time over the epochs after the first",
                   "base": base["name"] if base else None,
                   "rows": rows}, f, indent=1)
        f.write("\n")
    print(table)
    print(f"wrote {os.path.join(folder, 'compare.md')} and compare.json")


if __name__ == "__main__":
    main()
