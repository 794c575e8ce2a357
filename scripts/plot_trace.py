#!/usr/bin/python3
"""Draws a timeline written by `mnist-dp train --trace FILE` as a PNG: one row per replica, one colour per phase.

    scripts/plot_trace.py trace.json timeline.png [--steps N]

Needs matplotlib (Debian's python3-matplotlib; scripts/setup.sh --peers installs it). For interactive viewing,
open the JSON itself in ui.perfetto.dev or chrome://tracing.
"""
import argparse
import json
import sys

COLOURS = {"gather": "#8c564b", "forward": "#1f77b4", "loss": "#9467bd", "backward": "#ff7f0e",
           "all-reduce": "#d62728", "sgd": "#2ca02c"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("png")
    parser.add_argument("--steps", type=int, default=4, help="draw the first N steps (default 4)")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_trace.py: no matplotlib (apt-get install python3-matplotlib)")

    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    spans = [e for e in events if e["ph"] == "X" and e["args"]["step"] < args.steps]
    if not spans:
        sys.exit(f"plot_trace.py: {args.trace}: no phases in the first {args.steps} steps")
    rows = sorted(names)
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(rows) + 1.4))
    for e in spans:
        ax.barh(rows.index(e["tid"]), e["dur"], left=e["ts"], color=COLOURS.get(e["name"], "grey"), height=0.6)
    ax.set_yticks(range(len(rows)), [names[r] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("microseconds")
    ax.set_title(f"mnist-dp: the first {args.steps} steps of each replica")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()], labels=list(COLOURS),
              ncol=len(COLOURS), loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
