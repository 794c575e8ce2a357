#!/usr/bin/python3
"""Where the time of each traced step went: a report of a `mnist-dp train --trace TRACE.json` file, any
strategy, any number of micro-batches a step.

    bench/trace_report.py TRACE.json [--json]

Per step: its wall time (first mark to last, over every row), the communication, the time it overlaps
computation, and the bytes the strategy moves between replicas; per replica: its computation, the time it
waited for the communication to begin, the time it spent in the communication, and the time it was idle.
--json prints the same as one JSON object (what tests and plots read). The standard library only.

The words, as this script measures them from the trace's spans:
  computation    a replica's gather, forward, loss, backward and sgd spans (under DataParallel also device
                 0's "loss on device 0")
  communication  the all-reduce: from the moment the last replica enters its "all-reduce" span to the moment
                 the first one leaves it (before that, the sum cannot begin; after it, the sum is done);
                 DataParallel: device 0's copies (broadcast parameters, gather logits, scatter d(logits),
                 reduce gradients); ZeRO-1: its collectives' row (reduce-scatter, all-gather)
  waiting        the part of a replica's exchange spans ("all-reduce"; DataParallel's "to device 0 and back"
                 and "reduce onto device 0"; ZeRO-1's "reduce-scatter") outside the communication: the
                 replica is done and the others, or device 0, are not
  overlap        the time when communication and some replica's computation run at once, the union of one
                 against the union of the other
  idle           the step's wall time less the replica's computation and exchange spans
  bytes          computed from the model's sizes and the step's shards (bench/make_record.py's
                 strategy_bytes, read from the trace's "mnist_dp" object), not measured: one all-reduce of the
                 gradient buffer a step; DataParallel's copies once per micro-batch; ZeRO-1's reduce-scatter
                 and all-gather once a step, together the all-reduce's bytes

The trace of one process holds only its own replicas; the bytes count every process's (world_replicas).
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys

COMPUTE = {"gather", "forward", "loss", "backward", "sgd", "sgd on its shard", "loss on device 0"}
EXCHANGE = {"all-reduce", "reduce onto device 0", "to device 0 and back (gather, loss, scatter)",
            "reduce-scatter (and waiting for it)"}
LINK_COPIES = {"broadcast parameters", "gather logits", "scatter d(logits)", "reduce gradients",
               "reduce-scatter gradients", "all-gather parameters"}
LINK_ROWS = {"device 0's copies (nn.DataParallel)", "the collectives (ZeRO-1)"}


def load_make_record():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_record.py")
    spec = importlib.util.spec_from_file_location("make_record", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def union(intervals):
    """Sorted, disjoint intervals covering the given ones (empty ones dropped)."""
    merged = []
    for b, e in sorted(i for i in intervals if i[1] > i[0]):
        if merged and b <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([b, e])
    return [tuple(i) for i in merged]


def length(intervals):
    return sum(e - b for b, e in union(intervals))


def intersection(a, b):
    """The length of union(a) intersected with union(b)."""
    a, b = union(a), union(b)
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


class TraceError(Exception):
    pass


def read_trace(path):
    try:
        with open(path) as f:
            trace = json.load(f)
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror}")
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: not JSON ({e})")
    if not isinstance(trace, dict) or "traceEvents" not in trace:
        raise TraceError(f"{path}: no traceEvents: not a trace written by mnist-dp train --trace")
    rows, spans = {}, []
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            rows[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            args = e.get("args", {})
            if "step" not in args:
                raise TraceError(f"{path}: a span without its step: {e}")
            spans.append({"name": e["name"], "row": e["tid"], "begin": float(e["ts"]),
                          "end": float(e["ts"]) + float(e["dur"]), "step": int(args["step"]),
                          "micro": int(args.get("micro-batch", 0))})
    return trace.get("mnist_dp"), rows, spans


def step_rows(run, step):
    """The rows of a step and of each of its micro-batches, from the run's settings."""
    per_step = run["batch_size"] * run["accumulate"]
    steps_per_epoch = -(-run["train_count"] // per_step)
    first = (step % steps_per_epoch) * per_step
    rows = min(per_step, run["train_count"] - first)
    micro = [min(run["batch_size"], rows - m) for m in range(0, rows, run["batch_size"])]
    return rows, micro


def step_bytes(make_record, run, step):
    if run is None:
        return None
    n = run["world_replicas"]
    rows, micro = step_rows(run, step)
    if run["strategy"] == "allreduce":
        # One exchange of the whole gradient buffer a step, whatever its rows.
        return {"gradients": make_record.strategy_bytes(n, rows)["allreduce"]["gradients"]}
    if run["strategy"] == "zero1":
        # Each replica's shard receives the N-1 others' values there, and the loss slot is summed from and
        # sent back to the N-1 others; each shard of the parameters goes to the N-1 others. Together 2 (N-1)
        # gradient buffers: the all-reduce's bytes, in two halves.
        floats = make_record.PARAMETERS
        return {"gradients_reduce_scattered": (n - 1) * (floats + 2) * make_record.FLOAT_BYTES,
                "parameters_all_gathered": (n - 1) * floats * make_record.FLOAT_BYTES}
    total = {}
    for m in micro:
        for k, v in make_record.strategy_bytes(n, m)["dataparallel"].items():
            if k != "total":
                total[k] = total.get(k, 0) + v
    return total


def report(path):
    run, rows, spans = read_trace(path)
    if not spans:
        raise TraceError(f"{path}: holds no step")
    make_record = load_make_record()
    replica_rows = sorted(r for r, name in rows.items() if name not in LINK_ROWS)
    link_rows = [r for r, name in rows.items() if name in LINK_ROWS]
    steps = []
    for step in sorted({s["step"] for s in spans}):
        mine = [s for s in spans if s["step"] == step]
        begin, end = min(s["begin"] for s in mine), max(s["end"] for s in mine)
        compute = [(s["begin"], s["end"]) for s in mine if s["name"] in COMPUTE]
        if link_rows:
            communication = [(s["begin"], s["end"]) for s in mine if s["name"] in LINK_COPIES]
        else:
            # The collective of each exchange (one a step, after its last micro-batch): from the last
            # replica's entry to the first one's exit.
            communication = []
            exchanges = [s for s in mine if s["name"] == "all-reduce"]
            for micro in sorted({s["micro"] for s in exchanges}):
                these = [s for s in exchanges if s["micro"] == micro]
                communication.append((max(s["begin"] for s in these), min(s["end"] for s in these)))
        communication = union(communication)
        wall = end - begin
        per_replica = []
        for r in replica_rows:
            own = [s for s in mine if s["row"] == r]
            busy = sum(s["end"] - s["begin"] for s in own if s["name"] in COMPUTE)
            exchange = [(s["begin"], s["end"]) for s in own if s["name"] in EXCHANGE]
            in_exchange = length(exchange)
            communicating = intersection(exchange, communication)
            per_replica.append({"replica": rows[r], "compute_us": busy, "waiting_us": in_exchange - communicating,
                                "communicating_us": communicating,
                                "idle_us": max(0.0, wall - busy - in_exchange)})
        steps.append({"step": step, "micro_batches": len({s["micro"] for s in mine}), "wall_us": wall,
                      "communication_us": length(communication),
                      "overlap_us": intersection(communication, compute),
                      "bytes": step_bytes(make_record, run, step), "replicas": per_replica})
    return {"trace": path, "run": run, "steps": steps}


def median_of(steps, key):
    return statistics.median(s[key] for s in steps)


def print_report(r):
    run = r["run"]
    if run:
        accumulate = (f" x {run['accumulate']} micro-batches" if run["accumulate"] > 1 else "")
        print(f"{r['trace']}: --strategy {run['strategy']}, {run['replicas']} replica(s) in this trace of "
              f"{run['world_replicas']} in {run['processes']} process(es), batch {run['batch_size']}{accumulate}")
    else:
        print(f"{r['trace']}: (no run settings in the trace: bytes not computed)")
    for s in r["steps"]:
        total = "?" if s["bytes"] is None else f"{sum(s['bytes'].values()):,}"
        micro = f", {s['micro_batches']} micro-batches" if s["micro_batches"] > 1 else ""
        print(f"step {s['step']}{micro}: wall {s['wall_us']:.1f} us, communication {s['communication_us']:.1f} us, "
              f"overlap with computation {s['overlap_us']:.1f} us, {total} bytes between replicas")
        if s["bytes"]:
            print("  bytes: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in s["bytes"].items()))
        for p in s["replicas"]:
            print(f"  {p['replica']}: compute {p['compute_us']:.1f}, waiting {p['waiting_us']:.1f}, "
                  f"communicating {p['communicating_us']:.1f}, idle {p['idle_us']:.1f} us")
    later = r["steps"][1:] or r["steps"]
    print(f"median over steps {later[0]['step']} to {later[-1]['step']} (the first step, which warms up, left "
          f"out where there are more): wall {median_of(later, 'wall_us'):.1f} us, communication "
          f"{median_of(later, 'communication_us'):.1f} us, overlap {median_of(later, 'overlap_us'):.1f} us")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    a = parser.parse_args()
    try:
        r = report(a.trace)
    except TraceError as e:
        sys.exit(f"trace_report.py: {e}")
    try:
        if a.json:
            print(json.dumps(r))
        else:
            print_report(r)
    except BrokenPipeError:  # a reader that stopped early (head)
        sys.stderr.close()


if __name__ == "__main__":
    main()
