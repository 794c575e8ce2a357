#!/usr/bin/python3
"""bench/trace_report.py against traces whose answers are worked out by hand, then on real traces of
`mnist-dp train --trace` (both strategies, with accumulation) where what must hold is checked: every
replica's computation, waiting, communication and idle time add up to the step's wall time, and the bytes
are the hand figures of tests/python/test_strategy_bytes.py.

    test_trace_report.py --script bench/trace_report.py [--mnist-dp BUILD/mnist-dp --data DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

FAILURES = []


def check(what, ok):
    print(f"{'ok' if ok else 'FAILED'}: {what}")
    if not ok:
        FAILURES.append(what)


def span(name, row, begin, end, step, micro=None):
    args = {"step": step}
    if micro is not None:
        args["micro-batch"] = micro
    return {"name": name, "cat": "step", "ph": "X", "pid": 0, "tid": row, "ts": begin, "dur": end - begin,
            "args": args}


def row(tid, name):
    return {"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}


def run_report(script, trace, folder, name):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        json.dump(trace, f)
    out = subprocess.run([sys.executable, script, path, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"trace_report.py failed on {name}: {out.stderr}")
    text = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    check(f"{name}: the text report prints", text.returncode == 0 and "step 7" in text.stdout)
    return json.loads(out.stdout)


def by_hand(script, folder):
    # The all-reduce, two replicas, step 7 of a run of 100 rows in batches of 64 (step 7 is an epoch's
    # second: 36 rows). Replica 0 computes 0-40, enters the all-reduce at 40; replica 1 computes 0-60 and
    # enters at 60; the collective runs from 60 (the last entry) to 70 (the first exit); both then step
    # 70-80 and 72-80. Replica 0 starts its step at 0, replica 1 also at 0.
    trace = {"traceEvents": [row(0, "replica 0 (cpu:0)"), row(1, "replica 1 (cpu:1)"),
                             span("gather", 0, 0, 10, 7), span("forward", 0, 10, 20, 7),
                             span("loss", 0, 20, 25, 7), span("backward", 0, 25, 40, 7),
                             span("all-reduce", 0, 40, 70, 7), span("sgd", 0, 70, 80, 7),
                             span("gather", 1, 0, 10, 7), span("forward", 1, 10, 30, 7),
                             span("loss", 1, 30, 35, 7), span("backward", 1, 35, 60, 7),
                             span("all-reduce", 1, 60, 72, 7), span("sgd", 1, 72, 80, 7)],
             "mnist_dp": {"strategy": "allreduce", "first_step": 7, "replicas": 2, "world_replicas": 2,
                          "processes": 1, "batch_size": 64, "accumulate": 1, "train_count": 100}}
    r = run_report(script, trace, folder, "allreduce.json")
    (s,) = r["steps"]
    check("all-reduce: wall 80", s["wall_us"] == 80)
    check("all-reduce: the collective from the last entry (60) to the first exit (70)", s["communication_us"] == 10)
    check("all-reduce: no computation during the collective", s["overlap_us"] == 0)
    check("all-reduce: one gradient buffer exchange, 2 x 814,124 bytes", s["bytes"] == {"gradients": 1_628_248})
    r0, r1 = s["replicas"]
    check("replica 0: compute 40 + 10", r0["compute_us"] == 50)
    check("replica 0: waits 40-60, communicates 60-70, idle 0",
          (r0["waiting_us"], r0["communicating_us"], r0["idle_us"]) == (20, 10, 0))
    check("replica 1: compute 60 + 8, waits 2 (70-72, after the collective), communicates 10, idle 0",
          (r1["compute_us"], r1["waiting_us"], r1["communicating_us"], r1["idle_us"]) == (68, 2, 10, 0))

    # DataParallel, two replicas, accumulate 2 of batch 16 (step 7: rows 224-255 of 1000, two micro-batches of
    # 16: 8 rows each to replica 1). Device 0's copies overlap replica 1's backward for 5 us in micro-batch 0.
    events = [row(0, "replica 0 (cpu:0)"), row(1, "replica 1 (cpu:1)"),
              row(2, "device 0's copies (nn.DataParallel)")]
    for m, t0 in ((0, 0), (1, 100)):
        events += [span("gather", 0, t0, t0 + 10, 7, m), span("forward", 0, t0 + 10, t0 + 20, 7, m),
                   span("to device 0 and back (gather, loss, scatter)", 0, t0 + 20, t0 + 40, 7, m),
                   span("backward", 0, t0 + 40, t0 + 60, 7, m),
                   span("reduce onto device 0", 0, t0 + 60, t0 + 90, 7, m),
                   span("gather", 1, t0, t0 + 10, 7, m), span("forward", 1, t0 + 10, t0 + 20, 7, m),
                   span("to device 0 and back (gather, loss, scatter)", 1, t0 + 20, t0 + 40, 7, m),
                   span("backward", 1, t0 + 40, t0 + 70, 7, m),
                   span("reduce onto device 0", 1, t0 + 70, t0 + 90, 7, m),
                   span("broadcast parameters", 2, t0, t0 + 5, 7, m), span("gather logits", 2, t0 + 20, t0 + 25, 7, m),
                   span("loss on device 0", 2, t0 + 25, t0 + 30, 7, m),
                   span("scatter d(logits)", 2, t0 + 30, t0 + 35, 7, m),
                   span("reduce gradients", 2, t0 + 65 if m == 0 else t0 + 70, t0 + 85, 7, m)]
    events.append(span("sgd", 0, 190, 200, 7, 1))
    events.append(span("sgd", 1, 190, 190, 7, 1))
    trace = {"traceEvents": events,
             "mnist_dp": {"strategy": "dataparallel", "first_step": 7, "replicas": 2, "world_replicas": 2,
                          "processes": 1, "batch_size": 16, "accumulate": 2, "train_count": 1000}}
    r = run_report(script, trace, folder, "dataparallel.json")
    (s,) = r["steps"]
    check("DataParallel: two micro-batches", s["micro_batches"] == 2)
    check("DataParallel: wall 200", s["wall_us"] == 200)
    # Copies: 5 + 5 + 5 + 20 in micro-batch 0, 5 + 5 + 5 + 15 in micro-batch 1.
    check("DataParallel: communication is device 0's copies, 65 us", s["communication_us"] == 65)
    # Replica 0's gather and broadcast overlap (0-5, 100-105); device 0's loss lies between gather logits and
    # scatter; replica 1's backward (40-70) overlaps reduce gradients 65-70 in micro-batch 0.
    check("DataParallel: overlap 5 + 5 + 5 us", s["overlap_us"] == 15)
    check("DataParallel: the copies of each micro-batch",
          s["bytes"] == {"parameters_broadcast": 1_628_240, "logits_gathered": 640, "labels_gathered": 16,
                         "dlogits_scattered": 640, "gradients_reduced": 1_628_240})
    r0, r1 = s["replicas"]
    check("DataParallel replica 0: computation, exchange and idle add up to the wall",
          abs(r0["compute_us"] + r0["waiting_us"] + r0["communicating_us"] + r0["idle_us"] - 200) < 1e-9)
    check("DataParallel replica 1: the same", abs(r1["compute_us"] + r1["waiting_us"] + r1["communicating_us"]
                                                  + r1["idle_us"] - 200) < 1e-9)


def real(script, mnist_dp, data, folder):
    runs = {"allreduce": ["--replicas", "2"],
            "allreduce-accumulate": ["--replicas", "2", "--batch-size", "32", "--accumulate", "2"],
            "dataparallel-accumulate": ["--replicas", "3", "--strategy", "dataparallel", "--batch-size", "32",
                                        "--accumulate", "2"],
            "zero1": ["--replicas", "2", "--strategy", "zero1", "--momentum", "0.9"]}
    for name, options in runs.items():
        path = os.path.join(folder, name + ".trace.json")
        subprocess.run([mnist_dp, "train", "--device", "cpu", "--data", data, "--no-progress", "--epochs", "1",
                        "--max-steps", "6", "--trace", path, "--trace-steps", "4"] + options,
                       check=True, stdout=subprocess.DEVNULL)
        out = subprocess.run([sys.executable, script, path, "--json"], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        check(f"{name}: four steps reported", [s["step"] for s in r["steps"]] == [0, 1, 2, 3])
        for s in r["steps"]:
            for p in s["replicas"]:
                parts = p["compute_us"] + p["waiting_us"] + p["communicating_us"] + p["idle_us"]
                check(f"{name}, step {s['step']}, {p['replica']}: the parts add up to the wall "
                      f"({parts:.3f} against {s['wall_us']:.3f})", abs(parts - s["wall_us"]) < 1e-3 * s["wall_us"])
            check(f"{name}, step {s['step']}: overlap within the communication",
                  0 <= s["overlap_us"] <= s["communication_us"] + 1e-9)
        if name == "zero1":
            # 2 x (203,530 + 2) floats in, the shards and the loss slot; 203,530 floats out: 2 (N-1) buffers.
            check(f"{name}: the all-reduce's bytes in two halves",
                  all(s["bytes"] == {"gradients_reduce_scattered": 814_128, "parameters_all_gathered": 814_120}
                      for s in r["steps"]))
            check(f"{name}: the collectives take time", all(s["communication_us"] > 0 for s in r["steps"]))
            check(f"{name}: the collectives' row is not a replica", len(r["steps"][0]["replicas"]) == 2)
        elif name.startswith("allreduce"):
            check(f"{name}: 2 (N-1) gradient buffers a step, whatever the micro-batches",
                  all(s["bytes"] == {"gradients": 1_628_248} for s in r["steps"]))
        else:
            # Micro-batches of 32 over 3 replicas: 11, 11, 10, so 21 rows of replicas 1 and 2, twice a step.
            check(f"{name}: DataParallel's copies twice a step",
                  all(s["bytes"] == {"parameters_broadcast": 3_256_480, "logits_gathered": 1_680,
                                     "labels_gathered": 42, "dlogits_scattered": 1_680,
                                     "gradients_reduced": 3_256_480} for s in r["steps"]))
            check(f"{name}: two micro-batches a step", all(s["micro_batches"] == 2 for s in r["steps"]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("--mnist-dp")
    parser.add_argument("--data")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        by_hand(a.script, folder)
        if a.mnist_dp:
            real(a.script, a.mnist_dp, a.data, folder)
        bad = os.path.join(folder, "bad.json")
        with open(bad, "w") as f:
            f.write("{")
        out = subprocess.run([sys.executable, a.script, bad], capture_output=True, text=True)
        check("a file that is not JSON is named, with a non-zero exit",
              out.returncode != 0 and bad in out.stderr and "not JSON" in out.stderr)
    print(f"{len(FAILURES)} failed")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
