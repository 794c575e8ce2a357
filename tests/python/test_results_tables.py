#!/usr/bin/python3
"""bench/results_tables.py --check on the repository's records and docs (they agree), and on copies of them with one
thing changed each (a record's figure, a doc's figure, a cited path, a raw file in bench/results/, a record without
its commit): each is caught, and --write puts the doc's table back. Then bench/make_record.py on a made-up
compare.sh run: the record has what --check asks of one.

    test_results_tables.py --script bench/results_tables.py --root .
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run(script, root, *args):
    out = subprocess.run([sys.executable, script, "--root", root, *args], capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


def copy_tree(root, to):
    """The docs and the records: what --check reads."""
    for rel in ["README.md", os.path.join("bench", "README.md")]:
        os.makedirs(os.path.dirname(os.path.join(to, rel)) or to, exist_ok=True)
        shutil.copy(os.path.join(root, rel), os.path.join(to, rel))
    for rel in ["docs", os.path.join("bench", "results")]:
        shutil.copytree(os.path.join(root, rel), os.path.join(to, rel))
    for folder, _, files in os.walk(os.path.join(root, "host")):
        if "README.md" in files:
            rel = os.path.relpath(os.path.join(folder, "README.md"), root)
            os.makedirs(os.path.dirname(os.path.join(to, rel)), exist_ok=True)
            shutil.copy(os.path.join(root, rel), os.path.join(to, rel))


def edit(path, change):
    with open(path) as f:
        text = f.read()
    new = change(text)
    assert new != text, f"{path}: nothing changed"
    with open(path, "w") as f:
        f.write(new)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("--root", required=True)
    a = parser.parse_args()
    script, root = os.path.abspath(a.script), os.path.abspath(a.root)
    make_record = os.path.join(os.path.dirname(script), "make_record.py")
    failures = []

    def expect(what, rc, out, status, *texts):
        if rc != status or not all(t in out for t in texts):
            failures.append(f"{what}: expected status {status} and {texts}, got {rc}:\n{out}")

    # The repository as it is: every table agrees with its records, every cited path exists.
    rc, out = run(script, root, "--check")
    expect("the repository", rc, out, 0, "the docs agree with the records")
    rc, out = run(script, root)
    expect("printing the tables", rc, out, 0, "<!-- results-table: cpu-a0b2634-readme -->")

    record = os.path.join("bench", "results", "2026-12-04_cpu_vm-xeon_a0b2634", "record.json")
    with tempfile.TemporaryDirectory() as tmp:
        # A record's figure changed: the tables built from it differ from the docs.
        t = os.path.join(tmp, "figure")
        copy_tree(root, t)
        edit(os.path.join(t, record), lambda s: s.replace('"seconds_per_epoch": 0.25342338', '"seconds_per_epoch": 0.26'))
        rc, out = run(script, t, "--check")
        expect("a record's figure changed", rc, out, 1, "results-table cpu-a0b2634-readme differs",
               "results-table cpu-xeon-a0b2634-bd297b0 differs")

        # A doc's figure changed: caught, and --write puts the table back as the records say.
        t = os.path.join(tmp, "doc")
        copy_tree(root, t)
        edit(os.path.join(t, "README.md"), lambda s: s.replace("0.253 s/epoch (1.27x the floor)", "0.250 s/epoch (1.27x the floor)"))
        rc, out = run(script, t, "--check")
        expect("a doc's figure changed", rc, out, 1, "README.md:", "results-table cpu-a0b2634-readme differs",
               "0.250 s/epoch")
        rc, out = run(script, t, "--write")
        expect("--write", rc, out, 0, "rewrote the tables of README.md")
        with open(os.path.join(t, "README.md")) as f, open(os.path.join(root, "README.md")) as g:
            if f.read() != g.read():
                failures.append("--write did not give back the repository's README.md")
        rc, out = run(script, t, "--check")
        expect("after --write", rc, out, 0, "the docs agree with the records")

        # A table's marker removed: the table is no longer checked, and --check says so.
        t = os.path.join(tmp, "marker")
        copy_tree(root, t)
        edit(os.path.join(t, "docs", "emulation.md"), lambda s: s.replace("<!-- results-table: emulated-step -->\n", ""))
        rc, out = run(script, t, "--check")
        expect("a marker removed", rc, out, 1, "no <!-- results-table: emulated-step --> line")

        # A plot the docs show is missing, and a record folder they cite is gone.
        t = os.path.join(tmp, "paths")
        copy_tree(root, t)
        os.remove(os.path.join(t, "bench", "results", "2026-11-30_cpu_vm", "loss.png"))
        shutil.rmtree(os.path.join(t, "bench", "results", "2026-12-01_emulated_vm"))
        rc, out = run(script, t, "--check")
        expect("cited paths missing", rc, out, 1, "cites ../bench/results/2026-11-30_cpu_vm/loss.png, which does not exist",
               "cites bench/results/2026-12-01_emulated_vm/, which does not exist")

        # A raw file beside a record, and a record without its commit.
        t = os.path.join(tmp, "raw")
        copy_tree(root, t)
        with open(os.path.join(t, "bench", "results", "2026-11-30_fuzz", "run.log"), "w") as f:
            f.write("a log\n")
        edit(os.path.join(t, "bench", "results", "2026-11-30_fuzz", "record.json"),
             lambda s: s.replace('"commit": "c763510"', '"commit": ""'))
        rc, out = run(script, t, "--check")
        expect("a raw file and an empty commit", rc, out, 1,
               "bench/results/2026-11-30_fuzz/run.log: neither a record nor a plot a doc shows",
               "2026-11-30_fuzz/record.json: the date, the commit or the commands are empty")

        # bench/make_record.py on a made-up compare.sh run: a well-formed record that --show reads.
        raw = os.path.join(tmp, "run")
        os.makedirs(raw)
        epochs = [{"event": "epoch", "epoch": e, "seconds": 0.3 - 0.01 * e, "steps": 938, "samples": 60000,
                   "test_accuracy": 0.8, "complete": True} for e in range(3)]
        row = {"name": "mnistdp-cpu", "label": "mnist-dp, cpu (test)", "status": "ok", "rounds": [epochs],
               "loss": [], "epochs": epochs, "seconds_per_epoch": 0.285, "epochs_in_median": 2,
               "steps_per_epoch": 938, "samples_per_second": 60000 / 0.285, "us_per_step": 0.285 / 938 * 1e6,
               "final_test_accuracy": 0.8, "gflops": 150.0, "time_over_mnistdp": 1.0, "load_at_start": [0.5]}
        machine = {"date": "2026-01-01T00:00:00Z", "host": "test", "cpu": "Test CPU", "cpus": 4,
                   "cpu_flags_avx512f": False, "openblas_core": "Haswell", "openblas_coretype_env": "",
                   "device": "cpu", "gpu": "", "driver": "", "commit": "abc1234", "epochs": 3, "threads": 1,
                   "data": "/data", "python": "3", "torch": "1", "rounds": 1, "torch2": "",
                   "load_average_before": 0.5, "load_average_after": 0.6}
        with open(os.path.join(raw, "compare.json"), "w") as f:
            json.dump({"machine": machine, "headline": "median epoch time over the epochs after the first",
                       "base": "mnistdp-cpu", "rows": [row]}, f)
        made = os.path.join(tmp, "records", "2026-01-01_cpu_test")
        out = subprocess.run([sys.executable, make_record, "compare", raw, made, "--command", "bench/compare.sh"],
                             capture_output=True, text=True)
        expect("make_record.py", out.returncode, out.stdout + out.stderr, 0, "wrote")
        with open(os.path.join(made, "record.json")) as f:
            rec = json.load(f)
        want = {"record": 1, "name": "2026-01-01_cpu_test", "date": "2026-01-01T00:00:00Z", "commit": "abc1234",
                "commands": ["bench/compare.sh"]}
        for k, v in want.items():
            if rec.get(k) != v:
                failures.append(f"make_record.py: {k} is {rec.get(k)!r}, not {v!r}")
        if rec["machine"].get("cpu") != "Test CPU" or "loss" in json.dumps(rec):
            failures.append(f"make_record.py: the machine, or loss points kept: {rec['machine']}")
        if rec["figures"]["compare"]["rows"][0]["epoch_seconds"] != [[e["seconds"] for e in epochs]]:
            failures.append("make_record.py: the epochs' seconds are not the run's")
        out = subprocess.run([sys.executable, script, "--show", made], capture_output=True, text=True)
        expect("--show", out.returncode, out.stdout + out.stderr, 0,
               "| mnist-dp, cpu (test) | 0.285 | 210,526 | 303.8 | 150.0 | | 80.00% | 1.00 |")

    for f in failures:
        print(f"FAIL {f}")
    print(f"{'FAILED' if failures else 'passed'}: bench/results_tables.py and bench/make_record.py")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
