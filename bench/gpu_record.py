#!/usr/bin/env python3
"""Records one scripts/gpu-session.sh run: the files it left in $OUT (fetched from the device machine) become
bench/results/DATE_h200_COMMIT/record.json, and the docs' GPU tables (README.md, docs/benchmarks.md,
docs/gpu-run.md) are rebuilt from the newest such record (bench/results_tables.py --write, then --check).

    bench/gpu_record.py DIR [--root REPO] [--emulated-rehearsal]

DIR holds session.json (and summary.md, logs.tar.gz, which stay where they are: bench/results/ keeps records
only). A run on emulated devices (scripts/gpu-session.sh --emulated) is refused unless --emulated-rehearsal is
given, and is then named DATE_emu_COMMIT and labelled a rehearsal in every table: it checks this script, and is
never a GPU result. Standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_record  # noqa: E402  (the records' JSON layout)

SESSION_KEYS = ["session", "mode", "emulated", "commit", "started", "machine", "phases", "figures"]


def fail(message):
    print(f"gpu_record.py: {message}", file=sys.stderr)
    sys.exit(1)


def read_session(folder):
    path = os.path.join(folder, "session.json")
    try:
        with open(path) as f:
            session = json.load(f)
    except OSError as e:
        fail(f"{path}: cannot read it ({e.strerror}); DIR must be a scripts/gpu-session.sh run's $OUT")
    except ValueError as e:
        fail(f"{path}: not JSON ({e})")
    missing = [k for k in SESSION_KEYS if k not in session]
    if missing:
        fail(f"{path}: no {', '.join(missing)}: not a scripts/gpu-session.sh report")
    if session["session"] != 1:
        fail(f"{path}: format {session['session']}, this script reads 1")
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", session["started"]):
        fail(f"{path}: started {session['started']!r} is not a UTC time")
    return session


def record_name(session):
    date = session["started"][:10]
    commit = session["commit"].replace("+dirty", "-dirty")
    if session["emulated"]:
        return f"{date}_emu_{commit}"
    gpu = session["machine"].get("gpu", "")
    if "H200" not in gpu:
        fail(f"the run's GPU is {gpu or 'not named'}: this script records H200 runs (name them by hand otherwise)")
    return f"{date}_h200_{commit}"


def make(session, name):
    machine = dict(session["machine"])
    machine.setdefault("host", "")
    machine.setdefault("cpu", "")
    machine.setdefault("cpus", 0)
    machine["gpu"] = "" if session["emulated"] else machine.get("gpu", "")
    command = "scripts/gpu-session.sh" + (" --emulated" if session["emulated"] else "")
    title = ("a rehearsal of the GPU run on emulated devices (no GPU result)" if session["emulated"]
             else "the GPU run: build, GPU tests, every training path, compute-sanitizer, benchmarks, PyTorch")
    figures = {k: session[k] for k in ["mode", "emulated", "phases"]}
    figures.update(session["figures"])
    figures["seconds"] = session.get("seconds")
    notes = [f"{p['name']}: {p['result']} ({p['detail']})" for p in session["phases"]
             if p["result"] not in ("passed",)]
    record = {"record": make_record.FORMAT, "name": name, "title": title, "date": session["started"],
              "commit": session["commit"], "machine": machine, "commands": [command],
              "figures": {"gpu_session": figures}}
    if notes:
        record["notes"] = notes
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="the run's $OUT: session.json, summary.md, logs.tar.gz")
    parser.add_argument("--root", default=os.path.dirname(HERE), help="the repository to record into")
    parser.add_argument("--emulated-rehearsal", action="store_true",
                        help="accept a run on emulated devices (to check this script; never a GPU result)")
    args = parser.parse_args()
    session = read_session(args.dir)
    if session["emulated"] and not args.emulated_rehearsal:
        fail(f"{args.dir}: a run on emulated devices is no GPU result; --emulated-rehearsal records it "
             "(into a copy of the repository, to check this script)")
    name = record_name(session)
    folder = os.path.join(args.root, "bench", "results", name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "record.json"), "w") as f:
        f.write(make_record.dumps(make(session, name)) + "\n")
    print(f"gpu_record.py: wrote {os.path.relpath(folder, args.root)}/record.json")
    tables = os.path.join(HERE, "results_tables.py")
    for step in ("--write", "--check"):
        done = subprocess.run([sys.executable, tables, step, "--root", args.root])
        if done.returncode != 0:
            fail(f"bench/results_tables.py {step} failed (above)")
    print("gpu_record.py: the GPU tables of README.md, docs/benchmarks.md and docs/gpu-run.md are the record's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
