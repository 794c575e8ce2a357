"""What the Python tests share: the reference SimpleNet, mnist-dp's checkpoint metadata, and MNIST's IDX files.

An mnist-dp checkpoint is a plain safetensors file with PyTorch's names, so

    model = SimpleNet()
    model.load_state_dict(safetensors.torch.load_file(path))      # strict: exactly the four tensors

works as it is. The training state is in the file's metadata (strings only, as safetensors requires):

    mnist_dp.format_version    "1"
    mnist_dp.epoch             epochs completed
    mnist_dp.step              steps done in all
    mnist_dp.seed              the run's seed
    mnist_dp.data_fingerprint  16 hex digits
    mnist_dp.momentum          optional: the SGD momentum buffers, float32 little-endian, flattened and
                               concatenated in the order fc1.weight, fc1.bias, fc2.weight, fc2.bias, base64
    mnist_dp.activation        optional: the hidden layer's activation, "relu" (also when absent) or "gelu"

The momentum sits in the metadata rather than in extra tensors because load_state_dict is strict by default and
refuses keys SimpleNet does not have; see host/checkpoint/checkpoint.hpp.
"""

import base64
import gzip
import os

import numpy as np
import torch
from torch import nn
from safetensors import safe_open
from safetensors.torch import save_file

# mnist-dp's flat parameter order (host/model/params.hpp), and each tensor's shape.
PARAMS = (("fc1.weight", (256, 784)), ("fc1.bias", (256,)), ("fc2.weight", (10, 256)), ("fc2.bias", (10,)))
PARAM_COUNT = sum(int(np.prod(shape)) for _, shape in PARAMS)  # 203,530
FORMAT_VERSION = "1"


# The hidden layer's activations by mnist-dp's names (--activation; kernels/ref/activation.hpp's table), as
# PyTorch's modules. GELU is nn.GELU()'s exact erf form (approximate='none', its default).
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


class SimpleNet(nn.Module):
    """The reference program's model, unchanged with the default activation; another replaces its ReLU. The
    activation holds no parameters: the state dict is the same four tensors either way."""

    def __init__(self, activation="relu"):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)
        self.activation = ACTIVATIONS[activation]()

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = self.activation(x)
        x = self.fc2(x)
        return x


def activation_of(path):
    """The activation a checkpoint was trained with: a file without the key is from before there was a
    choice, and trained with ReLU."""
    return read_metadata(path).get("mnist_dp.activation", "relu")


def read_metadata(path):
    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def training_state(path):
    """mnist-dp's training state as a dict (epoch, step, seed, data_fingerprint as ints), or None for a file
    that mnist-dp did not write."""
    meta = read_metadata(path)
    if "mnist_dp.format_version" not in meta:
        return None
    if meta["mnist_dp.format_version"] != FORMAT_VERSION:
        raise ValueError(f"{path}: format_version {meta['mnist_dp.format_version']}, expected {FORMAT_VERSION}")
    return {
        "epoch": int(meta.get("mnist_dp.epoch", "0")),
        "step": int(meta.get("mnist_dp.step", "0")),
        "seed": int(meta.get("mnist_dp.seed", "0")),
        "data_fingerprint": int(meta.get("mnist_dp.data_fingerprint", "0"), 16),
    }


def unflatten(flat):
    """A flat [203530] float32 array in mnist-dp's order -> {name: tensor} with PyTorch's shapes."""
    out, offset = {}, 0
    for name, shape in PARAMS:
        n = int(np.prod(shape))
        out[name] = torch.from_numpy(np.array(flat[offset:offset + n], dtype=np.float32).reshape(shape))
        offset += n
    return out


def flatten(tensors):
    return np.concatenate([tensors[name].detach().cpu().numpy().astype("<f4").ravel() for name, _ in PARAMS])


def load_momentum(path):
    """The momentum buffers as {name: tensor}, or None when the checkpoint has none."""
    meta = read_metadata(path)
    text = meta.get("mnist_dp.momentum")
    if text is None:
        return None
    raw = base64.b64decode(text, validate=True)
    if len(raw) != PARAM_COUNT * 4:
        raise ValueError(f"{path}: momentum holds {len(raw)} bytes, expected {PARAM_COUNT * 4}")
    return unflatten(np.frombuffer(raw, dtype="<f4"))


def save_checkpoint(path, state_dict, momentum=None, epoch=0, step=0, seed=0, data_fingerprint=0, extra=None):
    """Writes a checkpoint mnist-dp can resume from (--resume) as well as start from (--init-from)."""
    meta = dict(extra or {})
    meta.update({
        "mnist_dp.format_version": FORMAT_VERSION,
        "mnist_dp.epoch": str(epoch),
        "mnist_dp.step": str(step),
        "mnist_dp.seed": str(seed),
        "mnist_dp.data_fingerprint": f"{data_fingerprint:016x}",
    })
    if momentum is not None:
        meta["mnist_dp.momentum"] = base64.b64encode(flatten(momentum).tobytes()).decode("ascii")
    save_file({name: state_dict[name].detach().contiguous() for name, _ in PARAMS}, str(path), metadata=meta)


# ---- MNIST's IDX files ----

_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def find_data_dir(root):
    """The folder with the four files (raw or .gz): root itself, or a torchvision root's MNIST/raw or
    FashionMNIST/raw, as mnist-dp looks for them."""
    for d in (root, os.path.join(root, "MNIST", "raw"), os.path.join(root, "FashionMNIST", "raw")):
        if all(os.path.exists(os.path.join(d, f)) or os.path.exists(os.path.join(d, f + ".gz"))
               for f in _FILES.values()):
            return d
    raise FileNotFoundError(f"no MNIST files under {root} (nor its MNIST/raw, FashionMNIST/raw)")


def read_idx(path):
    if not os.path.exists(path):
        path += ".gz"
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_split(root, split):
    """(images as float32 [N, 784] normalised as the reference does, labels as int64 [N])."""
    d = find_data_dir(root)
    images = read_idx(os.path.join(d, _FILES[split + "_images"])).reshape(-1, 784)
    labels = read_idx(os.path.join(d, _FILES[split + "_labels"]))
    # ToTensor() then Normalize((0.5,), (0.5,)), in float32 as torchvision computes it.
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.5) / 0.5
    return x, torch.from_numpy(labels.astype(np.int64))
