#!/usr/bin/python3
"""Plots a bench/compare.sh run: DIR/loss.png (training loss against step, mnist-dp and PyTorch) and
DIR/step_time.png (microseconds per training step of each configuration).

    bench/plot.py DIR        (DIR holds compare.json, written by bench/compare_report.py)

Needs matplotlib (Debian: python3-matplotlib); without it, says so and exits 0 having drawn nothing.
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: no matplotlib (Debian: apt-get install python3-matplotlib): no plots drawn", file=sys.stderr)
        return
    with open(os.path.join(folder, "compare.json")) as f:
        report = json.load(f)
    machine = report["machine"]
    rows = [r for r in report["rows"] if r["status"] == "ok"]
    where = machine["gpu"] if machine["device"] == "cuda" else f"{machine['cpus']} vCPU {machine['cpu']}"
    subtitle = f"{where}, {machine['date'][:10]}, commit {machine['commit']}"

    # Loss against the global step. Both programs log the loss of the step's batch every 100 steps.
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in rows:
        steps = r.get("steps_per_epoch") or 938
        points = [(p["epoch"] * steps + p["step"], p["loss"]) for p in r["loss"]]
        if not points:
            continue
        x, y = zip(*sorted(points))
        style = "-" if r["name"].startswith("mnistdp") else "--"
        ax.plot(x, y, style, marker=".", linewidth=1.2, label=r["label"])
    ax.set_xlabel("step (batch of 64)")
    ax.set_ylabel("training loss of the step's batch")
    ax.set_title(f"Loss against step\n{subtitle}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "loss.png"), dpi=110)
    plt.close(fig)

    # Time per step: the headline (median epoch after the first) as a bar, every epoch as a dot.
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.8))
    labels = [r["label"] for r in rows]
    ax.barh(range(len(rows)), [r["us_per_step"] for r in rows],
            color=["tab:blue" if r["name"].startswith("mnistdp") else "tab:orange" for r in rows])
    right = 0.0
    for i, r in enumerate(rows):
        per_epoch = [e["seconds"] / e["steps"] * 1e6 for e in r["epochs"] if e.get("steps")]
        ax.plot(per_epoch, [i] * len(per_epoch), "k.", markersize=5)
        # The label right of the bar and of every dot, so that neither hides it.
        x = max([r["us_per_step"]] + per_epoch)
        right = max(right, x)
        ax.annotate(f"  {r['us_per_step']:.0f} us", (x, i), va="center", fontsize=8)
    times = [r["us_per_step"] for r in rows]
    if times and max(times) / min(times) > 20:
        ax.set_xscale("log")
    else:
        ax.set_xlim(0, right * 1.18)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("microseconds per step (bar: median epoch after the first; dots: each epoch)")
    ax.set_title(f"Time per training step\n{subtitle}", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "step_time.png"), dpi=110)
    plt.close(fig)
    print(f"plot.py: wrote {os.path.join(folder, 'loss.png')} and step_time.png")


if __name__ == "__main__":
    main()
