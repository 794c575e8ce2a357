#!/usr/bin/python3
"""The fast path's targets, decided from one run of the GPU benchmarks (scripts/gpu-session.sh).

    bench/targets_report.py DIR [--session FILE] [--out FILE]

DIR holds epoch-GEMM.json files (mnist-dp-bench --epoch --json) and, unless --session names a
scripts/gpu-session.sh run's session.json (whose training paths and PyTorch runs then stand for it),
compare/compare.json (bench/compare.sh). Prints markdown: each GEMM's epoch variants with their time per step,
and then each target with the figures it was decided from:

  step      at most 10 us per step, averaged over an epoch: the fastest variant's median epoch over its steps
            (mnist-dp-bench --epoch: data, shuffle and the all-reduce inside, no host wait)
  eager     at least 10x PyTorch eager with the data on the GPU, per epoch: pytorch-tensor's headline epoch time
            over mnist-dp's fastest CUDA configuration's (TF32 left out), from one bench/compare.sh or
            scripts/gpu-session.sh run
  fastest   at least 3x the fastest other PyTorch variant that ran (pytorch-graphs, pytorch-compile), likewise
  accuracy  that fastest configuration's final test accuracy equal to the plain path's (mnistdp-cuda-blocked)
  bits      every variant of every epoch run ending with the plain variant's parameters (same_parameters)

A target whose figures are missing is "not measured", never met. Standard library only.
"""
import argparse
import glob
import json
import os
import statistics
import sys

STEP_TARGET_US = 10.0
EAGER_TARGET = 10.0
FASTEST_TARGET = 3.0
PLAIN_CONFIGURATION = "mnistdp-cuda-blocked"


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"targets_report.py: {path}: {e}", file=sys.stderr)
        return None


def epoch_runs(folder):
    """Every mnist-dp-bench --epoch JSON in the folder, by file name."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(folder, "epoch-*.json"))):
        data = load_json(path)
        if data and data.get("variants"):
            runs[os.path.basename(path)] = data
    return runs


def verdict(measured, met):
    if not measured:
        return "not measured"
    return "met" if met else "NOT met"


def speedup_line(target, times, peer, ours, missing):
    """A table row: the peer's epoch time over ours, against `times`."""
    if not (peer and ours):
        return f"| {target} | {missing} | not measured |"
    ratio = peer["seconds_per_epoch"] / ours["seconds_per_epoch"]
    return (f"| {target} | {peer['name']} {peer['seconds_per_epoch'] * 1e3:.2f} ms over {ours['name']} "
            f"{ours['seconds_per_epoch'] * 1e3:.2f} ms: {ratio:.2f}x | {verdict(True, ratio >= times)} |")


def median_epoch(seconds):
    """The headline epoch time: the median over the epochs after the first (start-up, capture), or the only one."""
    timed = seconds[1:] if len(seconds) > 1 else seconds
    return statistics.median(timed) if timed else None


def session_rows(session):
    """A scripts/gpu-session.sh run's training paths and PyTorch runs, as compare.json's rows."""
    figures = session.get("figures", {})
    rows = []
    for r in figures.get("train", []):
        if r["name"] in ("cpu", "tf32") or r.get("exit") != 0 or not r.get("epoch_s"):
            continue
        rows.append({"name": f"mnistdp-cuda-{r['name']}", "status": "ok",
                     "seconds_per_epoch": median_epoch(r["epoch_s"]), "final_test_accuracy": r["test_accuracy"]})
    for variant, v in figures.get("pytorch", {}).items():
        if v.get("epoch_s"):
            rows.append({"name": f"pytorch-{variant}", "status": "ok", "seconds_per_epoch": median_epoch(v["epoch_s"]),
                         "final_test_accuracy": v["test_accuracy"]})
    return {"rows": rows}


def report(folder, session=None):
    lines = []
    runs = epoch_runs(folder)
    if session is not None:
        compare = session_rows(session)
    else:
        path = os.path.join(folder, "compare", "compare.json")
        compare = load_json(path) if os.path.exists(path) else None

    lines.append("## Epochs (mnist-dp-bench --epoch)")
    lines.append("")
    fastest = None  # (us per step, file, variant)
    all_same = True
    if not runs:
        lines.append("No epoch run in this folder.")
    for name, run in runs.items():
        gemm = run.get("gemm", "?") + (" (TF32)" if run.get("tf32") else "")
        device = run.get("device", {}).get("name", "?")
        lines.append(f"`{name}`: gemm {gemm} on {device}, {run.get('rounds', '?')} rounds of "
                     f"{run.get('repeats', '?')} epochs; parameters of every variant equal to the first's: "
                     f"{'yes' if run.get('same_parameters') else 'NO'}")
        lines.append("")
        lines.append("| variant | us/step (median) | p10 to p90 | ms/epoch |")
        lines.append("|---|---:|---:|---:|")
        all_same = all_same and bool(run.get("same_parameters"))
        for v in run["variants"]:
            us = v["step_us"]["median_us"]
            ms = v.get("epoch_ms", {}).get("median_ms")
            lines.append(f"| {v['variant']} | {us:.2f} | {v['step_us']['p10_us']:.2f} to "
                         f"{v['step_us']['p90_us']:.2f} | {'' if ms is None else f'{ms:.3f}'} |")
            # TF32 changes the results: it competes for speed only beside runs with the same bits.
            if not run.get("tf32") and (fastest is None or us < fastest[0]):
                fastest = (us, name, v["variant"])
        lines.append("")

    rows = {r["name"]: r for r in (compare or {}).get("rows", []) if r.get("status") == "ok"}
    ours = {n: r for n, r in rows.items() if n.startswith("mnistdp-cuda")}
    plain = rows.get(PLAIN_CONFIGURATION) or rows.get("mnistdp-cuda-plain")
    best = min(ours.values(), key=lambda r: r["seconds_per_epoch"]) if ours else None
    eager = rows.get("pytorch-tensor")
    others = [rows[n] for n in ("pytorch-graphs", "pytorch-compile") if n in rows]
    fastest_peer = min(others, key=lambda r: r["seconds_per_epoch"]) if others else None

    lines.append("## Targets")
    lines.append("")
    lines.append("| target | figures | verdict |")
    lines.append("|---|---|---|")
    if fastest:
        lines.append(f"| at most {STEP_TARGET_US:g} us a step over an epoch | {fastest[0]:.2f} us/step, "
                     f"{fastest[2]} in `{fastest[1]}` | {verdict(True, fastest[0] <= STEP_TARGET_US)} |")
    else:
        lines.append(f"| at most {STEP_TARGET_US:g} us a step over an epoch | none | not measured |")
    lines.append(speedup_line(f"at least {EAGER_TARGET:g}x PyTorch eager (data on the GPU)", EAGER_TARGET, eager,
                              best, "none"))
    lines.append(speedup_line(f"at least {FASTEST_TARGET:g}x the fastest other PyTorch variant", FASTEST_TARGET,
                              fastest_peer, best, "none (pytorch-graphs and pytorch-compile did not run)"))
    if best and plain:
        same = best["final_test_accuracy"] == plain["final_test_accuracy"]
        lines.append(f"| the plain path's final accuracy | {best['name']} {best['final_test_accuracy']:.4f}, "
                     f"{plain['name']} {plain['final_test_accuracy']:.4f} | {verdict(True, same)} |")
    else:
        lines.append("| the plain path's final accuracy | none | not measured |")
    lines.append(f"| the plain path's parameters in every epoch variant | {len(runs)} epoch run(s) | "
                 f"{verdict(bool(runs), all_same)} |")
    lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="the folder of the epoch runs (and of compare/compare.json)")
    parser.add_argument("--session", help="a scripts/gpu-session.sh run's session.json, in place of compare.json")
    parser.add_argument("--out", help="also write the markdown here")
    args = parser.parse_args()
    if not os.path.isdir(args.folder):
        sys.exit(f"targets_report.py: {args.folder}: not a folder")
    session = None
    if args.session:
        session = load_json(args.session)
        if session is None:
            sys.exit(f"targets_report.py: --session {args.session}: cannot read it")
    text = report(args.folder, session)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
