#!/usr/bin/env python3
"""The PTX checks (check_ptx.py) fail on PTX that breaks them: each case mutates the real PTX of the fused
step's kernels one way and expects exit status 1 and the reason named.

Usage: test_check_ptx.py --script check_ptx.py FILE.ptx...
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def run(script, paths):
    return subprocess.run([sys.executable, script, *map(str, paths)], capture_output=True, text=True)


def mutated(paths, kernel, edit, work):
    """The PTX files with `edit` applied to the body of the first kernel whose name contains `kernel`."""
    out = []
    for i, path in enumerate(paths):
        text = Path(path).read_text()
        m = re.search(r"\.entry\s+\S*" + kernel + r"\S*\s*\(", text)
        if m:
            body_end = text.find(".entry", m.end())
            body_end = body_end if body_end >= 0 else len(text)
            text = text[: m.end()] + edit(text[m.end() : body_end]) + text[body_end:]
        copy = Path(work) / f"{i}.ptx"
        copy.write_text(text)
        out.append(copy)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("ptx", nargs="+")
    args = parser.parse_args()
    args.ptx = [p for arg in args.ptx for p in arg.split(";") if p]  # CMake's list, as check_ptx.py takes it

    cases = [
        ("a load through the read-only cache in the persistent kernel", "persistent_step_kernel",
         lambda body: body.replace("ld.global.f32", "ld.global.nc.f32", 1), "read-only cache"),
        ("a load before the head's wait", "classifier_head_kernel",
         lambda body: body.replace("griddepcontrol.wait;", "ld.global.u32 %r1, [%rd1];\n\tgriddepcontrol.wait;", 1),
         "before griddepcontrol.wait"),
        ("a store before the last kernel's wait", "weight_gradient_sgd_kernel",
         lambda body: body.replace("griddepcontrol.wait;", "st.global.u32 [%rd1], %r1;\n\tgriddepcontrol.wait;", 1),
         "before griddepcontrol.wait"),
        ("no wait in the first kernel", "gather_linear_kernel",
         lambda body: body.replace("griddepcontrol.wait;", "", 1), "no griddepcontrol.wait"),
    ]
    failures = 0
    baseline = run(args.script, args.ptx)
    if baseline.returncode != 0:
        print(f"FAIL the real PTX does not pass:\n{baseline.stdout}{baseline.stderr}")
        return 1
    for what, kernel, edit, reason in cases:
        with tempfile.TemporaryDirectory() as work:
            paths = mutated(args.ptx, kernel, edit, work)
            if all(Path(p).read_text() == Path(o).read_text() for p, o in zip(paths, args.ptx)):
                print(f"FAIL {what}: the mutation changed nothing (the PTX no longer has what it edits)")
                failures += 1
                continue
            result = run(args.script, paths)
        if result.returncode == 1 and reason in result.stdout:
            print(f"ok   {what}: refused ({reason})")
        else:
            print(f"FAIL {what}: exit {result.returncode}, expected 1 naming '{reason}'\n{result.stdout}{result.stderr}")
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
