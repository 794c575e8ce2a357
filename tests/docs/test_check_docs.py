#!/usr/bin/env python3
"""check_docs.py passes on the tree as it is, and fails, naming what is wrong, on copies of it where one
document names something that is not there: a path in the text, a link, a path in code style, a
`namespace::function`, a `Class::member`, a type alone, a function called alone. Each twin (the same
sentence naming what exists) passes, so that the check is seen to tell the two apart.

Usage: test_check_docs.py --script check_docs.py --root DIR
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def run(script, root, *docs):
    return subprocess.run([sys.executable, script, "--root", root, *docs], capture_output=True, text=True)


def tree_copy(root, work):
    """The files the checker reads (the tracked ones), copied without .git, so that it walks the folder."""
    listed = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    copy = os.path.join(work, "tree")
    for f in listed:
        source = os.path.join(root, f)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(os.path.join(copy, f)), exist_ok=True)
            shutil.copyfile(source, os.path.join(copy, f))
    return copy


# (what is planted, the name the checker must report, the twin that exists)
CASES = [
    ("See host/command/no_such_file.cpp for the details.", "host/command/no_such_file.cpp",
     "See host/command/train_command.cpp for the details."),
    ("A [link](host/training/gone.hpp) to a file.", "host/training/gone.hpp",
     "A [link](host/training/trainer.hpp) to a file."),
    ("In code style: `kernels/cuda/gemm/v9_gone.cu`.", "kernels/cuda/gemm/v9_gone.cu",
     "In code style: `kernels/cuda/gemm/v1_naive.cu`."),
    ("The function `cpu::no_such_function` does it.", "cpu::no_such_function",
     "The function `cpu::linear_forward` does it."),
    ("The member `Trainer::no_such_member` does it.", "Trainer::no_such_member",
     "The member `Trainer::run` does it."),
    ("A namespace that is not there: `nowhere::function`.", "nowhere::function",
     "A namespace that is there: `ref::sgd_step`."),
    ("The class `NoSuchListener` joins them.", "NoSuchListener", "The class `CheckpointListener` joins them."),
    ("The call `make_no_such_thing()` builds them.", "make_no_such_thing()",
     "The call `make_replicas()` builds them."),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    failures = 0

    def expect(ok, what, result=None):
        nonlocal failures
        print(("passed: " if ok else "FAILED: ") + what)
        if not ok:
            failures += 1
            if result is not None:
                print(result.stdout + result.stderr)

    real = run(args.script, args.root)
    expect(real.returncode == 0, "the tree's documents name only what exists", real)
    with tempfile.TemporaryDirectory() as work:
        copy = tree_copy(args.root, work)
        readme = os.path.join(copy, "README.md")
        original = open(readme, encoding="utf-8").read()
        for planted, name, twin in CASES:
            with open(readme, "w", encoding="utf-8") as h:
                h.write(original + "\n" + planted + "\n")
            result = run(args.script, copy, "README.md")
            expect(result.returncode == 1 and name in result.stdout and "README.md:" in result.stdout,
                   "planted in README.md, reported: %s" % name, result)
            with open(readme, "w", encoding="utf-8") as h:
                h.write(original + "\n" + twin + "\n")
            result = run(args.script, copy, "README.md")
            expect(result.returncode == 0, "its twin passes: %s" % twin, result)
        # A file moved away: every document that names it fails, with its line.
        os.remove(os.path.join(copy, "host", "command", "resume.cpp"))
        result = run(args.script, copy)
        expect(result.returncode == 1 and "resume.cpp" in result.stdout, "a file removed from the tree is reported "
               "where a document names it", result)
    print("%d passed, %d failed" % (2 * len(CASES) + 2 - failures, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
