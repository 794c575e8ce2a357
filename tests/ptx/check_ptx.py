#!/usr/bin/env python3
"""Checks on the kernels' PTX that no CPU test of their results can make.

- Programmatic dependent launch (kernels/cuda/runtime/programmatic_launch.cuh): a kernel that may be launched
  programmatically touches no global memory before its griddepcontrol.wait, or it could read what the
  kernel before has not yet written.
- Every kernel: no load through the non-coherent read-only cache (ld.global.nc) of memory that the kernel
  itself writes. The PTX ISA allows ld.global.nc only on data "read-only for the lifetime of the kernel"
  (Data Movement and Conversion Instructions: ld.global.nc): a launch does not keep the cache coherent with
  its own stores, so another block (or a later pass of the same thread) may be served a stale value. nvcc
  emits it for `const __restrict__` pointers and __ldg(); a kernel that also writes through the same
  parameter has broken that promise. The addresses are followed back through the PTX's registers to the
  kernel's parameters (a pointer loaded from memory counts as that memory's); an exemption needs its
  reason in EXEMPT.
- The persistent step (kernels/cuda/fused/persistent_step.cu): no load through the read-only cache at all,
  as its data changes between its phases, written through other parameters than those it reads.

Usage: check_ptx.py [--sources DIR] FILE.ptx... With --sources, every .cu file under DIR must have its PTX
given (FILE.ptx named after it), so that no kernel of the build escapes the checks; the PTX of
gather_linear.cu, classifier_head.cu, weight_gradient_sgd.cu and persistent_step.cu must always be among
them. Exit status 1 on a failed check, with the reason.
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

# Kernels left out of the check of non-coherent loads, by a part of their mangled names, each with its reason.
EXEMPT = {
    # None: every kernel of the build passes, CUB's own (thrust_ops.cu) included. An entry would read
    # "part of the mangled name": "why the kernel may read through the read-only cache what it writes".
}
REGISTER = re.compile(r"%[a-z]+\d+")
ADDRESS = re.compile(r"\[\s*(%[a-z]+\d+|[A-Za-z_$][\w$]*)\s*(?:\+\s*(-?\d+))?\s*\]")
# Instructions whose 64-bit result is an address computed from their register operands' addresses. Index
# arithmetic (mul.wide, shl, cvt from 32 bits) starts no address of its own, so that a size or an index
# that two addresses share does not tie them together.
ADDRESS_ARITHMETIC = re.compile(r"^(?:cvta\.to\.global|cvta\.global|mov|add|sub|selp)\.(?:s64|u64|b64)$")


def statements(body):
    """Each instruction of a kernel body as (opcode, operands), its guard predicate dropped."""
    for raw in body.split(";"):
        line = "\n".join(l.split("//")[0] for l in raw.splitlines()).strip()
        while line.startswith("$") or re.match(r"^[\w$]+:", line):  # labels
            line = line.split(":", 1)[1].strip() if ":" in line else ""
        line = line.lstrip("{} \t\n")
        if not line or line.startswith("."):
            continue
        line = re.sub(r"^@!?%\w+\s+", "", line)
        parts = line.split(None, 1)
        yield parts[0], parts[1] if len(parts) > 1 else ""


def split_operands(text):
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def param_name(symbol, offset):
    name = re.sub(r"^.*_(param_\d+)$", r"\1", symbol)
    return name + (f"+{offset}" if offset and offset != "0" else "")


def non_coherent_conflicts(body):
    """The parameters (or memory reached through them, '*param_N') that the kernel both reads through
    ld.global.nc and writes."""
    roots = {}  # register: the parameters its address comes from
    code = list(statements(body))

    def of(operand):
        found = set()
        for reg in REGISTER.findall(operand):
            found |= roots.get(reg, set())
        return found

    def address_roots(operands):
        for op in operands:
            m = ADDRESS.search(op)
            if m:
                if m.group(1).startswith("%"):
                    return roots.get(m.group(1), set())
                return {param_name(m.group(1), m.group(2))}
        return set()

    changed = True
    while changed:  # to a fixed point: loops assign registers before their uses
        changed = False
        for op, rest in code:
            operands = split_operands(rest)
            if not operands:
                continue
            dest = REGISTER.findall(operands[0]) if not op.startswith(("st.", "red.", "bar", "bra")) else []
            new = set()
            if op.startswith("ld.param") and re.search(r"\.(u64|b64|s64)$", op):
                m = ADDRESS.search(operands[1]) if len(operands) > 1 else None
                if m:
                    new = {param_name(m.group(1), m.group(2))}
            elif op.startswith("ld.global") and all(r.startswith("%rd") for r in dest):
                new = {"*" + r for r in address_roots(operands[1:])}
            elif ADDRESS_ARITHMETIC.match(op):
                new = set().union(*(of(o) for o in operands[1:])) if len(operands) > 1 else set()
            for reg in dest:
                if new - roots.get(reg, set()):
                    roots[reg] = roots.get(reg, set()) | new
                    changed = True
    read_nc, written = set(), set()
    for op, rest in code:
        operands = split_operands(rest)
        if NON_COHERENT.match(op):
            read_nc |= address_roots(operands[1:])
        elif re.match(r"^(st|atom|red)\.", op) and not re.match(r"^(st|atom|red)\.(shared|local|param)", op):
            written |= address_roots(operands if op.startswith(("st.", "red.")) else operands[1:])
    return sorted(read_nc & written)


def entries(ptx):
    """Each kernel entry of a PTX file: its mangled name and body."""
    found = {}
    for m in re.finditer(r"\.entry\s+(\S+)\s*\(", ptx):
        start = m.end()
        nxt = ptx.find(".entry", start)
        found[m.group(1)] = ptx[start : nxt if nxt >= 0 else len(ptx)]
    return found


def check(paths, sources=None):
    failures = []
    seen = set()
    if sources is not None:
        given = {Path(p).name.split(".")[0] for p in paths}
        for cu in sorted(Path(sources).rglob("*.cu")):
            if cu.stem not in given:
                failures.append(f"{cu}: no PTX given for it, so its kernels escape the checks")
    kernels = 0
    for path in paths:
        for name, body in entries(Path(path).read_text()).items():
            kernels += 1
            reason = next((r for part, r in EXEMPT.items() if part in name), None)
            conflicts = [] if reason else non_coherent_conflicts(body)
            if conflicts:
                failures.append(
                    f"{name}: loads through the read-only cache (ld.global.nc) what it writes itself, through "
                    f"{', '.join(conflicts)}: not coherent within a launch ({path})")
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
    return failures, kernels


def main():
    args = sys.argv[1:]
    sources = None
    if len(args) >= 2 and args[0] == "--sources":
        sources, args = args[1], args[2:]
    if not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    # CMake hands a generator expression's list over as one argument, its items joined by ";".
    failures, kernels = check([p for arg in args for p in arg.split(";") if p], sources)
    for f in failures:
        print("FAIL", f)
    if not failures:
        print(f"ok: {kernels} kernels read nothing they write through the read-only cache (exempt: "
              f"{', '.join(EXEMPT) or 'none'}); {', '.join(WAITING_KERNELS)} wait before touching global memory; "
              f"{PERSISTENT_KERNEL} never reads through the read-only cache")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
