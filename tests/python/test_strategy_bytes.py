#!/usr/bin/python3
"""The bytes each strategy copies between replicas in a step (strategy_bytes in bench/make_record.py), against
figures worked out by hand from the model's sizes: 203,530 parameters, a gradient buffer of 203,531 floats
with the loss slot, 10 classes, uint8 labels, and torch.chunk's shards. Then bench/make_record.py strategies on
a made-up bench/strategies.sh run: the record carries those bytes and what bench/results_tables.py shows.

    test_strategy_bytes.py --script bench/make_record.py
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

# By hand. The all-reduce: 2 (N-1) gradient buffers of 203,531 x 4 = 814,124 bytes. DataParallel: (N-1)
# parameter sets of 203,530 x 4 = 814,120 bytes broadcast and as many gradients reduced; replicas 1..N-1's rows
# R gathered as 40 bytes of logits and 1 byte of label each, and scattered back as 40 bytes of d(logits).
HAND = {
    # replicas: (shards of 64, all-reduce, broadcast, logits, labels, d(logits), reduce, DataParallel's total)
    1: ([64], 0, 0, 0, 0, 0, 0, 0),
    2: ([32, 32], 1_628_248, 814_120, 1_280, 32, 1_280, 814_120, 1_630_832),
    3: ([22, 22, 20], 3_256_496, 1_628_240, 1_680, 42, 1_680, 1_628_240, 3_259_882),
    4: ([16, 16, 16, 16], 4_884_744, 2_442_360, 1_920, 48, 1_920, 2_442_360, 4_888_608),
    8: ([8] * 8, 11_397_736, 5_698_840, 2_240, 56, 2_240, 5_698_840, 11_402_216),
}


def load(script):
    spec = importlib.util.spec_from_file_location("make_record", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    a = parser.parse_args()
    script = os.path.abspath(a.script)
    mr = load(script)
    failures = []

    def expect(what, got, want):
        if got != want:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    for n, (shards, ar, bc, lg, lb, dl, rd, total) in HAND.items():
        b = mr.strategy_bytes(n)
        expect(f"{n} replicas: shards", b["shards"], shards)
        expect(f"{n} replicas: all-reduce", b["allreduce"], {"gradients": ar, "total": ar})
        expect(f"{n} replicas: DataParallel", b["dataparallel"],
               {"parameters_broadcast": bc, "logits_gathered": lg, "labels_gathered": lb, "dlogits_scattered": dl,
                "gradients_reduced": rd, "total": total})
    # Short batches, as torch.chunk splits them: 5 rows over 4 replicas, 2, 2, 1, 0 (3 rows off device 0);
    # 32 over 3, 11, 11, 10 (21 rows).
    expect("5 over 4: shards", mr.shard_sizes(5, 4), [2, 2, 1, 0])
    expect("5 over 4: logits", mr.strategy_bytes(4, batch=5)["dataparallel"]["logits_gathered"], 120)
    expect("5 over 4: labels", mr.strategy_bytes(4, batch=5)["dataparallel"]["labels_gathered"], 3)
    expect("32 over 3: shards", mr.shard_sizes(32, 3), [11, 11, 10])
    expect("32 over 3: d(logits)", mr.strategy_bytes(3, batch=32)["dataparallel"]["dlogits_scattered"], 840)
    expect("32 over 3: all-reduce (no row count in it)", mr.strategy_bytes(3, batch=32)["allreduce"]["total"],
           3_256_496)
    try:
        mr.shard_sizes(64, 0)
        failures.append("0 replicas: no error")
    except ValueError:
        pass

    # A made-up run: the record has the bytes, copies the plot, and bench/results_tables.py shows it.
    with tempfile.TemporaryDirectory() as folder:
        raw, rec_dir = os.path.join(folder, "raw"), os.path.join(folder, "2026-01-01_strategies_cpu_test")
        os.makedirs(raw)
        training = [{"name": f"{s}-{n}", "strategy": s, "replicas": n, "placement": f"{n} CPU threads",
                     "shared_by": "in-process sum over host buffers" if s == "allreduce" else "DataParallel's copies",
                     "oversubscribed": n > 2, "median_us_per_step": 100.0 * n + (5 if s == "dataparallel" else 0),
                     "us_per_step": [100.0 * n], "steps": 10, "load_before": [0.5]}
                    for n in [1, 2, 3] for s in ["allreduce", "dataparallel"]]
        results = {"command": "bench/strategies.sh --replicas '1 2 3'", "date": "2026-01-01T00:00:00Z",
                   "commit": "abc1234", "device": "cpu", "emulated": False,
                   "machine": {"cpu_model": "test CPU", "nproc": 2, "host": "test", "gpu": "", "gpus": 0,
                               "load_average_1min_before": 0.5, "load_average_1min_after": 0.6,
                               "matrix_products": "matrix products in AVX2"},
                   "options": {"steps": 10, "rounds": 1, "replicas": [1, 2, 3], "batch": 64, "data": "x",
                               "build": "build/default"},
                   "bytes_convention": "bytes between replicas", "training": training,
                   "runs": []}
        with open(os.path.join(raw, "results.json"), "w") as f:
            json.dump(results, f)
        with open(os.path.join(raw, "strategies.png"), "wb") as f:
            f.write(b"\x89PNG\r\n")
        out = subprocess.run([sys.executable, script, "strategies", raw, rec_dir], capture_output=True, text=True)
        expect("make_record.py strategies: status", (out.returncode, out.stderr), (0, ""))
        if out.returncode == 0:
            with open(os.path.join(rec_dir, "record.json")) as f:
                record = json.load(f)
            st = record["figures"]["strategies"]
            expect("record: bytes for 3 replicas", st["bytes"][2]["dataparallel"]["total"], 3_259_882)
            expect("record: machine", record["machine"], {"host": "test", "cpu": "test CPU", "cpus": 2, "gpu": ""})
            expect("record: the plot beside it", os.path.exists(os.path.join(rec_dir, "strategies.png")), True)
            tables = os.path.join(os.path.dirname(script), "results_tables.py")
            shown = subprocess.run([sys.executable, tables, "--show", rec_dir], capture_output=True, text=True)
            expect("results_tables.py --show: status", (shown.returncode, shown.stderr), (0, ""))
            expect("results_tables.py --show: the 3-replica row", "| 3 (oversubscribed) | 300.0 | 305.0 | 1.02 | "
                   "3,256,496 | 3,259,882 |" in shown.stdout, True)

    for f in failures:
        print(f"FAILED: {f}")
    print(f"test_strategy_bytes.py: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
