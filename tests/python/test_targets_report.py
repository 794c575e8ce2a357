#!/usr/bin/python3
"""bench/targets_report.py on made-up benchmark folders and session reports: each verdict follows from the
figures, and a missing figure is "not measured", never met.

    test_targets_report.py --script bench/targets_report.py
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def variant(name, us):
    return {"variant": name, "steps_per_epoch": 938, "step_us": {"median_us": us, "p10_us": us, "p90_us": us},
            "epoch_ms": {"median_ms": us * 938 / 1e3, "p10_ms": 0, "p90_ms": 0}}


def epoch_run(us_by_variant, same=True, tf32=False):
    return {"gemm": "cublas" if tf32 else "slab", "tf32": tf32, "device": {"name": "test GPU"}, "rounds": 2,
            "repeats": 10, "same_parameters": same,
            "variants": [variant(n, us) for n, us in us_by_variant.items()]}


def row(name, ms, accuracy=0.84, status="ok"):
    return {"name": name, "status": status, "seconds_per_epoch": ms / 1e3, "final_test_accuracy": accuracy}


def run(script, files, session=False):
    """The report on a folder of these files; with session, session.json stands for compare.json (--session)."""
    with tempfile.TemporaryDirectory() as folder:
        for path, content in files.items():
            os.makedirs(os.path.dirname(os.path.join(folder, path)) or folder, exist_ok=True)
            with open(os.path.join(folder, path), "w") as f:
                json.dump(content, f)
        extra = ["--session", os.path.join(folder, "session.json")] if session else []
        out = subprocess.run([sys.executable, script, folder] + extra, capture_output=True, text=True, check=True)
        return out.stdout


def path_run(name, epoch_ms, accuracy=0.84, exit_status=0):
    """A training path of a scripts/gpu-session.sh run: three epochs, the first slower (start-up)."""
    return {"name": name, "exit": exit_status, "test_accuracy": accuracy,
            "epoch_s": [epoch_ms * 3 / 1e3, epoch_ms / 1e3, epoch_ms / 1e3]}


def peer_run(epoch_ms):
    return {"epoch_s": [epoch_ms * 5 / 1e3, epoch_ms / 1e3, epoch_ms / 1e3], "test_accuracy": 0.84}


def target_line(text, start):
    lines = [l for l in text.splitlines() if l.startswith("| " + start)]
    assert len(lines) == 1, (start, text)
    return lines[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    script = parser.parse_args().script
    failures = []

    def expect(what, text, start, verdict):
        line = target_line(text, start)
        if not line.rstrip().endswith(f"| {verdict} |"):
            failures.append(f"{what}: expected '{verdict}' in: {line}")

    # Everything met: 8 us a step; 9 ms an epoch against eager's 100 and graphs' 30.
    met = run(script, {
        "epoch-slab.json": epoch_run({"plain": 30.0, "fused-step+pdl": 8.0}),
        "epoch-cublas-tf32.json": epoch_run({"plain": 5.0}, tf32=True),  # faster, but not the plain bits
        "compare/compare.json": {"rows": [row("mnistdp-cuda-blocked", 30), row("mnistdp-cuda-slab-fused-pdl", 9),
                                          row("pytorch-tensor", 100), row("pytorch-graphs", 30),
                                          row("pytorch-compile", 40)]}})
    expect("all met", met, "at most 10 us", "met")
    expect("all met", met, "at least 10x", "met")
    expect("all met", met, "at least 3x", "met")
    expect("all met", met, "the plain path's final accuracy", "met")
    expect("all met", met, "the plain path's parameters", "met")
    if "8.00 us/step, fused-step+pdl" not in met:
        failures.append("the fastest variant with the plain bits is named, TF32 left out:\n" + met)

    # Each missed: 12 us a step; 12 ms against 100 (8.3x) and 30 (2.5x); another accuracy; a differing run.
    missed = run(script, {
        "epoch-slab.json": epoch_run({"plain": 30.0, "fused-step+pdl": 12.0}, same=False),
        "compare/compare.json": {"rows": [row("mnistdp-cuda-blocked", 30, 0.84),
                                          row("mnistdp-cuda-slab-fused-pdl", 12, 0.83),
                                          row("pytorch-tensor", 100), row("pytorch-graphs", 30)]}})
    expect("missed", missed, "at most 10 us", "NOT met")
    expect("missed", missed, "at least 10x", "NOT met")
    expect("missed", missed, "at least 3x", "NOT met")
    expect("missed", missed, "the plain path's final accuracy", "NOT met")
    expect("missed", missed, "the plain path's parameters", "NOT met")

    # From a scripts/gpu-session.sh run: 9 ms against eager's 100 and graphs' 30 (met); TF32's 5 ms left out. The
    # first epoch of each is slower and must not count.
    session = run(script, {
        "epoch-slab.json": epoch_run({"plain": 30.0, "fused-step+pdl": 8.0}),
        "session.json": {"figures": {
            "train": [path_run("plain", 30), path_run("fast-path", 9), path_run("tf32", 5, 0.83),
                      path_run("cpu", 1)],
            "pytorch": {"tensor": peer_run(100), "graphs": peer_run(30), "compile": peer_run(40)}}}}, session=True)
    for start in ("at least 10x", "at least 3x", "the plain path's final accuracy"):
        expect("session, met", session, start, "met")
    if "mnistdp-cuda-fast-path 9.00 ms" not in session:
        failures.append("the session's fastest path (TF32 and the CPU left out) is named:\n" + session)
    # The same run, the fast path at 12 ms with another accuracy: missed.
    session_missed = run(script, {
        "session.json": {"figures": {
            "train": [path_run("plain", 30), path_run("fast-path", 12, 0.83)],
            "pytorch": {"tensor": peer_run(100), "graphs": peer_run(30)}}}}, session=True)
    for start in ("at least 10x", "at least 3x", "the plain path's final accuracy"):
        expect("session, missed", session_missed, start, "NOT met")

    # Nothing measured: an empty folder, and peers that failed.
    empty = run(script, {"compare/compare.json": {"rows": [row("pytorch-graphs", 30, status="failed")]}})
    for start in ("at most 10 us", "at least 10x", "at least 3x", "the plain path's final accuracy",
                  "the plain path's parameters"):
        expect("nothing measured", empty, start, "not measured")

    for f in failures:
        print("FAILED:", f)
    print(f"{'ok' if not failures else 'FAILED'}: {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
