#!/usr/bin/env python3
"""Checks docs/architecture.md's table "From `Trainer::step` to the first kernel" against the program: runs one
training step of mnist-dp on an emulated device under gdb, stops at the first kernel launch after
`Trainer::step` is entered, and compares the backtrace's frames with the table's rows, function and file.

    tests/docs/check_step_frames.py --binary MNIST_DP --data DIR [--doc FILE] [--self-test]

The binary must carry debug information and keep its calls in tail position (preset emu-asan's build:
RelWithDebInfo, -fno-optimize-sibling-calls; gdb shows inlined calls as frames of their own). The frames must be
the table's rows, one for one and in order, each in its row's file. Frames of the C++ library (std::function's
call operator) are plumbing, not steps, and are passed over. The walk ends at the first frame in the table's
last file, the project's one place to launch.

--self-test: also checks that the comparison fails on two altered copies of the table (a row the backtrace
shows deleted, and two rows swapped), so that the check can fail.

Exit status: 0 when the frames agree, 1 when they do not (the frames listed), 77 when gdb is not installed,
2 on a usage error.
"""
import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile

HEADING = "From `Trainer::step` to the first kernel"
FIRST_FRAME = "Trainer::step"
IDX_FILES = {"train-images-idx3-ubyte": (16, 784), "train-labels-idx1-ubyte": (8, 1),
             "t10k-images-idx3-ubyte": (16, 784), "t10k-labels-idx1-ubyte": (8, 1)}


def table_rows(doc_text):
    """The table's rows under HEADING, as (name, file, text): the first code-quoted name of the first column
    ("Trainer::step", "detail::launch") and the second column's file."""
    at = doc_text.find(HEADING)
    if at < 0:
        raise ValueError(f"no paragraph headed '{HEADING}'")
    rows = []
    for line in doc_text[at:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] == "frame" or set(cells[0]) <= set("-: "):
            continue
        name = re.search(r"`([^`]+)`", cells[0])
        if not name:
            raise ValueError(f"a row names no function in code quotes: {line}")
        # A lambda's row names the function it is written in; its frame is the lambda's own.
        lambda_of = "::<lambda>" if "lambda" in cells[0] else ""
        rows.append((name.group(1) + lambda_of, cells[1], cells[0]))
    if not rows:
        raise ValueError(f"no table under '{HEADING}'")
    return rows


def strip_templates(name):
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def parse_frame(line):
    """'#8  0x... in mnistdp::CudaStep::gradients (this=..., ...) at /src/host/cuda/cuda_step.cpp:71' ->
    ('CudaStep::gradients', '/src/host/cuda/cuda_step.cpp'); None for a line that is no frame."""
    m = re.match(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(.*)$", line)
    if not m:
        return None
    rest, path = m.group(1), ""
    at = re.search(r" at (\S+):\d+$", rest)
    if at:
        path, rest = at.group(1), rest[:at.start()]
    else:
        rest = re.sub(r" from \S+$", "", rest)
    # Drop the argument values, then the parameter types where gdb spells them ("run(std::function<...>
    # const&)"): each the last parenthesised group at the top level.
    rest = drop_last_group(drop_last_group(rest))
    name = strip_templates(rest).replace("(anonymous namespace)::", "")
    name = re.sub(r"^mnistdp::", "", name)
    return name, path


def drop_last_group(text):
    text = re.sub(r"\s+const$", "", text.rstrip())
    if not text.endswith(")") or text.endswith("operator()"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text[:i].rstrip()
    return text


def run_gdb(binary, data):
    commands = ["set pagination off", "set print frame-arguments none", "set confirm off",
                "break mnistdp::Trainer::step", "run", "delete", "break mnistdp::emu::enqueue_launch",
                "continue", "bt", "kill"]
    argv = ["gdb", "-batch", "-nx"]
    for c in commands:
        argv += ["-ex", c]
    argv += ["--args", binary, "train", "--data", data, "--device", "cuda", "--no-progress", "--epochs", "1",
             "--max-steps", "1"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    return out.stdout + out.stderr


def frames_of(gdb_output):
    frames = [f for f in (parse_frame(line) for line in gdb_output.splitlines()) if f]
    if not frames:
        raise ValueError("gdb printed no backtrace:\n" + gdb_output[-3000:])
    return frames


def row_matches(row, name, path):
    """Whether a frame (name, path) is the row's: the same function (a lambda's frame for a lambda's row:
    gcc names it '{lambda(int)#1}', clang '$_0'), in the row's file."""
    want = row[0]
    if want.endswith("::<lambda>"):
        outer = want[:-len("::<lambda>")]
        is_row = outer in name and ("lambda" in name or "$_" in name)
    else:
        is_row = (name == want or name.endswith("::" + want)) and "lambda" not in name and "$_" not in name
    return is_row and path.endswith(row[1])


def compare(frames, rows):
    """The frames from Trainer::step down to the launch (outermost first) against the rows; returns
    (problems, the frames walked)."""
    top = next((i for i, (name, _) in enumerate(frames) if name.endswith(FIRST_FRAME)), None)
    if top is None:
        return [f"no frame of {FIRST_FRAME} in the backtrace"], []
    walked = []
    launch_file = rows[-1][1]
    for name, path in reversed(frames[:top + 1]):
        if name.startswith("std::"):
            continue
        walked.append((name, path))
        if path.endswith(launch_file):
            break
    else:
        return [f"no frame in {launch_file} below {FIRST_FRAME}"], walked
    problems = []
    for i, (name, path) in enumerate(walked):
        if i >= len(rows):
            problems.append(f"frame {name} ({path or 'no file'}) is past the table's last row")
        elif not row_matches(rows[i], name, path):
            problems.append(f"frame {i + 1}, {name} ({path or 'no file'}), is not row {i + 1}: {rows[i][2]} "
                            f"in {rows[i][1]}")
    for row in rows[len(walked):]:
        problems.append(f"row {row[2]} ({row[1]}) has no frame")
    return problems, walked


def small_data(source, target, rows=192):
    """The first `rows` images of each file of the data set in `source` (raw or .gz), as raw IDX in target."""
    os.makedirs(target, exist_ok=True)
    for name, (header, record) in IDX_FILES.items():
        path = os.path.join(source, name)
        opener = open
        if not os.path.exists(path):
            path, opener = path + ".gz", gzip.open
        with opener(path, "rb") as f:
            head = bytearray(f.read(header))
            body = f.read(rows * record)
        head[4:8] = rows.to_bytes(4, "big")
        with open(os.path.join(target, name), "wb") as f:
            f.write(bytes(head) + body)


def report(problems, walked, rows, label):
    for name, path in walked:
        print(f"  {name}  {os.path.relpath(path) if path.startswith('/') else path}")
    if problems:
        print(f"{label}: the backtrace and the table disagree:")
        for p in problems:
            print("  " + p)
    else:
        print(f"{label}: the backtrace's {len(walked)} frames are the table's, in order "
              f"({len(rows)} rows in {len({r[1] for r in rows})} files)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--data", required=True, help="a folder with the MNIST files (raw or .gz)")
    parser.add_argument("--doc", default=os.path.join(os.path.dirname(__file__), "../../docs/architecture.md"))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if shutil.which("gdb") is None:
        print("check_step_frames: gdb is not installed (scripts/setup.sh installs it): skipped")
        return 77
    with open(args.doc, encoding="utf-8") as f:
        rows = table_rows(f.read())
    with tempfile.TemporaryDirectory() as work:
        small_data(args.data, os.path.join(work, "data"))
        output = run_gdb(args.binary, os.path.join(work, "data"))
    frames = frames_of(output)
    problems, walked = compare(frames, rows)
    report(problems, walked, rows, args.doc)
    failed = bool(problems)
    if args.self_test and not failed:
        deleted = rows[:1] + rows[2:]
        swapped = list(rows)
        swapped[1], swapped[2] = swapped[2], swapped[1]
        for what, altered in (("a row deleted", deleted), ("two rows swapped", swapped)):
            caught = bool(compare(frames, altered)[0])
            print(f"self-test: {what}: {'reported' if caught else 'NOT reported'}")
            failed |= not caught
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
