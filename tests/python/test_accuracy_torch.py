#!/usr/bin/env python3
"""A checkpoint written by mnist-dp, loaded into the reference SimpleNet, gets mnist-dp's test accuracy.

Interface (the mnist-dp hook it expects):

  mnist-dp eval --checkpoint PATH --data DIR --json
      prints, as its last line of standard output, one JSON object with at least
      {"test_loss": <mean cross-entropy over the test set>, "correct": <int>, "count": <int>}

Usage:
  test_accuracy_torch.py --checkpoint PATH --data DIR --mnist-dp build/mnist-dp [--train-epochs N]
      with --train-epochs, first makes the checkpoint: mnist-dp train --data DIR --epochs N --save PATH
  test_accuracy_torch.py --checkpoint PATH --data DIR --expected-correct N [--expected-loss L]
      (the numbers as mnist-dp reported them, e.g. from its --metrics file)

PyTorch loads the checkpoint with SimpleNet().load_state_dict(safetensors.torch.load_file(PATH)), strictly,
evaluates the test split normalised as the reference does, and must find:
  - the same number of correct answers, give or take the test images whose two best logits are within 1e-4 of
    each other (there, float32 rounding in a different summation order can decide either way; the count of
    such images is printed, and is usually 0);
  - the same mean loss within 1e-5 relative.

Prints one line per check and closes with 'N passed, M failed'; exits non-zero when any check failed.
"""

import argparse
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnistdp_checkpoint as mc  # noqa: E402

TIE_MARGIN = 1e-4
LOSS_TOL = 1e-5


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--mnist-dp", help="run `mnist-dp eval --checkpoint PATH --data DIR --json` for its numbers")
    p.add_argument("--train-epochs", type=int, help="with --mnist-dp: train this many epochs into --checkpoint first")
    p.add_argument("--expected-correct", type=int)
    p.add_argument("--expected-loss", type=float)
    args = p.parse_args()
    if bool(args.mnist_dp) == (args.expected_correct is not None):
        p.error("give either --mnist-dp or --expected-correct")

    if args.train_epochs:
        if not args.mnist_dp:
            p.error("--train-epochs needs --mnist-dp")
        cmd = [args.mnist_dp, "train", "--data", args.data, "--epochs", str(args.train_epochs), "--save",
               args.checkpoint, "--no-progress"]
        print("running:", " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            print(f"mnist-dp train failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
            return 1

    if args.mnist_dp:
        cmd = [args.mnist_dp, "eval", "--checkpoint", args.checkpoint, "--data", args.data, "--json"]
        print("running:", " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(f"mnist-dp eval failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
            return 1
        theirs = json.loads(r.stdout.strip().splitlines()[-1])
        expected_correct, expected_loss, expected_count = theirs["correct"], theirs["test_loss"], theirs["count"]
    else:
        expected_correct, expected_loss, expected_count = args.expected_correct, args.expected_loss, None

    model = mc.SimpleNet(mc.activation_of(args.checkpoint))  # the one it was trained with
    model.load_state_dict(load_file(args.checkpoint))  # strict, as a PyTorch user would load it
    model.eval()
    x, y = mc.load_split(args.data, "test")
    with torch.no_grad():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y, reduction="sum").double().item() / len(y)
        top2 = logits.topk(2, dim=1).values
        near_ties = int(((top2[:, 0] - top2[:, 1]) < TIE_MARGIN).sum())
        correct = int((logits.argmax(dim=1) == y).sum())

    passed = failed = 0

    def check(ok, line):
        nonlocal passed, failed
        print(("ok      " if ok else "FAILED  ") + line)
        passed, failed = passed + ok, failed + (not ok)

    print(f"PyTorch: {correct}/{len(y)} correct ({100.0 * correct / len(y):.2f}%), mean loss {loss!r}, "
          f"{near_ties} near-ties")
    if expected_count is not None:
        check(expected_count == len(y), f"mnist-dp evaluated {expected_count} test images, PyTorch {len(y)}")
    check(abs(correct - expected_correct) <= near_ties,
          f"correct answers: mnist-dp {expected_correct}, PyTorch {correct} (near-ties allowed: {near_ties})")
    if expected_loss is not None:
        rel = abs(loss - expected_loss) / max(abs(loss), 1e-30)
        check(rel <= LOSS_TOL, f"mean test loss: mnist-dp {expected_loss!r}, PyTorch {loss!r}, {rel:.2e} relative")

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
