#!/usr/bin/python3
"""The reference program (SimpleNet, SGD lr 0.01, batch 64) in PyTorch, as the peer mnist-dp is measured against.

Variants:
  loader   as written: a DataLoader with shuffle=True over a data set that converts and normalises every sample
           on access (ToTensor + Normalize((0.5,), (0.5,)), written out so torchvision is not needed)
  tensor   the data normalised once into one tensor on the device, batches taken by a shuffled index

It reads the same IDX files as mnist-dp (raw or .gz) and prints the reference program's loss lines, then one JSON
object per epoch on lines starting with "RESULT " for scripts.
"""
import argparse
import gzip
import json
import os
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="folder with the 4 IDX files")
    parser.add_argument("--variant", choices=["loader", "tensor"], default="tensor")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
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
    else:
        x_train = normalise(train_images).to(device)
        y_train = torch.from_numpy(train_labels.astype(np.int64)).to(device)

        def batches():
            order = torch.randperm(len(y_train), device=device)
            for first in range(0, len(y_train), 64):
                idx = order[first:first + 64]
                yield x_train[idx], y_train[idx]

    for epoch in range(args.epochs):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        steps = 0
        for i, (images, labels) in enumerate(batches()):
            optimizer.zero_grad()
            outputs = model(images)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            if i % 100 == 0:
                print(f"Epoch {epoch}, Step {i}, Loss: {loss.item()}")
            steps += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        test_loss, test_accuracy = evaluate(model, x_test, y_test)
        print("RESULT " + json.dumps({"peer": f"pytorch-{args.variant}", "epoch": epoch, "steps": steps,
                                      "seconds": seconds, "test_loss": test_loss, "test_accuracy": test_accuracy,
                                      "torch": torch.__version__, "device": str(device),
                                      "threads": torch.get_num_threads()}), flush=True)


if __name__ == "__main__":
    main()
