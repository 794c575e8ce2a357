#!/usr/bin/python3
"""The docs' tables of measured figures, rebuilt from the records in bench/results/ (one record.json a run,
written by bench/make_record.py).

    bench/results_tables.py              prints every table the docs show, rebuilt from the records
    bench/results_tables.py --check      checks the docs against the records; exit status 1 on any difference
    bench/results_tables.py --write      rewrites the docs' tables from the records
    bench/results_tables.py --show DIR   prints a record's own tables (what its run printed)
    (--root DIR: the repository to read, by default the one holding this script)

In the docs (README.md, docs/*.md), a line `<!-- results-table: ID -->` stands before each table built from the
records; TABLES below says how each is built, its labels as the docs word them and its figures as the records
hold them. --check compares each such table with its rebuild, and also checks that:
  - every record is well formed: its name is its folder's, and it has a date, a commit, the machine, the
    commands and figures;
  - bench/results/ holds records only: a folder per run with its record.json, and beside it only the plots
    that a doc shows;
  - every path into bench/results/ that a markdown file cites (README.md, docs/, bench/README.md, host/*/README.md)
    exists; a placeholder such as bench/results/DATE_DEVICE_HOST/ is not a path, and `..._NAME/` stands for the
    record whose name ends in _NAME.
Standard library only.
"""
import argparse
import decimal
import glob
import json
import os
import re
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join("bench", "results")
MARKER = re.compile(r"^<!-- results-table: (\S+) -->\s*$")
RECORD_KEYS = ["record", "name", "title", "date", "commit", "machine", "commands", "figures"]
FIGURE_KINDS = {"compare", "gemm_survey", "multiprocess", "strategies", "emu_step", "emu_epoch_check", "cpu_ops",
                "fuzz", "gpu_session"}


def load_records(root):
    records = {}
    for path in sorted(glob.glob(os.path.join(root, RESULTS, "*", "record.json"))):
        with open(path) as f:
            records[os.path.basename(os.path.dirname(path))] = json.load(f)
    return records


# --- Reading a record ------------------------------------------------------------------------------------------

class Missing(Exception):
    pass


def section(rec, kind):
    try:
        return rec["figures"][kind]
    except KeyError:
        raise Missing(f"{rec.get('name', '?')}: no {kind} figures") from None


def compare_row(rec, name):
    for r in section(rec, "compare")["rows"]:
        if r["name"] == name:
            if r.get("status") != "ok":
                raise Missing(f"{rec['name']}: {name} did not run ({r.get('status')})")
            return r
    raise Missing(f"{rec['name']}: no compare row {name}")


def survey_batch(rec, lib, batch):
    try:
        return section(rec, "gemm_survey")["libraries"][lib]["batches"][str(batch)]
    except KeyError:
        raise Missing(f"{rec['name']}: no survey figures for {lib} at batch {batch}") from None


def product_flop(op, batch):
    return 2 * batch * 784 * 256 if op.startswith("fc1") else 2 * batch * 256 * 10


STEP_FLOP_PER_ROW = sum(product_flop(op, 1) for op in ["fc1.fwd", "fc2.fwd", "fc2.dW", "fc2.dX", "fc1.dW"])


def step_total(entry):
    return entry["layout_sets"][entry["best_set"]]


# The names the tables' templates use: each takes a record (bound to a short name in the table's definition).
def s(rec, row="mnistdp-cpu"):
    """seconds an epoch (the headline median)"""
    return compare_row(rec, row)["seconds_per_epoch"]


def us(rec, row="mnistdp-cpu"):
    return compare_row(rec, row)["us_per_step"]


def sps(rec, row="mnistdp-cpu"):
    return compare_row(rec, row)["samples_per_second"]


def gf(rec, row="mnistdp-cpu"):
    return compare_row(rec, row)["gflops"]


def fl(rec, row="mnistdp-cpu"):
    """time over the floor"""
    return compare_row(rec, row)["time_over_floor"]


def acc(rec, row="mnistdp-cpu"):
    """final test accuracy, in percent"""
    return 100 * compare_row(rec, row)["final_test_accuracy"]


def x(rec, row):
    """time over mnist-dp's"""
    return compare_row(rec, row)["time_over_mnistdp"]


def peak(rec):
    return section(rec, "compare")["peak"]["peak_gflops"]


def prod(rec, lib, batch, op):
    """a product's time in microseconds, in the library's fastest layout"""
    try:
        return survey_batch(rec, lib, batch)["products"][op]["us"]
    except KeyError:
        raise Missing(f"{rec['name']}: no {op} for {lib} at batch {batch}") from None


def prodgf(rec, lib, batch, op):
    return product_flop(op, batch) / prod(rec, lib, batch, op) / 1e3


def step(rec, lib, batch):
    """the five products summed, in the library's best consistent set of layouts"""
    return step_total(survey_batch(rec, lib, batch))


def stepgf(rec, lib, batch):
    return STEP_FLOP_PER_ROW * batch / step(rec, lib, batch) / 1e3


def work_part(rec, lib, batch, part):
    try:
        return survey_batch(rec, lib, batch)["fc1_work"][part]
    except KeyError:
        raise Missing(f"{rec['name']}: no fc1 work for {lib} at batch {batch}") from None


def wf(rec, lib, batch):
    """fc1's forward product with its bias and ReLU"""
    return work_part(rec, lib, batch, "forward_us")


def wu(rec, lib, batch):
    """fc1's weight gradient with the SGD step on w1"""
    return work_part(rec, lib, batch, "update_us")


def work(rec, lib, batch):
    return wf(rec, lib, batch) + wu(rec, lib, batch)


def train(rec, name):
    for c in section(rec, "multiprocess")["training"]:
        if c["name"] == name:
            return c
    raise Missing(f"{rec['name']}: no training configuration {name}")


def group(rec, kind, processes):
    for p in section(rec, "multiprocess")["process_group"]:
        if p["kind"] == kind and p["processes"] == processes:
            return p
    raise Missing(f"{rec['name']}: no {kind} group of {processes}")


def strat(rec, strategy, replicas):
    """a configuration of bench/strategies.sh: one strategy at one replica count"""
    for c in section(rec, "strategies")["training"]:
        if c["strategy"] == strategy and c["replicas"] == replicas:
            return c
    raise Missing(f"{rec['name']}: no {strategy} run with {replicas} replicas")


def sbytes(rec, strategy, replicas):
    """the bytes a strategy copies between replicas in one step"""
    for b in section(rec, "strategies")["bytes"]:
        if b["replicas"] == replicas:
            return b[strategy]["total"]
    raise Missing(f"{rec['name']}: no bytes for {replicas} replicas")


def cpu_op(rec, name):
    try:
        return section(rec, "cpu_ops")["benchmarks"][name]
    except KeyError:
        raise Missing(f"{rec['name']}: no mnist-dp-cpu-bench row {name}") from None


def emu(rec, variant):
    try:
        return section(rec, "emu_step")["variants"][variant]["ms_per_step"]
    except KeyError:
        raise Missing(f"{rec['name']}: no emulated variant {variant}") from None


def per(a, b):
    """the ratio of two times in seconds as the tables print them, to the millisecond: "1.75x one thread" beside
    0.264 and 0.151 s"""
    return round(a, 3) / round(b, 3)


def half_up(value, digits):
    """a figure recorded to a few decimals, rounded half up (28.650 ms: 28.7), as the docs quote it"""
    return str(decimal.Decimal(repr(value)).quantize(decimal.Decimal(1).scaleb(-digits), decimal.ROUND_HALF_UP))


HELPERS = {f.__name__: f for f in [s, us, sps, gf, fl, acc, x, peak, prod, prodgf, step, stepgf, wf, wu, work,
                                   train, group, strat, sbytes, cpu_op, emu, per, half_up]}

# --- The docs' tables ------------------------------------------------------------------------------------------
# Each: the doc it stands in, the records it reads (short name -> record name) and its lines, where
# {EXPRESSION:FORMAT} is a figure computed from the records with the helpers above.

TABLES = {}


def table(table_id, doc, records, text):
    TABLES[table_id] = {"doc": doc, "records": records, "text": text.strip("\n")}


def built_table(table_id, doc, build):
    """A table whose rows depend on the records (build(records) gives its lines), not a fixed template."""
    TABLES[table_id] = {"doc": doc, "build": build}


CPU_1113 = "PyTorch 1.13 (OpenBLAS {kernels}), data in one tensor"

table("cpu-9af02d4-readme", "README.md", {"A": "2026-12-02_cpu_vm_9af02d4", "B": "2026-12-02_cpu-2threads_vm_9af02d4"}, """
| threads | mnist-dp | PyTorch 2.15 (PyPI, MKL), data in one tensor | PyTorch 1.13 (Debian, OpenBLAS), data in one tensor |
|---|---|---|---|
| 1 | {s(A):.3f} s/epoch ({fl(A):.2f}x the floor), {acc(A):.2f}% | {s(A,'pytorch2-tensor'):.3f} s ({x(A,'pytorch2-tensor'):.2f}x mnist-dp), {acc(A,'pytorch2-tensor'):.2f}% | {s(A,'pytorch-tensor'):.3f} s ({x(A,'pytorch-tensor'):.2f}x), {acc(A,'pytorch-tensor'):.2f}% |
| 2 | {s(B):.3f} s/epoch ({per(s(A),s(B)):.2f}x one thread), {acc(B):.2f}% | {s(B,'pytorch2-tensor'):.3f} s ({x(B,'pytorch2-tensor'):.2f}x), {acc(B,'pytorch2-tensor'):.2f}% | {s(B,'pytorch-tensor'):.3f} s ({x(B,'pytorch-tensor'):.1f}x), {acc(B,'pytorch-tensor'):.2f}% |
""")

table("cpu-a0b2634-readme", "README.md", {"A": "2026-12-04_cpu_vm-xeon_a0b2634", "B": "2026-12-04_cpu-2threads_vm-xeon_a0b2634"}, """
| threads | mnist-dp | PyTorch 2.15 (PyPI, MKL), data in one tensor | PyTorch 1.13 (Debian, OpenBLAS), data in one tensor |
|---|---|---|---|
| 1 | {s(A):.3f} s/epoch ({fl(A):.2f}x the floor), {acc(A):.2f}% | {s(A,'pytorch2-tensor'):.3f} s ({x(A,'pytorch2-tensor'):.2f}x mnist-dp), {acc(A,'pytorch2-tensor'):.2f}% | {s(A,'pytorch-tensor'):.3f} s ({x(A,'pytorch-tensor'):.2f}x), {acc(A,'pytorch-tensor'):.2f}% |
| 2 | {s(B):.3f} s/epoch ({per(s(A),s(B)):.2f}x one thread), {acc(B):.2f}% | {s(B,'pytorch2-tensor'):.3f} s ({x(B,'pytorch2-tensor'):.2f}x), {acc(B,'pytorch2-tensor'):.2f}% | {s(B,'pytorch-tensor'):.3f} s ({x(B,'pytorch-tensor'):.2f}x), {acc(B,'pytorch-tensor'):.2f}% |
""")

table("cpu-20c014c-readme", "README.md", {"A": "2026-12-03_cpu_vm-xeon_20c014c", "B": "2026-12-03_cpu-2threads_vm-xeon_20c014c"}, """
| threads | mnist-dp | PyTorch 2.15 (PyPI, MKL), data in one tensor | PyTorch 1.13 (Debian, OpenBLAS), data in one tensor |
|---|---|---|---|
| 1 | {s(A):.3f} s/epoch ({fl(A):.2f}x the floor), {acc(A):.2f}% | {s(A,'pytorch2-tensor'):.3f} s ({x(A,'pytorch2-tensor'):.2f}x mnist-dp), {acc(A,'pytorch2-tensor'):.2f}% | {s(A,'pytorch-tensor'):.3f} s ({x(A,'pytorch-tensor'):.2f}x), {acc(A,'pytorch-tensor'):.2f}% |
| 2 | {s(B):.3f} s/epoch ({per(s(A),s(B)):.2f}x one thread; 1.68x over 10 more alternating rounds), {acc(B):.2f}% | {s(B,'pytorch2-tensor'):.3f} s ({x(B,'pytorch2-tensor'):.2f}x), {acc(B,'pytorch2-tensor'):.2f}% | {s(B,'pytorch-tensor'):.3f} s ({x(B,'pytorch-tensor'):.1f}x), {acc(B,'pytorch-tensor'):.2f}% |
""")

table("cpu-2026-11-30-readme", "README.md", {"P": "2026-11-30_cpu_vm", "K": "2026-11-30_cpu-SkylakeX_vm"}, """
| OpenBLAS kernels | mnist-dp | PyTorch 1.13, data in one tensor | PyTorch as written (DataLoader) |
|---|---|---|---|
| Prescott (this machine's default) | {s(P):.2f} s/epoch, {acc(P):.2f}% | {s(P,'pytorch-tensor'):.2f} s ({x(P,'pytorch-tensor'):.2f}x mnist-dp) | {s(P,'pytorch-loader'):.2f} s ({x(P,'pytorch-loader'):.2f}x) |
| SkylakeX (`OPENBLAS_CORETYPE=SkylakeX`) | {s(K):.2f} s/epoch, {acc(K):.2f}% | {s(K,'pytorch-tensor'):.2f} s ({x(K,'pytorch-tensor'):.2f}x) | {s(K,'pytorch-loader'):.2f} s ({x(K,'pytorch-loader'):.2f}x) |
""")

table("survey-amd-3b7bc68", "docs/benchmarks.md", {"S": "2026-12-02_cpu-gemm-survey_vm"}, """
| library (as packaged) | batch 64 | batch 32 | kernels it ran |
|---|---:|---:|---|
| libxsmm 1.17 (Debian, static only) | {step(S,'xsmm',64):.1f} ({stepgf(S,'xsmm',64):.0f}) | {step(S,'xsmm',32):.1f} ({stepgf(S,'xsmm',32):.0f}) | JIT, AVX-512 (`cpx`), chosen by features |
| oneDNN 2.6.3 (Debian `libdnnl`) | {step(S,'dnnl',64):.1f} ({stepgf(S,'dnnl',64):.0f}) | {step(S,'dnnl',32):.1f} ({stepgf(S,'dnnl',32):.0f}) | AVX-512, chosen by features |
| OpenBLAS 0.3.21, its own choice | {step(S,'openblas-own',64):.1f} ({stepgf(S,'openblas-own',64):.0f}) | {step(S,'openblas-own',32):.1f} ({stepgf(S,'openblas-own',32):.0f}) | `Cooperlake`: the env var unset |
| **`cpu::gemm`, AVX-512 (mnist-dp)** | **{step(S,'mnistdp',64):.1f} ({stepgf(S,'mnistdp',64):.0f})** | **{step(S,'mnistdp',32):.1f} ({stepgf(S,'mnistdp',32):.0f})** | chosen by features |
| OpenBLAS 0.3.21 as this machine sets it | {step(S,'openblas-env',64):.1f} ({stepgf(S,'openblas-env',64):.0f}) | {step(S,'openblas-env',32):.1f} ({stepgf(S,'openblas-env',32):.0f}) | `Haswell` (AVX2) |
| MKL 2026.2 (PyPI) | {step(S,'mkl',64):.1f} ({stepgf(S,'mkl',64):.0f}) | {step(S,'mkl',32):.1f} ({stepgf(S,'mkl',32):.0f}) | its own dispatch; AVX2 speed on this AMD CPU |
| `cpu::gemm`, AVX2 | {step(S,'mnistdp-avx2',64):.1f} ({stepgf(S,'mnistdp-avx2',64):.0f}) | {step(S,'mnistdp-avx2',32):.1f} ({stepgf(S,'mnistdp-avx2',32):.0f}) | forced, for comparison |
| BLIS 0.9.0 (Debian) | {step(S,'blis',64):.1f} ({stepgf(S,'blis',64):.0f}) | {step(S,'blis',32):.1f} ({stepgf(S,'blis',32):.0f}) | `generic`: it does not know this CPU |
| `cpu::gemm`, portable C++ | {step(S,'mnistdp-portable',64):.1f} ({stepgf(S,'mnistdp-portable',64):.0f}) | {step(S,'mnistdp-portable',32):.1f} ({stepgf(S,'mnistdp-portable',32):.0f}) | forced, for comparison |
""")

table("survey-amd-cec1aaa", "docs/benchmarks.md", {"S": "2026-12-02_cpu-gemm-survey_vm_cec1aaa"}, """
| library | fc1.fwd | fc1.dW | the step's five products | fc1 fwd + bias + ReLU | fc1 dW + SGD on w1 | fc1 with its work |
|---|---:|---:|---:|---:|---:|---:|
| oneDNN 2.6.3 | {prod(S,'dnnl',64,'fc1.fwd'):.1f} | {prod(S,'dnnl',64,'fc1.dW'):.1f} | {step(S,'dnnl',64):.1f} | {wf(S,'dnnl',64):.1f} | {wu(S,'dnnl',64):.1f} | **{work(S,'dnnl',64):.1f}** |
| `cpu::gemm`, AVX-512 (fused) | {prod(S,'mnistdp',64,'fc1.fwd'):.1f} | {prod(S,'mnistdp',64,'fc1.dW'):.1f} | {step(S,'mnistdp',64):.1f} | {wf(S,'mnistdp',64):.1f} | {wu(S,'mnistdp',64):.1f} | {work(S,'mnistdp',64):.1f} |
| OpenBLAS, its own `Cooperlake` | {prod(S,'openblas-own',64,'fc1.fwd'):.1f} | {prod(S,'openblas-own',64,'fc1.dW'):.1f} | {step(S,'openblas-own',64):.1f} | {wf(S,'openblas-own',64):.1f} | {wu(S,'openblas-own',64):.1f} | {work(S,'openblas-own',64):.1f} |
| libxsmm 1.17 | {prod(S,'xsmm',64,'fc1.fwd'):.1f} | {prod(S,'xsmm',64,'fc1.dW'):.1f} | **{step(S,'xsmm',64):.1f}** | {wf(S,'xsmm',64):.1f} | {wu(S,'xsmm',64):.1f} | {work(S,'xsmm',64):.1f} |
| OpenBLAS as this machine sets it (`Haswell`) | {prod(S,'openblas-env',64,'fc1.fwd'):.1f} | {prod(S,'openblas-env',64,'fc1.dW'):.1f} | {step(S,'openblas-env',64):.1f} | {wf(S,'openblas-env',64):.1f} | {wu(S,'openblas-env',64):.1f} | {work(S,'openblas-env',64):.1f} |
""")

table("survey-xeon-f280b6e", "docs/benchmarks.md", {"S": "2026-12-03_cpu-gemm-survey_vm-xeon_f280b6e"}, """
| library | fc1.fwd | fc1.dW | the step's five products | fc1 fwd + bias + ReLU | fc1 dW + SGD on w1 | fc1 with its work |
|---|---:|---:|---:|---:|---:|---:|
| `cpu::gemm`, AVX-512 (fused) | {prod(S,'mnistdp',64,'fc1.fwd'):.1f} ({prodgf(S,'mnistdp',64,'fc1.fwd'):.0f}) | {prod(S,'mnistdp',64,'fc1.dW'):.1f} ({prodgf(S,'mnistdp',64,'fc1.dW'):.0f}) | {step(S,'mnistdp',64):.1f} | {wf(S,'mnistdp',64):.1f} | {wu(S,'mnistdp',64):.1f} | **{work(S,'mnistdp',64):.1f}** |
| libxsmm 1.17 | {prod(S,'xsmm',64,'fc1.fwd'):.1f} ({prodgf(S,'xsmm',64,'fc1.fwd'):.0f}) | {prod(S,'xsmm',64,'fc1.dW'):.1f} ({prodgf(S,'xsmm',64,'fc1.dW'):.0f}) | **{step(S,'xsmm',64):.1f}** | {wf(S,'xsmm',64):.1f} | {wu(S,'xsmm',64):.1f} | {work(S,'xsmm',64):.1f} |
| oneDNN 2.6.3 | {prod(S,'dnnl',64,'fc1.fwd'):.1f} ({prodgf(S,'dnnl',64,'fc1.fwd'):.0f}) | {prod(S,'dnnl',64,'fc1.dW'):.1f} ({prodgf(S,'dnnl',64,'fc1.dW'):.0f}) | {step(S,'dnnl',64):.1f} | {wf(S,'dnnl',64):.1f} | {wu(S,'dnnl',64):.1f} | {work(S,'dnnl',64):.1f} |
| OpenBLAS, as this machine sets it (`SkylakeX`) | {prod(S,'openblas-env',64,'fc1.fwd'):.1f} ({prodgf(S,'openblas-env',64,'fc1.fwd'):.0f}) | {prod(S,'openblas-env',64,'fc1.dW'):.1f} ({prodgf(S,'openblas-env',64,'fc1.dW'):.0f}) | {step(S,'openblas-env',64):.1f} | {wf(S,'openblas-env',64):.1f} | {wu(S,'openblas-env',64):.1f} | {work(S,'openblas-env',64):.1f} |
| `cpu::gemm`, AVX2 (fused) | {prod(S,'mnistdp-avx2',64,'fc1.fwd'):.1f} ({prodgf(S,'mnistdp-avx2',64,'fc1.fwd'):.0f}) | {prod(S,'mnistdp-avx2',64,'fc1.dW'):.1f} ({prodgf(S,'mnistdp-avx2',64,'fc1.dW'):.0f}) | {step(S,'mnistdp-avx2',64):.1f} | {wf(S,'mnistdp-avx2',64):.1f} | {wu(S,'mnistdp-avx2',64):.1f} | {work(S,'mnistdp-avx2',64):.1f} |
""")

table("cpu-xeon-a0b2634-bd297b0", "docs/benchmarks.md",
      {"A": "2026-12-04_cpu_vm-xeon_a0b2634", "A2": "2026-12-04_cpu-2threads_vm-xeon_a0b2634",
       "B": "2026-12-04_cpu_vm-xeon_bd297b0", "B2": "2026-12-04_cpu-2threads_vm-xeon_bd297b0"}, """
| commit | threads | mnist-dp | x floor | PyTorch 2.15 (MKL), data in one tensor | PyTorch 1.13 (OpenBLAS SkylakeX), data in one tensor |
|---|---|---:|---:|---:|---:|
| a0b2634 | 1 (peak {peak(A):.1f} GFLOP/s) | {s(A):.3f} s/epoch, {us(A):.1f} us/step, {gf(A):.1f} GFLOP/s, {acc(A):.2f}% | {fl(A):.2f} | {s(A,'pytorch2-tensor'):.3f} s ({x(A,'pytorch2-tensor'):.2f}x mnist-dp), {acc(A,'pytorch2-tensor'):.2f}% | {s(A,'pytorch-tensor'):.3f} s ({x(A,'pytorch-tensor'):.2f}x), {acc(A,'pytorch-tensor'):.2f}% |
| a0b2634 | 2 (peak {peak(A2):.1f}) | {s(A2):.3f} s/epoch ({per(s(A),s(A2)):.2f}x one thread), {gf(A2):.1f} GFLOP/s, {acc(A2):.2f}% | {fl(A2):.2f} | {s(A2,'pytorch2-tensor'):.3f} s ({x(A2,'pytorch2-tensor'):.2f}x), {acc(A2,'pytorch2-tensor'):.2f}% | {s(A2,'pytorch-tensor'):.3f} s ({x(A2,'pytorch-tensor'):.2f}x), {acc(A2,'pytorch-tensor'):.2f}% |
| bd297b0 | 1 (peak {peak(B):.1f}) | {s(B):.3f} s/epoch, {us(B):.1f} us/step, {gf(B):.1f} GFLOP/s, {acc(B):.2f}% | {fl(B):.2f} | {s(B,'pytorch2-tensor'):.3f} s ({x(B,'pytorch2-tensor'):.2f}x), {acc(B,'pytorch2-tensor'):.2f}% | {s(B,'pytorch-tensor'):.3f} s ({x(B,'pytorch-tensor'):.2f}x), {acc(B,'pytorch-tensor'):.2f}% |
| bd297b0 | 2 (peak {peak(B2):.1f}) | {s(B2):.3f} s/epoch ({per(s(B),s(B2)):.2f}x one thread), {gf(B2):.1f} GFLOP/s, {acc(B2):.2f}% | {fl(B2):.2f} | {s(B2,'pytorch2-tensor'):.3f} s ({x(B2,'pytorch2-tensor'):.2f}x), {acc(B2,'pytorch2-tensor'):.2f}% | {s(B2,'pytorch-tensor'):.3f} s ({x(B2,'pytorch-tensor'):.2f}x), {acc(B2,'pytorch-tensor'):.2f}% |
""")

table("survey-xeon-a0b2634", "docs/benchmarks.md", {"S": "2026-12-04_cpu-gemm-survey_vm-xeon_a0b2634"}, """
| library | fc1.fwd, batch 64 | fc1.dW, batch 64 | fc1 with its element-wise work, batch 64 | the same, batch 32 |
|---|---:|---:|---:|---:|
| `cpu::gemm` (fused) | {prod(S,'mnistdp',64,'fc1.fwd'):.1f} | {prod(S,'mnistdp',64,'fc1.dW'):.1f} | **{work(S,'mnistdp',64):.1f}** ({wf(S,'mnistdp',64):.1f} + {wu(S,'mnistdp',64):.1f}) | **{work(S,'mnistdp',32):.1f}** ({wf(S,'mnistdp',32):.1f} + {wu(S,'mnistdp',32):.1f}) |
| libxsmm 1.17 (target cpx) | {prod(S,'xsmm',64,'fc1.fwd'):.1f} | {prod(S,'xsmm',64,'fc1.dW'):.1f} | {work(S,'xsmm',64):.1f} ({wf(S,'xsmm',64):.1f} + {wu(S,'xsmm',64):.1f}) | {work(S,'xsmm',32):.1f} ({wf(S,'xsmm',32):.1f} + {wu(S,'xsmm',32):.1f}) |
| oneDNN 2.6.3 | {prod(S,'dnnl',64,'fc1.fwd'):.1f} | {prod(S,'dnnl',64,'fc1.dW'):.1f} | {work(S,'dnnl',64):.1f} ({wf(S,'dnnl',64):.1f} + {wu(S,'dnnl',64):.1f}) | {work(S,'dnnl',32):.1f} ({wf(S,'dnnl',32):.1f} + {wu(S,'dnnl',32):.1f}) |
| OpenBLAS (SkylakeX) | {prod(S,'openblas-env',64,'fc1.fwd'):.1f} | {prod(S,'openblas-env',64,'fc1.dW'):.1f} | {work(S,'openblas-env',64):.1f} ({wf(S,'openblas-env',64):.1f} + {wu(S,'openblas-env',64):.1f}) | {work(S,'openblas-env',32):.1f} ({wf(S,'openblas-env',32):.1f} + {wu(S,'openblas-env',32):.1f}) |
""")

table("cpu-xeon-20c014c", "docs/benchmarks.md", {"A": "2026-12-03_cpu_vm-xeon_20c014c", "B": "2026-12-03_cpu-2threads_vm-xeon_20c014c"}, """
| threads | mnist-dp | x floor | PyTorch 2.15 (MKL), data in one tensor | PyTorch 1.13 (OpenBLAS SkylakeX), data in one tensor |
|---|---:|---:|---:|---:|
| 1 (peak {peak(A):.1f} GFLOP/s) | {s(A):.3f} s/epoch, {us(A):.1f} us/step, {gf(A):.1f} GFLOP/s, {acc(A):.2f}% | {fl(A):.2f} | {s(A,'pytorch2-tensor'):.3f} s ({x(A,'pytorch2-tensor'):.2f}x mnist-dp), {acc(A,'pytorch2-tensor'):.2f}% | {s(A,'pytorch-tensor'):.3f} s ({x(A,'pytorch-tensor'):.2f}x), {acc(A,'pytorch-tensor'):.2f}% |
| 2 (peak {peak(B):.1f}) | {s(B):.3f} s/epoch ({per(s(A),s(B)):.2f}x one thread), {gf(B):.1f} GFLOP/s, {acc(B):.2f}% | {fl(B):.2f} | {s(B,'pytorch2-tensor'):.3f} s ({x(B,'pytorch2-tensor'):.2f}x), {acc(B,'pytorch2-tensor'):.2f}% | {s(B,'pytorch-tensor'):.3f} s ({x(B,'pytorch-tensor'):.1f}x), {acc(B,'pytorch-tensor'):.2f}% |
""")

table("survey-xeon-4a494fe", "docs/benchmarks.md", {"S": "2026-12-03_cpu-gemm-survey_vm-xeon_4a494fe"}, """
| library | fc1.fwd | fc1.dW | 5 products, best consistent layouts | fc1 with its element-wise work |
|---|---:|---:|---:|---:|
| libxsmm 1.17 (target cpx) | {prod(S,'xsmm',64,'fc1.fwd'):.1f} | {prod(S,'xsmm',64,'fc1.dW'):.1f} | **{step(S,'xsmm',64):.1f}** | {work(S,'xsmm',64):.1f} |
| `cpu::gemm` (fused) | {prod(S,'mnistdp',64,'fc1.fwd'):.1f} | {prod(S,'mnistdp',64,'fc1.dW'):.1f} | {step(S,'mnistdp',64):.1f} | **{work(S,'mnistdp',64):.1f}** |
| oneDNN 2.6.3 | {prod(S,'dnnl',64,'fc1.fwd'):.1f} | {prod(S,'dnnl',64,'fc1.dW'):.1f} | {step(S,'dnnl',64):.1f} | {work(S,'dnnl',64):.1f} |
| OpenBLAS (SkylakeX, its own choice) | {prod(S,'openblas-own',64,'fc1.fwd'):.1f} | {prod(S,'openblas-own',64,'fc1.dW'):.1f} | {step(S,'openblas-own',64):.1f} | {work(S,'openblas-own',64):.1f} |
""")

table("cpu-xeon-f280b6e", "docs/benchmarks.md", {"A": "2026-12-03_cpu_vm-xeon_f280b6e", "B": "2026-12-03_cpu-2threads_vm-xeon_f280b6e"}, """
| threads | mnist-dp | x floor | PyTorch 2.15 (MKL), data in one tensor | PyTorch 1.13 (OpenBLAS SkylakeX), data in one tensor |
|---|---:|---:|---:|---:|
| 1 (peak {peak(A):.1f} GFLOP/s) | {s(A):.3f} s/epoch, {us(A):.1f} us/step, {gf(A):.1f} GFLOP/s, {acc(A):.2f}% | {fl(A):.2f} | {s(A,'pytorch2-tensor'):.3f} s ({x(A,'pytorch2-tensor'):.2f}x mnist-dp), {acc(A,'pytorch2-tensor'):.2f}% | {s(A,'pytorch-tensor'):.3f} s ({x(A,'pytorch-tensor'):.2f}x), {acc(A,'pytorch-tensor'):.2f}% |
| 2 (peak {peak(B):.1f}) | {s(B):.3f} s/epoch ({per(s(A),s(B)):.2f}x one thread), {gf(B):.1f} GFLOP/s, {acc(B):.2f}% | {fl(B):.2f} | {s(B,'pytorch2-tensor'):.3f} s ({x(B,'pytorch2-tensor'):.2f}x), {acc(B,'pytorch2-tensor'):.2f}% | {s(B,'pytorch-tensor'):.3f} s ({x(B,'pytorch-tensor'):.2f}x), {acc(B,'pytorch-tensor'):.2f}% |
""")

table("cpu-xeon-11b1583", "docs/benchmarks.md", {"A": "2026-12-02_cpu_vm-xeon_11b1583", "B": "2026-12-02_cpu-2threads_vm-xeon_11b1583"}, """
| threads | mnist-dp | x floor | PyTorch 2.15 (MKL), data in one tensor | PyTorch 1.13 (OpenBLAS Prescott), data in one tensor |
|---|---:|---:|---:|---:|
| 1 (peak {peak(A):.1f} GFLOP/s) | {s(A):.3f} s/epoch, {gf(A):.1f} GFLOP/s, {acc(A):.2f}% | {fl(A):.2f} | {s(A,'pytorch2-tensor'):.3f} s ({x(A,'pytorch2-tensor'):.2f}x mnist-dp), {acc(A,'pytorch2-tensor'):.2f}% | {s(A,'pytorch-tensor'):.3f} s ({x(A,'pytorch-tensor'):.2f}x) |
| 2 (peak {peak(B):.1f}) | {s(B):.3f} s/epoch ({per(s(A),s(B)):.2f}x one thread), {acc(B):.2f}% | {fl(B):.2f} | {s(B,'pytorch2-tensor'):.3f} s ({x(B,'pytorch2-tensor'):.2f}x), {acc(B,'pytorch2-tensor'):.2f}% | {s(B,'pytorch-tensor'):.3f} s ({x(B,'pytorch-tensor'):.1f}x) |
""")

table("survey-xeon-11b1583", "docs/benchmarks.md", {"S": "2026-12-02_cpu-gemm-survey_vm-xeon_11b1583"}, """
| library | fc1.fwd | fc1.dW | 5 products, best consistent layouts | fc1 with its element-wise work |
|---|---:|---:|---:|---:|
| libxsmm 1.17 (target cpx) | {prod(S,'xsmm',64,'fc1.fwd'):.1f} | {prod(S,'xsmm',64,'fc1.dW'):.1f} | **{step(S,'xsmm',64):.1f}** | **{work(S,'xsmm',64):.1f}** |
| `cpu::gemm` (fused) | {prod(S,'mnistdp',64,'fc1.fwd'):.1f} | {prod(S,'mnistdp',64,'fc1.dW'):.1f} | {step(S,'mnistdp',64):.1f} | {work(S,'mnistdp',64):.1f} |
| oneDNN 2.6.3 | {prod(S,'dnnl',64,'fc1.fwd'):.1f} | {prod(S,'dnnl',64,'fc1.dW'):.1f} | {step(S,'dnnl',64):.1f} | {work(S,'dnnl',64):.1f} |
| OpenBLAS (Prescott, its own choice) | {prod(S,'openblas-own',64,'fc1.fwd'):.1f} | {prod(S,'openblas-own',64,'fc1.dW'):.1f} | {step(S,'openblas-own',64):.1f} | {work(S,'openblas-own',64):.1f} |
""")

# The comparison tables of one run, as compare.sh printed them, with the docs' labels.
COMPARE_HEAD = """
| configuration | s/epoch | us/step | GFLOP/s | x floor | final test accuracy | x mnist-dp |
|---|---:|---:|---:|---:|---:|---:|"""


def compare_line(label, row, name="A"):
    r = f"{name},'{row}'"
    return (f"| {label} | {{s({r}):.3f}} | {{us({r}):.1f}} | {{gf({r}):.1f}} | {{fl({r}):.2f}} | {{acc({r}):.2f}}% "
            f"| {{x({r}):.2f}} |")


for when, one, two in [("9af02d4", "2026-12-02_cpu_vm_9af02d4", "2026-12-02_cpu-2threads_vm_9af02d4"),
                       ("3b7bc68", "2026-12-02_cpu_vm", "2026-12-02_cpu-2threads_vm")]:
    table(f"cpu-amd-{when}-1", "docs/benchmarks.md", {"A": one}, "\n".join([
        COMPARE_HEAD,
        compare_line("mnist-dp, cpu (cpu::gemm, AVX-512)", "mnistdp-cpu"),
        compare_line("PyTorch 2.15 (MKL), data in one tensor", "pytorch2-tensor"),
        compare_line("PyTorch 2.15 (MKL), as written (DataLoader)", "pytorch2-loader"),
        compare_line("PyTorch 1.13 (OpenBLAS Haswell), data in one tensor", "pytorch-tensor"),
        compare_line("PyTorch 1.13 (OpenBLAS Haswell), as written (DataLoader)", "pytorch-loader")]))
    table(f"cpu-amd-{when}-2", "docs/benchmarks.md", {"A": two}, "\n".join([
        COMPARE_HEAD,
        compare_line("mnist-dp, cpu (cpu::gemm, AVX-512, 2 threads)", "mnistdp-cpu"),
        compare_line("PyTorch 2.15 (MKL), data in one tensor, 2 threads", "pytorch2-tensor"),
        compare_line("PyTorch 1.13 (OpenBLAS Haswell), data in one tensor, 2 threads", "pytorch-tensor")]))

OPS_2026_11_30 = [("ref/fc1.fwd/64", "`ref/fc1.fwd/64`"), ("ref/fc1.bwd/64", "`ref/fc1.bwd/64`"),
                  ("ref/fc2.fwd/64", "`ref/fc2.fwd/64`"), ("ref/fc2.bwd/64", "`ref/fc2.bwd/64`"),
                  ("blas/fc1.fwd/64", "`blas/fc1.fwd/64`"), ("blas/fc1.bwd/64", "`blas/fc1.bwd/64`"),
                  ("blas/fc2.fwd/64", "`blas/fc2.fwd/64`"), ("blas/fc2.bwd/64", "`blas/fc2.bwd/64`"),
                  ("ref/softmax_xent/64", "`ref/softmax_xent/64`"), ("ref/gather/64", "`ref/gather/64`"),
                  ("ref/sgd/plain", "`ref/sgd/plain` (203,530 params)"), ("step/ref/64", "`step/ref/64`"),
                  ("step/blas/64", "`step/blas/64`"), ("replica/cpu/64", "`replica/cpu/64`"),
                  ("step/blas/32", "`step/blas/32`"), ("replica/cpu/32", "`replica/cpu/32`"),
                  ("step/blas/22", "`step/blas/22`"), ("replica/cpu/22", "`replica/cpu/22`"),
                  ("step/blas/8", "`step/blas/8`"), ("replica/cpu/8", "`replica/cpu/8`")]


def ops_cells(rec, op):
    return (f"{{cpu_op({rec},'{op}')['real_time']:,.1f}} ({{100*cpu_op({rec},'{op}')['cv']:.0f}}%) | "
            f"{{cpu_op({rec},'{op}')['FLOP/s']/1e9:.1f}}")


table("cpu-ops-2026-11-30", "docs/benchmarks.md", {"P": "2026-11-30_cpu_vm", "K": "2026-11-30_cpu-SkylakeX_vm"},
      "\n".join(["| benchmark | Prescott: us (cv) | GFLOP/s | SkylakeX: us (cv) | GFLOP/s |",
                 "|---|---:|---:|---:|---:|"] +
                [f"| {label} | {ops_cells('P', op)} | " +
                 ("(no BLAS) | |" if op.startswith(("ref/", "kernel/")) and not op.startswith("step/")
                  else f"{ops_cells('K', op)} |")
                 for op, label in OPS_2026_11_30]))

COMPARE_2026_11_30 = """
| configuration | s/epoch | samples/s | us/step | final test accuracy | x mnist-dp |
|---|---:|---:|---:|---:|---:|
| mnist-dp, cpu | {s(A):.3f} | {sps(A):,.0f} | {us(A):.1f} | {acc(A):.2f}% | {x(A,'mnistdp-cpu'):.2f} |
| PyTorch 1.13, as written (DataLoader) | {s(A,'pytorch-loader'):.3f} | {sps(A,'pytorch-loader'):,.0f} | {us(A,'pytorch-loader'):.1f} | {acc(A,'pytorch-loader'):.2f}% | {x(A,'pytorch-loader'):.2f} |
| PyTorch 1.13, data in one tensor | {s(A,'pytorch-tensor'):.3f} | {sps(A,'pytorch-tensor'):,.0f} | {us(A,'pytorch-tensor'):.1f} | {acc(A,'pytorch-tensor'):.2f}% | {x(A,'pytorch-tensor'):.2f} |
"""
table("cpu-openblas-prescott", "docs/benchmarks.md", {"A": "2026-11-30_cpu_vm"}, COMPARE_2026_11_30)
table("cpu-openblas-skylakex", "docs/benchmarks.md", {"A": "2026-11-30_cpu-SkylakeX_vm"}, COMPARE_2026_11_30)


def training_line(label, name):
    return (f"| {label} | {{train(M,'{name}')['median_us_per_step']:.1f}} | "
            f"{{', '.join(format(u, '.1f') for u in train(M,'{name}')['us_per_step'])}} | "
            f"{{train(M,'{name}')['median_us_per_step'] / train(M,'single-1x' + str(train(M,'{name}')['replicas']))"
            f"['median_us_per_step']:.2f}} |")


table("multiprocess-training", "docs/benchmarks.md", {"M": "2026-11-30_multiprocess_cpu_vm"}, "\n".join([
    "| configuration | us/step, median of 3 | each round | x 1 process, same replicas |",
    "|---|---:|---|---:|",
    training_line("1 process, 1 replica", "single-1x1"),
    training_line("1 process, 2 replicas", "single-1x2"),
    training_line("2 processes, TCP", "tcp-2x1"),
    training_line("2 processes, MPI", "mpi-2x1"),
    training_line("1 process, 3 replicas (oversubscribed)", "single-1x3"),
    training_line("3 processes, TCP (oversubscribed)", "tcp-3x1"),
    training_line("3 processes, MPI (oversubscribed)", "mpi-3x1")]))


def group_line(label, kind, n):
    g = f"group(M,'{kind}',{n})"
    t = f"train(M,'{kind}-{n}x1')['median_us_per_step']"
    return (f"| {label} | {n} | {{{g}['all_reduce']['slowest_rank']['median_us']:.1f}} "
            f"({{{g}['all_reduce']['slowest_rank']['p10_us']:.1f}}-{{{g}['all_reduce']['slowest_rank']['p90_us']:.1f}}) | "
            f"{{{g}['all_reduce']['algbw_gbs']:.3f}} | {{{g}['all_reduce']['busbw_gbs']:.3f}} | "
            f"{{{g}['any']['slowest_rank']['median_us']:.1f}} | {{{g}['broadcast']['slowest_rank']['median_us']:.1f}} | "
            f"{{100 * {g}['all_reduce']['slowest_rank']['median_us'] / {t}:.0f}}% |")


table("multiprocess-collectives", "docs/benchmarks.md", {"M": "2026-11-30_multiprocess_cpu_vm"}, "\n".join([
    "| group | ranks | all-reduce of 814,124 B: us (p10-p90) | algbw GB/s | busbw GB/s | any() us | broadcast 4 KB us "
    "| all-reduce / step |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
    group_line("TCP", "tcp", 2), group_line("MPI", "mpi", 2),
    group_line("TCP (oversubscribed)", "tcp", 3), group_line("MPI (oversubscribed)", "mpi", 3)]))

def record_named(records, name):
    if name not in records:
        raise Missing(f"no record {RESULTS}/{name}/record.json")
    return records[name]


# bench/strategies.sh's run on the CPU: a row per replica count, both strategies (strategies_lines, below).
built_table("strategies-cpu", "docs/how-dataparallel-works.md",
            lambda records: strategies_lines(record_named(records, "2026-12-05_strategies_cpu_vm")))

table("emulated-step", "docs/emulation.md", {"E": "2026-12-01_emulated_vm", "T": "2026-12-02_emulated_vm_tsan"}, """
| variant | ms a step | under ThreadSanitizer |
|---|---|---|
| CPU path | {half_up(emu(E,'cpu'),2)} | {half_up(emu(T,'cpu'),1)} |
| emulated, plain launches, GEMM blocked (the default) | {half_up(emu(E,'plain, gemm blocked'),1)} | {emu(T,'plain, gemm blocked'):,.0f} |
| GEMM naive / slab / tiled / cuBLAS | {half_up(emu(E,'plain, gemm naive'),1)} / {half_up(emu(E,'plain, gemm slab'),1)} / {half_up(emu(E,'plain, gemm tiled'),1)} / {half_up(emu(E,'plain, gemm cublas'),1)} | {emu(T,'plain, gemm naive'):,.0f} / {emu(T,'plain, gemm slab'):,.0f} / {emu(T,'plain, gemm tiled'):,.0f} / {emu(T,'plain, gemm cublas'):,.0f} |
| CUDA graphs / fused head / fused step / persistent, 8 steps a launch | {half_up(emu(E,'cuda graphs'),1)} / {half_up(emu(E,'fused head'),1)} / {half_up(emu(E,'fused step'),1)} / {half_up(emu(E,'persistent, 8 steps a launch'),1)} | {emu(T,'cuda graphs'):,.0f} / {emu(T,'fused head'):,.0f} / {emu(T,'fused step'):,.0f} / {emu(T,'persistent, 8 steps a launch'):,.0f} |
| three emulated devices through NCCL | {half_up(emu(E,'3 devices, NCCL'),1)} | {emu(T,'3 devices, NCCL'):,.0f} |
""")


# --- Rendering ---------------------------------------------------------------------------------------------------

FIELD = re.compile(r"\{([^{}]+?)\}")
SPEC = re.compile(r"^(.*?)(?::([<>^=]?[+\- ]?#?0?\d*[,_]?(?:\.\d+)?[bcdeEfFgGnosxX%]?))?$", re.S)


def fill(template, names):
    def one(m):
        expr, spec = SPEC.match(m.group(1)).groups()
        value = eval(expr, {"__builtins__": {"format": format, "str": str}}, names)  # the script's own templates
        return format(value, spec or "")
    return FIELD.sub(one, template)


def render(table_id, records):
    t = TABLES[table_id]
    if "build" in t:
        return t["build"](records)
    names = dict(HELPERS)
    for short, name in t["records"].items():
        if name not in records:
            raise Missing(f"no record {RESULTS}/{name}/record.json")
        names[short] = records[name]
    return [fill(line, names) for line in t["text"].splitlines()]


# --- The GPU run's tables: from the newest record of scripts/gpu-session.sh (bench/gpu_record.py writes it) ----------

GPU_NONE = ["| GPU run | figures |", "|---|---|",
            "| none recorded yet | these programs have not run on a GPU; no GPU figure is quoted, and none is estimated |"]


def newest_gpu_session(records, rehearsals=False):
    """The newest record of a GPU run; with rehearsals, of a run on emulated devices too (a real run first)."""
    sessions = [r for r in records.values() if "gpu_session" in r.get("figures", {})]
    real = [r for r in sessions if not r["figures"]["gpu_session"]["emulated"]]
    sessions = real or (sessions if rehearsals else [])
    return max(sessions, key=lambda r: (r["date"], r["name"])) if sessions else None


def gpu_us(value, emulated):
    if emulated:
        return "emulated"
    return "-" if value is None else f"{value:.2f}"


def gpu_acc(value):
    return "-" if value is None else f"{value * 100:.2f}%"


def gpu_paths_table(records, detail):
    rec = newest_gpu_session(records)
    if rec is None:
        return GPU_NONE
    g = rec["figures"]["gpu_session"]
    emulated = g["emulated"]
    where = f"`bench/results/{rec['name']}/`" + (", EMULATED: a rehearsal, no GPU result" if emulated else "")
    head = f"| path ({where}) | us/step | test accuracy |" + (" options | plain's bits |" if detail else "")
    lines = [head, "|---|---:|---:|" + ("---|---|" if detail else "")]
    for r in g["train"]:
        us = "-" if emulated and r["name"] == "cpu" else gpu_us(r.get("step_us"), emulated)
        row = f"| mnist-dp {r['name']} | {us} | {gpu_acc(r.get('test_accuracy'))} |"
        if detail:
            bits = {True: "equal", False: "DIFFER"}.get(r.get("same_bits_as_plain"), "")
            row += f" `{r['options']}` | {bits} |"
        lines.append(row)
    for variant, v in g["pytorch"].items():
        row = f"| PyTorch {v.get('torch', '')} {variant} | {gpu_us(v.get('step_us'), emulated)} | " \
              f"{gpu_acc(v.get('test_accuracy'))} |"
        lines.append(row + (" `bench/peers/simplenet_pytorch.py` | |" if detail else ""))
    return lines


def gpu_phases_table(records):
    rec = newest_gpu_session(records, rehearsals=True)
    if rec is None:
        return GPU_NONE
    g = rec["figures"]["gpu_session"]
    what = "EMULATED rehearsal, no GPU result" if g["emulated"] else "GPU run"
    lines = [f"| phase (`bench/results/{rec['name']}/`, {what}) | result | seconds | detail |", "|---|---|---:|---|"]
    for p in rec["figures"]["gpu_session"]["phases"]:
        lines.append(f"| {p['name']} | {p['result']} | {p['seconds']} | {p['detail']} |")
    return lines


built_table("gpu-readme", "README.md", lambda records: gpu_paths_table(records, detail=False))
built_table("gpu-paths", "docs/benchmarks.md", lambda records: gpu_paths_table(records, detail=True))
built_table("gpu-phases", "docs/gpu-run.md", gpu_phases_table)


# --- A record's own tables (--show) --------------------------------------------------------------------------------

def show_compare(rec):
    c = section(rec, "compare")
    # GFLOP/s and x floor: CPU runs since compare.sh measured the peak.
    cpu = c["device"] == "cpu" and any("gflops" in r for r in c["rows"])
    m = rec["machine"]
    base = next((r for r in c["rows"] if r["name"] == c.get("base")), None)
    lines = [f"mnist-dp against PyTorch: {c['device']}; {m['cpus']} vCPU {m['cpu']}"
             + (f", {m['gpu']} (driver {m['driver']})" if m.get("gpu") else "")
             + f"; OpenBLAS {c.get('openblas_core')} kernels; {c['epochs']} epoch(s), {c['threads']} thread(s), "
             f"{c.get('rounds', 1)} round(s); load average {c.get('load_average_before')} before, "
             f"{c.get('load_average_after')} after."]
    if base:
        lines.append(f"Time per epoch: the {c['headline']}. x mnist-dp: time over {base['label']}.")
    pk = (c.get("peak") or {}).get("peak_gflops")
    if cpu and pk:
        lines.append(f"Peak: {pk:.1f} GFLOP/s a core ({c['peak'].get('peak_isa')}); x floor: time over the epoch's "
                     f"products at that peak on {c['threads']} thread(s).")
    lines += ["", "| configuration | s/epoch | samples/s | us/step |" + (" GFLOP/s | x floor |" if cpu else "")
              + " final test accuracy | x mnist-dp |",
              "|---|---:|---:|---:|" + ("---:|---:|" if cpu else "") + "---:|---:|"]
    for r in c["rows"]:
        if r.get("status") != "ok":
            lines.append(f"| {r['label']} | {r.get('status')} | | |" + (" | |" if cpu else "") + " | |")
            continue
        extra = ""
        if cpu:
            extra = f" {r['gflops']:.1f} |" + (f" {r['time_over_floor']:.2f} |" if "time_over_floor" in r else " |")
        a = r.get("final_test_accuracy")
        lines.append(f"| {r['label']} | {r['seconds_per_epoch']:.3f} | {r['samples_per_second']:,.0f} | "
                     f"{r['us_per_step']:.1f} |{extra} " + (f"{100 * a:.2f}%" if a is not None else "") +
                     f" | {r.get('time_over_mnistdp', float('nan')):.2f} |")
    return lines


def show_gemm_survey(rec):
    g = section(rec, "gemm_survey")
    libs = g["libraries"]
    peaks = g.get("peaks") or [g["peak_gflops"]]
    lines = [f"The products of a CPU step, library by library: {rec['machine']['cpu']}; one core's peak "
             f"{g['peak_gflops']:.1f} GFLOP/s (median of {len(peaks)} measurements, from {min(peaks):.1f} to "
             f"{max(peaks):.1f}); one thread; {g['rounds']} round(s) of {g.get('repeats')} timings, the median over "
             "the rounds."]
    if g.get("not_run"):
        lines.append("Not run: " + "; ".join(f"{k} ({v})" for k, v in g["not_run"].items()) + ".")
    batches = sorted({int(b) for lib in libs.values() for b in lib["batches"]}, reverse=True)
    products = ["fc1.fwd", "fc2.fwd", "fc2.dW", "fc2.dX", "fc1.dW"]
    for batch in batches:
        have = [l for l in libs if str(batch) in libs[l]["batches"]]
        order = sorted(have, key=lambda l: (step(rec, l, batch) if libs[l]["batches"][str(batch)]["best_set"]
                                            else 1e12))
        lines += ["", f"Batch {batch}: each product in the library's fastest layout, us (GFLOP/s)", "",
                  "| library | kernels | " + " | ".join(products) + " |", "|---|---|" + "---:|" * len(products)]
        for lib in order:
            e = libs[lib]["batches"][str(batch)]
            cells = [f"{e['products'][op]['us']:.1f} ({prodgf(rec, lib, batch, op):.0f})" if op in e["products"]
                     else "-" for op in products]
            lines.append(f"| {lib} | {libs[lib]['kernels']} | " + " | ".join(cells) + " |")
        sets = list(libs[order[0]]["batches"][str(batch)]["layout_sets"])
        lines += ["", "| library | " + " | ".join(sets) + " | step GFLOP/s |", "|---|" + "---:|" * (len(sets) + 1)]
        for lib in order:
            e = libs[lib]["batches"][str(batch)]
            cells = ["-" if e["layout_sets"][n] is None else
                     (f"**{e['layout_sets'][n]:.1f}**" if n == e["best_set"] else f"{e['layout_sets'][n]:.1f}")
                     for n in sets]
            lines.append(f"| {lib} | " + " | ".join(cells) +
                         (f" | {stepgf(rec, lib, batch):.0f} |" if e["best_set"] else " | - |"))
        work_libs = [l for l in have if "fc1_work" in libs[l]["batches"][str(batch)]]
        if work_libs:
            lines += ["", f"fc1 with its element-wise work, batch {batch} (microseconds)", "",
                      "| library | fwd + bias + ReLU | dW + SGD on w1 | sum |", "|---|---:|---:|---:|"]
            for lib in sorted(work_libs, key=lambda l: work(rec, l, batch)):
                fused = " (fused)" if libs[lib]["batches"][str(batch)]["fc1_work"]["fused"] else ""
                lines.append(f"| {lib}{fused} | {wf(rec, lib, batch):.1f} | {wu(rec, lib, batch):.1f} | "
                             f"{work(rec, lib, batch):.1f} |")
    return lines


def show_multiprocess(rec):
    mp = section(rec, "multiprocess")
    label = {"single": "1 process, {n} replica{s}", "tcp": "{n} processes, TCP (rank 0 the hub)",
             "mpi": "{n} processes, MPI (mpirun)"}
    lines = [f"CPU training over several processes: {rec['machine']['cpu']}, {rec['machine']['cpus']} CPUs; "
             f"{mp.get('openblas')}; {mp.get('mpi') or 'no mpirun'}; load average {mp.get('load_average_before')} "
             f"before, {mp.get('load_average_after')} after.", "",
             "| configuration | replicas in all | us/step (median) | each round | x 1 process, same replicas |",
             "|---|---:|---:|---|---:|"]
    for c in mp["training"]:
        n = c["processes"] if c["kind"] != "single" else c["replicas"]
        name = label[c["kind"]].format(n=n, s="" if n == 1 else "s")
        ref = next((r for r in mp["training"] if r["name"] == f"single-1x{c['replicas']}"), None)
        ratio = f"{c['median_us_per_step'] / ref['median_us_per_step']:.2f}" if ref else ""
        lines.append(f"| {name}{' (oversubscribed)' if c['oversubscribed'] else ''} | {c['replicas']} | "
                     f"{c['median_us_per_step']:.1f} | {', '.join(f'{u:.1f}' for u in c['us_per_step'])} | {ratio} |")
    lines += ["", "| group | ranks | all-reduce of 814,124 B: us (p10-p90) | algbw GB/s | busbw GB/s | any() us | "
              "broadcast 4 KB us | all-reduce / training step |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in mp["process_group"]:
        a = p["all_reduce"]
        sr = a["slowest_rank"]
        t = next((c for c in mp["training"] if c["name"] == f"{p['kind']}-{p['processes']}x1"), None)
        share = f"{100 * sr['median_us'] / t['median_us_per_step']:.0f}%" if t else ""
        lines.append(f"| {p['kind'].upper()}{' (oversubscribed)' if p['oversubscribed'] else ''} | {p['processes']} | "
                     f"{sr['median_us']:.1f} ({sr['p10_us']:.1f}-{sr['p90_us']:.1f}) | {a['algbw_gbs']:.3f} | "
                     f"{a['busbw_gbs']:.3f} | {p['any']['slowest_rank']['median_us']:.1f} | "
                     f"{p['broadcast']['slowest_rank']['median_us']:.1f} | {share} |")
    return lines


def strategies_lines(rec):
    """bench/strategies.sh's table of time and bytes per step, both strategies, from its record"""
    st = section(rec, "strategies")
    lines = ["| replicas | all-reduce us/step | DataParallel us/step | DataParallel / all-reduce | "
             "all-reduce bytes/step | DataParallel bytes/step |", "|---:|---:|---:|---:|---:|---:|"]
    for n in st["options"]["replicas"]:
        a, d = strat(rec, "allreduce", n), strat(rec, "dataparallel", n)
        mark = " (oversubscribed)" if a["oversubscribed"] else ""
        lines.append(f"| {n}{mark} | {a['median_us_per_step']:.1f} | {d['median_us_per_step']:.1f} | "
                     f"{d['median_us_per_step'] / a['median_us_per_step']:.2f} | {sbytes(rec, 'allreduce', n):,} | "
                     f"{sbytes(rec, 'dataparallel', n):,} |")
    return lines


def show_strategies(rec):
    st = section(rec, "strategies")
    where = st.get("matrix_products") if st["device"] == "cpu" else rec["machine"].get("gpu")
    lines = [f"the two strategies on {st['device']} replicas: {rec['machine']['cpu']}, {rec['machine']['cpus']} CPUs; "
             f"{where}; {st['options']['rounds']} rounds of {st['options']['steps']} steps; load average "
             f"{st.get('load_average_before')} before, {st.get('load_average_after')} after.", ""]
    lines += strategies_lines(rec)
    lines += ["", "| configuration | placement | how the replicas share the step | median us/step | each round |",
              "|---|---|---|---:|---|"]
    for c in st["training"]:
        lines.append(f"| {c['name']}{' (oversubscribed)' if c['oversubscribed'] else ''} | {c['placement']} | "
                     f"{c.get('shared_by') or '-'} | {c['median_us_per_step']:.1f} | "
                     f"{', '.join(f'{u:.1f}' for u in c['us_per_step'])} |")
    lines += ["", f"bytes/step: {st['bytes_convention']}"]
    return lines


def show_emu_step(rec):
    e = section(rec, "emu_step")
    lines = [f"emulated training step, batch 64, {e['steps']} steps a run, median of {e['rounds']} rounds "
             f"(alternated); build {e['build']}; {e['unit']}", "", "| variant | ms/step | each round |",
             "|---|---:|---|"]
    for name, v in e["variants"].items():
        lines.append(f"| {name} | {v['ms_per_step']:.3f} | {' '.join(f'{r:.3f}' for r in v['rounds_ms'])} |")
    return lines


def show_emu_epoch_check(rec):
    e = section(rec, "emu_epoch_check")
    lines = [f"one epoch of {e['data']} on emulated devices: {e['checks_passed']} checks passed, "
             f"{e['checks_failed']} failed", "", "| run | seconds an epoch | test accuracy |", "|---|---:|---:|"]
    for r in e["runs"]:
        lines.append(f"| {r['run']} | {r['seconds']:.3f} | {r['test_accuracy_percent']:.2f}% |")
    return lines


def show_cpu_ops(rec):
    c = section(rec, "cpu_ops")
    lines = [f"mnist-dp-cpu-bench: OpenBLAS {c.get('openblas_core')} kernels (OPENBLAS_CORETYPE "
             f"{c.get('openblas_coretype_env')}), {c.get('openblas_threads')} thread(s); load average "
             f"{c.get('load_average_before')} before, {c.get('load_average_after')} after; {c['aggregate']}", "",
             "| benchmark | us | cv | CPU us | GFLOP/s |", "|---|---:|---:|---:|---:|"]
    for name, b in c["benchmarks"].items():
        gfs = f"{b['FLOP/s'] / 1e9:.1f}" if "FLOP/s" in b else ""
        lines.append(f"| {name} | {b['real_time']:,.1f} | {100 * b.get('cv', 0):.0f}% | {b['cpu_time']:,.1f} | {gfs} |")
    return lines


def show_fuzz(rec):
    f = section(rec, "fuzz")
    lines = ["| run | target | inputs | findings |", "|---|---|---:|---|"]
    for r in f["runs"]:
        lines.append(f"| {r['seconds']} s | {r['target']} ({r['reads']}) | {r['inputs']:,} | {r['findings']} |")
    return lines


def show_gpu_session(rec):
    g = section(rec, "gpu_session")
    records = {rec["name"]: rec}
    lines = gpu_phases_table(records)
    if not g["emulated"]:
        lines += [""] + gpu_paths_table(records, detail=True)
    for kind, rows in g["bench"].items():
        lines.append(f"{kind}: {json.dumps(rows)}")
    lines += [f"sanitizer: {s}" for s in g["sanitizer"]]
    return lines


SHOW = {"compare": show_compare, "gemm_survey": show_gemm_survey, "multiprocess": show_multiprocess,
        "strategies": show_strategies, "emu_step": show_emu_step, "emu_epoch_check": show_emu_epoch_check, "cpu_ops": show_cpu_ops,
        "fuzz": show_fuzz, "gpu_session": show_gpu_session}


def show(rec):
    m = rec["machine"]
    lines = [f"# {rec['name']}: {rec['title']}", "",
             f"Date {rec['date']}; commit {rec['commit']}; {m.get('host') or 'host not named'}, {m.get('cpus')} CPUs "
             f"{m.get('cpu')}" + (f", {m['gpu']}" if m.get("gpu") else "") + "."]
    lines += [f"    {c}" for c in rec["commands"]]
    for kind, fig in rec["figures"].items():
        lines += ["", f"## {kind}", ""] + SHOW[kind](rec)
    for n in rec.get("notes", []):
        lines += ["", n]
    return lines


# --- Checks ------------------------------------------------------------------------------------------------------

def markdown_files(root):
    files = ["README.md", os.path.join("bench", "README.md")]
    files += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    files += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "host", "**", "README.md"),
                                                               recursive=True))
    return [f for f in files if os.path.exists(os.path.join(root, f))]


def doc_tables(text):
    """(table id, first line index, line count) of every marked table in a doc's lines."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if m:
            start = i + 1
            end = start
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            found.append((m.group(1), start, end - start))
    return lines, found


# A path into bench/results/ as the docs cite it: in backquotes, a link's target, or a bare path in the text.
CITED = re.compile(r"(?:(?<=[\s`(\[])|^)((?:\.\./)*(?:bench/)?results/[A-Za-z0-9_.\-/]*)", re.M)
ABBREVIATED = re.compile(r"`\.\.\.(_[A-Za-z0-9_.\-]+)/?`")
PLACEHOLDER = re.compile(r"DATE|HOST|DEVICE|NAME|WHAT")


def cited_paths(root, doc):
    """(path as cited, resolved path or None) of every path into bench/results/ that a markdown file cites."""
    with open(os.path.join(root, doc)) as f:
        text = f.read()
    here = os.path.dirname(doc)
    found = []
    for m in CITED.finditer(text):
        cited = m.group(1).rstrip(".")
        if PLACEHOLDER.search(cited):
            continue
        candidates = [os.path.normpath(os.path.join(here, cited)), os.path.normpath(cited)]
        found.append((cited, [c for c in candidates if c.startswith(RESULTS + os.sep) or c == RESULTS]))
    for m in ABBREVIATED.finditer(text):
        matches = [os.path.join(RESULTS, n) for n in os.listdir(os.path.join(root, RESULTS)) if n.endswith(m.group(1))]
        found.append(("..." + m.group(1), matches[:1] or [os.path.join(RESULTS, "*" + m.group(1))]))
    return found


def check_records(root, records):
    problems = []
    base = os.path.join(root, RESULTS)
    for name in sorted(os.listdir(base)):
        folder = os.path.join(base, name)
        if not os.path.isdir(folder):
            if name != "README.md":
                problems.append(f"{RESULTS}/{name}: bench/results/ holds a folder per run, not loose files")
            continue
        if name not in records:
            problems.append(f"{RESULTS}/{name}/: no record.json")
            continue
        rec = records[name]
        missing = [k for k in RECORD_KEYS if k not in rec]
        if missing:
            problems.append(f"{RESULTS}/{name}/record.json: no {', '.join(missing)}")
            continue
        if rec["name"] != name:
            problems.append(f"{RESULTS}/{name}/record.json: named {rec['name']}, not its folder's name")
        if not rec["date"] or not rec["commit"] or not rec["commands"]:
            problems.append(f"{RESULTS}/{name}/record.json: the date, the commit or the commands are empty")
        for k in ["host", "cpu", "cpus", "gpu"]:
            if k not in rec["machine"]:
                problems.append(f"{RESULTS}/{name}/record.json: the machine has no {k}")
        unknown = set(rec["figures"]) - FIGURE_KINDS
        if not rec["figures"] or unknown:
            problems.append(f"{RESULTS}/{name}/record.json: figures {sorted(unknown) or 'missing'}")
        for kind in rec["figures"]:
            if kind in SHOW:
                try:
                    SHOW[kind](rec)
                except (KeyError, TypeError, ValueError, Missing) as e:
                    problems.append(f"{RESULTS}/{name}/record.json: its {kind} figures do not read "
                                    f"({type(e).__name__}: {e})")
    return problems


IMAGES = (".png", ".svg", ".jpg")


def check_files(root, cited):
    """bench/results/ keeps records, and beside them only the plots a doc shows."""
    problems = []
    base = os.path.join(root, RESULTS)
    for folder, _, files in os.walk(base):
        for f in files:
            rel = os.path.relpath(os.path.join(folder, f), root)
            if f == "record.json" and os.path.dirname(os.path.dirname(rel)) == RESULTS:
                continue
            if rel == os.path.join(RESULTS, "README.md"):
                continue
            if rel in cited and f.endswith(IMAGES):
                continue
            problems.append(f"{rel}: neither a record nor a plot a doc shows (a run's raw files stay outside "
                            f"{RESULTS}/)")
    return problems


def check(root, records, write=False):
    problems = check_records(root, records)
    cited = set()
    for doc in markdown_files(root):
        for shown, paths in cited_paths(root, doc):
            if not any(os.path.exists(os.path.join(root, p)) for p in paths):
                problems.append(f"{doc}: cites {shown}, which does not exist")
            cited.update(paths)
    problems += check_files(root, cited)
    seen = set()
    for doc in markdown_files(root):
        path = os.path.join(root, doc)
        with open(path) as f:
            text = f.read()
        lines, found = doc_tables(text)
        changed = False
        for table_id, start, count in reversed(found):
            if table_id not in TABLES:
                problems.append(f"{doc}:{start}: results-table {table_id} is not one of bench/results_tables.py's")
                continue
            seen.add(table_id)
            if TABLES[table_id]["doc"] != doc:
                problems.append(f"{doc}:{start}: results-table {table_id} belongs in {TABLES[table_id]['doc']}")
            try:
                want = render(table_id, records)
            except Missing as e:
                problems.append(f"{doc}:{start}: results-table {table_id}: {e}")
                continue
            have = lines[start:start + count]
            if have != want:
                if write:
                    lines[start:start + count] = want
                    changed = True
                    continue
                for n, (h, w) in enumerate(zip(have + [""] * len(want), want + [""] * len(have))):
                    if h != w:
                        problems.append(f"{doc}:{start + n + 1}: results-table {table_id} differs from the records:\n"
                                        f"    doc:     {h}\n    records: {w}")
        if changed:
            with open(path, "w") as f:
                f.write("\n".join(lines))
            print(f"results_tables.py: rewrote the tables of {doc}")
    for table_id in sorted(set(TABLES) - seen):
        problems.append(f"{TABLES[table_id]['doc']}: no <!-- results-table: {table_id} --> line before its table")
    return problems


def main():
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=ROOT)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--show", nargs="+", metavar="DIR")
    a = parser.parse_args()
    if a.show:
        for folder in a.show:
            path = folder if folder.endswith(".json") else os.path.join(folder, "record.json")
            with open(path) as f:
                print("\n".join(show(json.load(f))) + "\n")
        return 0
    records = load_records(a.root)
    if a.check or a.write:
        problems = check(a.root, records, write=a.write)
        for p in problems:
            print(f"results_tables.py: {p}", file=sys.stderr)
        if problems:
            print(f"results_tables.py: {len(problems)} problem(s)", file=sys.stderr)
            return 1
        print(f"results_tables.py: {len(records)} records, {len(TABLES)} tables: the docs agree with the records")
        return 0
    status = 0
    for table_id, t in TABLES.items():
        print(f"<!-- results-table: {table_id} --> ({t['doc']})")
        try:
            print("\n".join(render(table_id, records)) + "\n")
        except Missing as e:
            print(f"(cannot build: {e})\n")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
