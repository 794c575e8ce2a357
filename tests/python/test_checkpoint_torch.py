#!/usr/bin/env python3
"""Checkpoints between mnist-dp and PyTorch, both ways.

    test_checkpoint_torch.py --tool build/.../tests/checkpoint_tool [--keep DIR]

C++ -> PyTorch: checkpoint_tool writes checkpoints whose every value is known (see tests/checkpoint_tool.cpp);
SimpleNet().load_state_dict(load_file(path)) must load them strictly, value for value, with the metadata.
PyTorch -> C++: files written by safetensors.torch from a seeded SimpleNet must read back in C++ (checked through
`checkpoint_tool dump`), and files that safetensors itself refuses must be refused in C++ too.

Needs torch and safetensors (scripts/setup-python.sh). Prints one line per check and closes with
'N passed, M failed'; exits non-zero when any check failed.
"""

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import traceback

import torch
import safetensors.torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnistdp_checkpoint as mc  # noqa: E402

NAMES = [name for name, _ in mc.PARAMS]


def pattern(seed):
    """checkpoint_tool's values: (((i * 2654435761 + seed) mod 2^64) mod 2001 - 1000) / 4096, exact in float32."""
    # Python integers do not wrap, so the C++ side's wrap mod 2^64 is written out.
    values = [(((k * 2654435761 + seed) % 2**64) % 2001 - 1000) / 4096 for k in range(mc.PARAM_COUNT)]
    return mc.unflatten(torch.tensor(values, dtype=torch.float32).numpy())


class Checks:
    def __init__(self, tool, workdir):
        self.tool = tool
        self.dir = workdir
        self.passed = 0
        self.failed = 0

    def path(self, name):
        return os.path.join(self.dir, name)

    def run(self, name, fn):
        try:
            fn()
            print(f"ok      {name}")
            self.passed += 1
        except Exception:  # a check that breaks in any way is a failed check, reported with its traceback
            print(f"FAILED  {name}")
            traceback.print_exc(file=sys.stdout)
            self.failed += 1
        sys.stdout.flush()

    def tool_run(self, *args):
        return subprocess.run([self.tool, *args], capture_output=True, text=True, timeout=60)

    def write(self, path, seed, momentum=False):
        r = self.tool_run("write", path, str(seed), *(["--momentum"] if momentum else []))
        assert r.returncode == 0, f"checkpoint_tool write failed: {r.stderr}"

    def dump(self, path):
        r = self.tool_run("dump", path)
        assert r.returncode == 0, f"checkpoint_tool dump {path} failed ({r.returncode}): {r.stderr}"
        return json.loads(r.stdout)

    def refused(self, path, message):
        r = self.tool_run("dump", path)
        assert r.returncode == 1, f"C++ accepted {path} (exit {r.returncode}); expected a refusal"
        assert r.stderr.startswith(f"checkpoint_tool: {path}: "), f"message does not start with the path: {r.stderr}"
        assert message in r.stderr, f"expected '{message}' in: {r.stderr}"


def assert_equal_tensors(actual, expected, what):
    for name in NAMES:
        a, e = actual[name], expected[name]
        assert tuple(a.shape) == tuple(e.shape), f"{what} {name}: shape {tuple(a.shape)}, expected {tuple(e.shape)}"
        assert a.dtype == torch.float32, f"{what} {name}: dtype {a.dtype}"
        if not torch.equal(a, e):
            bad = (a != e).nonzero()[0].tolist()
            raise AssertionError(f"{what} {name}{bad}: {a[tuple(bad)].item()}, expected {e[tuple(bad)].item()}")


def assert_dump_matches(dumped, tensors, what):
    """checkpoint_tool's per-tensor summary against tensors held in Python."""
    assert set(dumped) == set(NAMES), f"{what}: tensors {sorted(dumped)}"
    for name in NAMES:
        t, d = tensors[name].detach(), dumped[name]
        assert d["shape"] == list(t.shape), f"{what} {name}: C++ shape {d['shape']}, PyTorch {list(t.shape)}"
        first = [float(v) for v in t.flatten()[:8]]
        assert d["first"] == first, f"{what} {name}: C++ first values {d['first']}, PyTorch {first}"
        total = t.double().sum().item()
        assert math.isclose(d["sum"], total, rel_tol=1e-9, abs_tol=1e-9), \
            f"{what} {name}: C++ sum {d['sum']!r}, PyTorch {total!r}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", required=True, help="the checkpoint_tool executable")
    parser.add_argument("--keep", help="write the files here and keep them (default: a temporary folder)")
    args = parser.parse_args()
    if not os.access(args.tool, os.X_OK):
        print(f"test_checkpoint_torch: {args.tool} is not an executable; build the checkpoint_tool target")
        return 1
    print(f"torch {torch.__version__}, safetensors {safetensors.__version__}")

    with tempfile.TemporaryDirectory(prefix="mdp-ckpt-") as tmp:
        workdir = args.keep or tmp
        os.makedirs(workdir, exist_ok=True)
        c = Checks(os.path.abspath(args.tool), workdir)

        # ---- C++ -> PyTorch ----

        def cpp_to_torch(seed, momentum):
            path = c.path(f"cpp-{seed}-{int(momentum)}.safetensors")
            c.write(path, seed, momentum)
            state = load_file(path)
            assert sorted(state) == sorted(NAMES), f"tensors in the file: {sorted(state)}"
            model = mc.SimpleNet()
            model.load_state_dict(state)  # strict: no missing and no unexpected keys
            assert_equal_tensors(dict(model.state_dict()), pattern(seed), "loaded parameter")
            assert mc.training_state(path) == {
                "epoch": 3, "step": 2814, "seed": seed, "data_fingerprint": 0x0123456789ABCDEF ^ seed}
            assert mc.read_metadata(path)["writer"] == "checkpoint_tool"
            m = mc.load_momentum(path)
            if momentum:
                assert m is not None, "no momentum in the file"
                assert_equal_tensors(m, pattern(seed + 1), "momentum")
            else:
                assert m is None, "momentum in a file written without it"
            # The model runs: a forward pass gives finite logits of the right shape.
            out = model(torch.zeros(2, 1, 28, 28))
            assert out.shape == (2, 10) and torch.isfinite(out).all()

        c.run("C++ checkpoint loads strictly into SimpleNet, every value", lambda: cpp_to_torch(7, False))
        c.run("C++ checkpoint with momentum: strict load, momentum decoded", lambda: cpp_to_torch(8, True))
        c.run("C++ checkpoint, seed 2^64-1 (metadata at its limit)", lambda: cpp_to_torch(2**64 - 1, True))

        def header_layout():
            path = c.path("layout.safetensors")
            c.write(path, 1)
            with open(path, "rb") as f:
                raw = f.read()
            (n,) = struct.unpack("<Q", raw[:8])
            assert n % 8 == 0, f"header length {n} is not a multiple of 8"
            header = json.loads(raw[8:8 + n])
            offsets = [header[name]["data_offsets"] for name in NAMES]
            assert offsets[0][0] == 0 and offsets[-1][1] == len(raw) - 8 - n, f"offsets {offsets}"
            assert all(offsets[i][1] == offsets[i + 1][0] for i in range(3)), f"not contiguous: {offsets}"

        c.run("C++ header: padded to 8 bytes, tensors contiguous in mnist-dp's flat order", header_layout)

        # ---- PyTorch -> C++ ----

        def torch_to_cpp(writer):
            torch.manual_seed(1234)
            model = mc.SimpleNet()
            path = c.path(f"torch-{writer}.safetensors")
            if writer == "save_file":
                save_file(model.state_dict(), path)
            else:
                # The metadata Hugging Face's transformers writes beside its weights.
                safetensors.torch.save_model(model, path, metadata={"format": "pt"})
            d = c.dump(path)
            assert d["has_training_state"] is False, "a PyTorch file read as an mnist-dp training state"
            assert d["momentum"] is None
            assert d["extra"] == ({} if writer == "save_file" else {"format": "pt"}), f"extra {d['extra']}"
            assert_dump_matches(d["tensors"], model.state_dict(), "parameter")

        c.run("PyTorch save_file(SimpleNet().state_dict()) reads back in C++", lambda: torch_to_cpp("save_file"))
        c.run("PyTorch save_model(SimpleNet(), metadata) reads back in C++, metadata kept", lambda: torch_to_cpp("save_model"))

        def torch_state_to_cpp():
            # A real SGD momentum buffer, after two steps of torch.optim.SGD with momentum 0.9.
            torch.manual_seed(99)
            model = mc.SimpleNet()
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            for _ in range(2):
                opt.zero_grad()
                loss = nn_loss(model)
                loss.backward()
                opt.step()
            named = dict(model.named_parameters())
            momentum = {name: opt.state[named[name]]["momentum_buffer"] for name in NAMES}
            path = c.path("torch-state.safetensors")
            mc.save_checkpoint(path, model.state_dict(), momentum, epoch=2, step=1876, seed=5,
                               data_fingerprint=0xFEDCBA9876543210, extra={"lr": "0.01"})
            d = c.dump(path)
            assert d["has_training_state"] is True
            assert (d["epoch"], d["step"], d["seed"], d["data_fingerprint"]) == (2, 1876, "5", "fedcba9876543210"), d
            assert d["extra"] == {"lr": "0.01"}, d["extra"]
            assert_dump_matches(d["tensors"], model.state_dict(), "parameter")
            assert_dump_matches(d["momentum"], momentum, "momentum")

        c.run("PyTorch model + SGD momentum written with mnist-dp's metadata reads back in C++", torch_state_to_cpp)

        def round_trip():
            src = c.path("rt-src.safetensors")
            c.write(src, 11, momentum=True)
            dst = c.path("rt-dst.safetensors")
            meta = mc.read_metadata(src)
            st = mc.training_state(src)
            mc.save_checkpoint(dst, load_file(src), mc.load_momentum(src), extra={"writer": meta["writer"]}, **st)
            a, b = c.dump(src), c.dump(dst)
            assert a == b, "C++ -> Python -> C++ changed the checkpoint"

        c.run("C++ -> Python -> C++ round trip, momentum included, unchanged", round_trip)

        # ---- refusals: what safetensors refuses, C++ refuses too, saying why ----

        def refusals():
            torch.manual_seed(3)
            state = mc.SimpleNet().state_dict()
            p = c.path("f64.safetensors")
            save_file({k: v.double() for k, v in state.items()}, p)
            c.refused(p, "tensor fc1.weight has dtype F64; only F32 is accepted")

            p = c.path("transposed.safetensors")
            save_file({**state, "fc1.weight": state["fc1.weight"].t().contiguous()}, p)
            c.refused(p, "tensor fc1.weight has shape [784, 256]; SimpleNet's is [256, 784] (transposed?")

            p = c.path("missing.safetensors")
            save_file({k: v for k, v in state.items() if k != "fc2.bias"}, p)
            c.refused(p, "tensor fc2.bias is missing")

            good = c.path("good.safetensors")
            save_file(state, good)
            with open(good, "rb") as f:
                raw = f.read()
            for name, data, message in (
                    ("truncated", raw[:-1], "run past the end of the data"),
                    ("appended", raw + b"\0", "1 bytes after the last tensor"),
                    ("empty", b"", "shorter than the 8-byte header length")):
                p = c.path(f"{name}.safetensors")
                with open(p, "wb") as f:
                    f.write(data)
                try:
                    load_file(p)
                except Exception:
                    pass
                else:
                    raise AssertionError(f"safetensors itself accepted the {name} file; the test is wrong")
                c.refused(p, message)

        c.run("files safetensors refuses (and wrong dtype, shape, names) are refused in C++ with the reason",
              refusals)

        print(f"{c.passed} passed, {c.failed} failed")
        return 0 if c.failed == 0 else 1


def nn_loss(model):
    x = torch.randn(16, 784)
    y = torch.randint(0, 10, (16,))
    return torch.nn.functional.cross_entropy(model(x), y)


if __name__ == "__main__":
    sys.exit(main())
