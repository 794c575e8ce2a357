#!/usr/bin/env python3
"""The PTX checks (check_ptx.py) fail on PTX that breaks them: each case mutates the real PTX of the
kernels one way, or adds the PTX of a kernel that breaks a check on purpose (planted_non_coherent.cu), and
expects exit status 1 and the reason named.

Usage: test_check_ptx.py --script check_ptx.py --sources DIR --planted PLANTED.ptx FILE.ptx...
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def run(script, paths, sources=None):
    extra = ["--sources", sources] if sources else []
    return subprocess.run([sys.executable, script, *extra, *map(str, paths)], capture_output=True, text=True)


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
    parser.add_argument("--sources", required=True)
    parser.add_argument("--planted", required=True)
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
        ("sgd_kernel's loads of what it updates through the read-only cache", "sgd_kernel",
         lambda body: body.replace("ld.global.v4.f32", "ld.global.nc.v4.f32"), "what it writes itself"),
    ]
    failures = 0
    baseline = run(args.script, args.ptx, args.sources)
    if baseline.returncode != 0:
        print(f"FAIL the real PTX does not pass:\n{baseline.stdout}{baseline.stderr}")
        return 1

    # A kernel that reads through __ldg what another of its threads writes is refused, by name; its twin,
    # which reads with a plain load, is not.
    result = run(args.script, [*args.ptx, args.planted])
    named = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    if (result.returncode == 1 and any("reads_what_it_writes_kernelILb1E" in l and "read-only cache" in l
                                       for l in named)
            and not any("reads_what_it_writes_kernelILb0E" in l for l in named)):
        print("ok   a kernel that reads through __ldg what it writes: refused, and its twin with a plain load not")
    else:
        print(f"FAIL the planted kernel: exit {result.returncode}, expected 1 naming its __ldg version alone\n"
              f"{result.stdout}{result.stderr}")
        failures += 1

    # A .cu file of the kernels whose PTX is not given is refused.
    dropped = next(p for p in args.ptx if Path(p).name.startswith("sgd."))
    result = run(args.script, [p for p in args.ptx if p != dropped], args.sources)
    if result.returncode == 1 and "sgd.cu: no PTX given" in result.stdout:
        print("ok   a kernel file without its PTX: refused")
    else:
        print(f"FAIL a kernel file without its PTX: exit {result.returncode}\n{result.stdout}{result.stderr}")
        failures += 1

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
