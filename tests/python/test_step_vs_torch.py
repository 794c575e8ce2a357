#!/usr/bin/env python3
"""One SGD step in PyTorch against mnist-dp's next step, from the same checkpoint.

Interface (the mnist-dp hooks it expects; see also --mnist-dp below):

  before   a checkpoint written by `mnist-dp train --save`, after K steps (metadata mnist_dp.step = K, and
           mnist_dp.seed; mnist_dp.momentum when the run uses momentum)
  after    mnist-dp's checkpoint one step later (mnist_dp.step = K + 1), e.g. from
           `mnist-dp train --resume before --max-steps K+1 --save after`
  data     the data folder both runs trained on (the four MNIST files, raw or .gz)
  tool     tests' checkpoint_tool, which prints the rows of step K: mnist-dp's epoch order, host/model/init.hpp
           epoch_order(seed, epoch), rows [s * B, s * B + B) with epoch = K // steps_per_epoch and
           s = K % steps_per_epoch, steps_per_epoch = ceil(train_count / B)

The SGD settings come from the options, else from the checkpoint's metadata when mnist-dp stores them
(mnist_dp.batch_size, mnist_dp.sgd.lr, mnist_dp.sgd.momentum, mnist_dp.sgd.dampening,
mnist_dp.sgd.weight_decay, mnist_dp.sgd.nesterov), else the reference program's (batch 64, lr 0.01, no momentum).
The hidden layer's activation likewise: --activation, else mnist_dp.activation, else relu; PyTorch's SimpleNet
takes its module (nn.ReLU() or nn.GELU()), so that one step of mnist-dp's CPU path with --activation gelu is held
to one step through nn.GELU() and its autograd.

PyTorch loads `before` into SimpleNet (and the momentum into torch.optim.SGD's state), takes one step of the
mean cross-entropy over those rows, and the result must match `after`:
  - each parameter tensor within 1e-5 relative (max |difference| / max |value|);
  - the update itself (after - before) within 1e-3 relative: the update is about 1e-4 of a parameter, so this is
    the check that sees a wrong gradient, and float32 rounding of p - lr * g alone puts about 1e-4 on it;
  - the momentum buffers, when `after` has them, within 1e-5 relative.

Usage:
  test_step_vs_torch.py --before B --after A --data DIR --tool checkpoint_tool [--lr ...]
  test_step_vs_torch.py --mnist-dp build/mnist-dp --data DIR --tool checkpoint_tool [--steps K] [--seed S]
      runs mnist-dp itself:  mnist-dp train --data DIR --seed S --max-steps K --save before --no-progress
                             mnist-dp train --data DIR --seed S --resume before --max-steps K+1 --save after
      (plus the SGD options given here, and --device, --replicas when given), then compares as above.

Prints one line per check and closes with 'N passed, M failed'; exits non-zero when any check failed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnistdp_checkpoint as mc  # noqa: E402

PARAM_TOL = 1e-5
UPDATE_TOL = 1e-3
MOMENTUM_TOL = 1e-5


def setting(args, meta, name, key, default, kind):
    value = getattr(args, name)
    if value is not None:
        return value
    if key in meta:
        return kind(meta[key]) if kind is not bool else meta[key] in ("1", "true", "True")
    return default


def run_mnist_dp(args, workdir, sgd_flags):
    before = os.path.join(workdir, "before.safetensors")
    after = os.path.join(workdir, "after.safetensors")
    common = [args.mnist_dp, "train", "--data", args.data, "--seed", str(args.seed), "--no-progress", *sgd_flags]
    if args.device:
        common += ["--device", args.device]
    if args.replicas:
        common += ["--replicas", str(args.replicas)]
    if args.activation:
        common += ["--activation", args.activation]
    for cmd in (common + ["--max-steps", str(args.steps), "--save", before],
                common + ["--resume", before, "--max-steps", str(args.steps + 1), "--save", after]):
        print("running:", " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"mnist-dp failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return before, after


def batch_rows(tool, seed, epoch, step, batch, count):
    r = subprocess.run([tool, "batch-indices", str(seed), str(epoch), str(step), str(batch), str(count)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"checkpoint_tool batch-indices failed: {r.stderr}")
    return torch.tensor(json.loads(r.stdout), dtype=torch.long)


def relative(a, b, scale):
    return ((a - b).abs().max() / max(scale.abs().max().item(), 1e-30)).item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before")
    p.add_argument("--after")
    p.add_argument("--mnist-dp", help="run this mnist-dp to make --before and --after")
    p.add_argument("--data", required=True)
    p.add_argument("--tool", required=True, help="the checkpoint_tool executable")
    p.add_argument("--steps", type=int, default=3, help="with --mnist-dp: K, the steps before the compared one")
    p.add_argument("--seed", type=int, default=0, help="with --mnist-dp: the run's seed")
    p.add_argument("--device", help="with --mnist-dp: its --device")
    p.add_argument("--replicas", type=int, help="with --mnist-dp: its --replicas")
    p.add_argument("--activation", choices=sorted(mc.ACTIVATIONS), help="with --mnist-dp: its --activation; "
                   "else the checkpoint's")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--momentum", type=float)
    p.add_argument("--dampening", type=float)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--nesterov", action="store_true", default=None)
    args = p.parse_args()
    if bool(args.mnist_dp) == bool(args.before or args.after) or (not args.mnist_dp and not (args.before and args.after)):
        p.error("give either --before and --after, or --mnist-dp")

    with tempfile.TemporaryDirectory(prefix="mdp-step-") as workdir:
        if args.mnist_dp:
            flags = []
            for name in ("batch_size", "lr", "momentum", "dampening", "weight_decay"):
                if getattr(args, name) is not None:
                    flags += ["--" + name.replace("_", "-"), str(getattr(args, name))]
            if args.nesterov:
                flags.append("--nesterov")
            before, after = run_mnist_dp(args, workdir, flags)
        else:
            before, after = args.before, args.after
        return compare(args, before, after)


def compare(args, before, after):
    passed = failed = 0

    def check(ok, line):
        nonlocal passed, failed
        print(("ok      " if ok else "FAILED  ") + line)
        passed, failed = passed + ok, failed + (not ok)

    state = mc.training_state(before)
    if state is None:
        print(f"test_step_vs_torch: {before} has no mnist-dp training state (step, seed); written by mnist-dp?")
        return 1
    meta = mc.read_metadata(before)
    batch = setting(args, meta, "batch_size", "mnist_dp.batch_size", 64, int)
    sgd = dict(lr=setting(args, meta, "lr", "mnist_dp.sgd.lr", 0.01, float),
               momentum=setting(args, meta, "momentum", "mnist_dp.sgd.momentum", 0.0, float),
               dampening=setting(args, meta, "dampening", "mnist_dp.sgd.dampening", 0.0, float),
               weight_decay=setting(args, meta, "weight_decay", "mnist_dp.sgd.weight_decay", 0.0, float),
               nesterov=setting(args, meta, "nesterov", "mnist_dp.sgd.nesterov", False, bool))

    activation = args.activation or mc.activation_of(before)
    check(mc.activation_of(before) == activation and mc.activation_of(after) == activation,
          f"both checkpoints record the activation {activation}: {mc.activation_of(before)}, "
          f"{mc.activation_of(after)}")

    x, y = mc.load_split(args.data, "train")
    count = x.shape[0]
    steps_per_epoch = (count + batch - 1) // batch
    k = state["step"]
    epoch, step_in_epoch = divmod(k, steps_per_epoch)
    rows = batch_rows(args.tool, state["seed"], epoch, step_in_epoch, batch, count)
    print(f"step {k} (epoch {epoch}, step {step_in_epoch} of {steps_per_epoch}), {len(rows)} rows, seed "
          f"{state['seed']}, batch {batch}, SGD {sgd}, activation {activation}")

    after_state = mc.training_state(after)
    check(after_state is not None and after_state["step"] == k + 1,
          f"the second checkpoint is one step later: step {after_state and after_state['step']}, expected {k + 1}")

    model = mc.SimpleNet(activation)
    model.load_state_dict(load_file(before))
    start = {name: t.clone() for name, t in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), **sgd)
    named = dict(model.named_parameters())
    momentum = mc.load_momentum(before)
    if momentum is not None:
        for name, buf in momentum.items():
            opt.state[named[name]]["momentum_buffer"] = buf.clone()
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x[rows]), y[rows])
    loss.backward()
    opt.step()
    print(f"PyTorch loss of the batch: {loss.item()!r}")

    theirs = load_file(after)
    ours = model.state_dict()
    for name, _ in mc.PARAMS:
        r = relative(theirs[name], ours[name], ours[name])
        check(r <= PARAM_TOL, f"{name}: parameters differ by {r:.2e} relative (limit {PARAM_TOL:g})")
        update_theirs, update_ours = theirs[name] - start[name], ours[name] - start[name]
        r = relative(update_theirs, update_ours, update_ours)
        check(r <= UPDATE_TOL, f"{name}: the update differs by {r:.2e} relative (limit {UPDATE_TOL:g})")

    their_momentum = mc.load_momentum(after)
    if sgd["momentum"] != 0:
        check(their_momentum is not None, "mnist-dp's checkpoint holds the momentum buffers")
    if their_momentum is not None and sgd["momentum"] != 0:
        for name, _ in mc.PARAMS:
            buf = opt.state[named[name]]["momentum_buffer"]
            r = relative(their_momentum[name], buf, buf)
            check(r <= MOMENTUM_TOL, f"{name}: momentum differs by {r:.2e} relative (limit {MOMENTUM_TOL:g})")

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
