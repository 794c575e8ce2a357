#!/usr/bin/python3
"""The reference program (SimpleNet, SGD lr 0.01, batch 64) in PyTorch, as the peer mnist-dp is measured against.

Variants:
  loader   as written: a DataLoader with shuffle=True over a data set that converts and normalises every sample
           on access (ToTensor + Normalize((0.5,), (0.5,)), written out so torchvision is not needed)
  tensor   the data normalised once into one tensor on the device, batches taken by a shuffled index (on a GPU:
           PyTorch eager with the data on the device)
  compile  as tensor, with the model compiled by torch.compile(mode="reduce-overhead") (PyTorch 2.0 or later; on a
           GPU that mode replays the compiled forward and backward as CUDA graphs)
  graphs   as tensor, with the whole step (the batch's gather, forward, loss, backward, SGD) captured once in a
           torch.cuda.graph and replayed for every full batch, each step copying only its 64 indices in (the
           last, short batch of an epoch runs eagerly); needs a CUDA device

It reads the same IDX files as mnist-dp (raw or .gz) and prints the reference program's loss lines, then one JSON
object per epoch on lines starting with "RESULT " for scripts.
"""
import argparse
import gzip
import json
import os
import re
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


class SimpleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = nn.functional.relu(self.fc1(x))
        return self.fc2(x)


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find_file(folder, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    sys.exit(f"simplenet_pytorch.py: {folder}: no {stem} (or {stem}.gz)")


def load(folder, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(find_file(folder, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find_file(folder, f"{prefix}-labels-idx1-ubyte"))
    return images, labels


def normalise(images_uint8):
    return (torch.from_numpy(np.array(images_uint8)).float().div(255) - 0.5) / 0.5


class PerSampleDataset(torch.utils.data.Dataset):
    """What datasets.MNIST with ToTensor + Normalize does per sample: convert on every access."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return normalise(self.images[i]).unsqueeze(0), int(self.labels[i])


def evaluate(model, x_test, y_test):
    with torch.no_grad():
        logits = model(x_test)
        loss = nn.functional.cross_entropy(logits, y_test).item()
        accuracy = (logits.argmax(1) == y_test).float().mean().item()
    return loss, accuracy


def check_variant(variant, device):
    """Fails at once, with what to do, when this PyTorch or this device cannot run the variant."""
    if variant == "compile" and not hasattr(torch, "compile"):
        sys.exit(f"simplenet_pytorch.py: --variant compile needs torch.compile, which PyTorch 2.0 added; this is "
                 f"PyTorch {torch.__version__}. Use --variant tensor, or a newer PyTorch.")
    if variant == "graphs":
        if not hasattr(torch.cuda, "graph") or not hasattr(torch.cuda, "CUDAGraph"):
            sys.exit(f"simplenet_pytorch.py: --variant graphs needs torch.cuda.graph (PyTorch 1.10 or later); "
                     f"this is PyTorch {torch.__version__}")
        if device.type != "cuda":
            sys.exit("simplenet_pytorch.py: --variant graphs captures CUDA graphs: it needs --device cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        sys.exit(f"simplenet_pytorch.py: --device {device}: PyTorch {torch.__version__} ({build}) sees no usable GPU")


def make_graphed_step(model, criterion, optimizer, device, eager_step, x_train, y_train):
    """The whole step captured in one CUDA graph, as in PyTorch's "whole-network capture" recipe.

    The graph gathers the batch itself from the data on the device, through a static tensor of 64 indices: a full
    batch copies its indices in and replays the graph; a batch of another size (the last of an epoch) runs eagerly.
    The warm-up iterations that capture needs would train the model, so the parameters are saved before and
    restored after, in place (the graph holds their addresses); plain SGD keeps no other state.
    """
    static_idx = torch.zeros(64, dtype=torch.int64, device=device)

    def gathered_step():
        return eager_step(x_train.index_select(0, static_idx), y_train.index_select(0, static_idx))

    saved = [p.detach().clone() for p in model.parameters()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            gathered_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = criterion(model(x_train.index_select(0, static_idx)), y_train.index_select(0, static_idx))
        static_loss.backward()
        optimizer.step()
    with torch.no_grad():
        for p, s in zip(model.parameters(), saved):
            p.copy_(s)

    def graphed_step(idx):
        if len(idx) != static_idx.shape[0]:
            optimizer.zero_grad(set_to_none=True)  # the eager step's gradients, not the graph's
            return eager_step(x_train[idx], y_train[idx])
        static_idx.copy_(idx)
        graph.replay()
        return static_loss

    return graphed_step


def describe(device):
    """What ran: the GPU's name; on the CPU, the BLAS PyTorch was built with, the vector width its own kernels
    picked, and, for OpenBLAS, the kernels OpenBLAS chose for this CPU."""
    if device.type == "cuda":
        return {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda}
    info = {}
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    if blas:
        info["blas"] = blas.group(1)
    mkl = re.search(r"Math Kernel Library Version (\S+)", config)
    if mkl:
        info["mkl"] = mkl.group(1)
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    if capability:
        info["cpu_capability"] = capability()
    if info.get("blas") != "mkl":  # Debian's build says "generic": the libblas.so.3 alternative, OpenBLAS here
        try:
            import ctypes
            core = ctypes.CDLL("libopenblas.so.0").openblas_get_corename
            core.restype = ctypes.c_char_p
            info["openblas_core"] = core().decode()
        except (OSError, AttributeError):
            pass
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="folder with the 4 IDX files")
    parser.add_argument("--variant", choices=["loader", "tensor", "compile", "graphs"], default="tensor")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    check_variant(args.variant, device)
    train_images, train_labels = load(args.data, "train")
    test_images, test_labels = load(args.data, "test")
    x_test = normalise(test_images).to(device)
    y_test = torch.from_numpy(test_labels.astype(np.int64)).to(device)

    model = SimpleNet().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.01)

    if args.variant == "loader":
        loader = torch.utils.data.DataLoader(PerSampleDataset(train_images, train_labels), batch_size=64,
                                             shuffle=True)
        batches = lambda: ((x.to(device), y.to(device)) for x, y in loader)
        x_train = y_train = None
    else:
        x_train = normalise(train_images).to(device)
        y_train = torch.from_numpy(train_labels.astype(np.int64)).to(device)

        def batches():  # each batch's indices; the step gathers its rows
            order = torch.randperm(len(y_train), device=device)
            for first in range(0, len(y_train), 64):
                yield order[first:first + 64]

    def eager_step(images, labels):
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    def gather(batch):  # (images, labels) for the loader; the rows of x_train and y_train otherwise
        return batch if x_train is None else (x_train[batch], y_train[batch])

    step = lambda batch: eager_step(*gather(batch))
    if args.variant == "compile":
        # The model compiled (forward, and through AOTAutograd its backward); the loss and SGD stay eager. The
        # shapes are static: the last, short batch of an epoch compiles once more. Evaluation uses the module as is.
        compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)

        def compiled_step(batch):
            images, labels = gather(batch)
            optimizer.zero_grad()
            loss = criterion(compiled(images), labels)
            loss.backward()
            optimizer.step()
            return loss

        step = compiled_step
    elif args.variant == "graphs":
        step = make_graphed_step(model, criterion, optimizer, device, eager_step, x_train, y_train)

    description = describe(device)
    for epoch in range(args.epochs):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        steps = samples = 0
        for i, batch in enumerate(batches()):
            loss = step(batch)
            if i % 100 == 0:
                print(f"Epoch {epoch}, Step {i}, Loss: {loss.item()}")
            steps += 1
            samples += len(batch[1] if x_train is None else batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        test_loss, test_accuracy = evaluate(model, x_test, y_test)
        print("RESULT " + json.dumps({"peer": f"pytorch-{args.variant}", "variant": args.variant, "epoch": epoch,
                                      "steps": steps, "samples": samples, "seconds": seconds,
                                      "test_loss": test_loss, "test_accuracy": test_accuracy,
                                      "torch": torch.__version__, "device": str(device),
                                      "threads": torch.get_num_threads(), **description}), flush=True)


if __name__ == "__main__":
    main()
