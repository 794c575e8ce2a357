#!/usr/bin/env python3
"""Checks on the PTX of the fused step's kernels that no CPU test of their results can make.

- Programmatic dependent launch (kernels/cuda/runtime/programmatic_launch.cuh): a kernel that may be launched
  programmatically touches no global memory before its griddepcontrol.wait, or it could read what the
  kernel before has not yet written.
- The persistent step (kernels/cuda/fused/persistent_step.cu): no load through the non-coherent read-only cache
  (ld.global.nc), which a launch does not keep coherent with the writes of its own other blocks, and the
  step's data changes between its phases.

Usage: check_ptx.py FILE.ptx... (the PTX of gather_linear.cu, classifier_head.cu, weight_gradient_sgd.cu and
persistent_step.cu, in any order; each must be given). Exit status 1 on a failed check, with the reason.
"""
import re
import sys
from pathlib import Path

# The kernels launched programmatically by the fused step (gather_linear's wait is there for such a launch
# too), by the start of their mangled names' last part.
WAITING_KERNELS = ("gather_linear_kernel", "classifier_head_kernel", "weight_gradient_sgd_kernel")
PERSISTENT_KERNEL = "persistent_step_kernel"
GLOBAL_ACCESS = re.compile(r"^\s*(?:@%p\d+\s+)?(?:ld|st|atom|red)\.global\b", re.MULTILINE)
WAIT = re.compile(r"^\s*griddepcontrol\.wait\b", re.MULTILINE)
NON_COHERENT = re.compile(r"\bld\.global\.nc\b")


def entries(ptx):
    """Each kernel entry of a PTX file: its mangled name and body."""
    found = {}
    for m in re.finditer(r"\.entry\s+(\S+)\s*\(", ptx):
        start = m.end()
        nxt = ptx.find(".entry", start)
        found[m.group(1)] = ptx[start : nxt if nxt >= 0 else len(ptx)]
    return found


def check(paths):
    failures = []
    seen = set()
    for path in paths:
        for name, body in entries(Path(path).read_text()).items():
            for kernel in WAITING_KERNELS:
                if kernel not in name:
                    continue
                seen.add(kernel)
                wait = WAIT.search(body)
                access = GLOBAL_ACCESS.search(body)
                if wait is None:
                    failures.append(f"{kernel}: no griddepcontrol.wait ({path})")
                elif access is not None and access.start() < wait.start():
                    line = body[: access.start()].count("\n") + 1
                    failures.append(
                        f"{kernel}: global memory is accessed before griddepcontrol.wait, at line {line} of "
                        f"its body: {access.group(0).strip()} ({path})")
            if PERSISTENT_KERNEL in name:
                seen.add(PERSISTENT_KERNEL)
                count = len(NON_COHERENT.findall(body))
                if count:
                    failures.append(
                        f"{PERSISTENT_KERNEL}: {count} loads through the read-only cache (ld.global.nc), "
                        f"which is not coherent within a launch ({path})")
                if "barrier" not in body and "bar.sync" not in body:
                    failures.append(f"{PERSISTENT_KERNEL}: no barrier at all ({path})")
    for kernel in WAITING_KERNELS + (PERSISTENT_KERNEL,):
        if kernel not in seen:
            failures.append(f"{kernel}: not found in the PTX given")
    return failures


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    # CMake hands a generator expression's list over as one argument, its items joined by ";".
    failures = check([p for arg in sys.argv[1:] for p in arg.split(";") if p])
    for f in failures:
        print("FAIL", f)
    if not failures:
        print(f"ok: {', '.join(WAITING_KERNELS)} wait before touching global memory; "
              f"{PERSISTENT_KERNEL} never reads through the read-only cache")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
