#!/usr/bin/python3
"""Checks grad-dump's files against PyTorch models written here independently.

  gradients: with --lr 0 the weights never move, so the gradient summed over an
      epoch is PyTorch's gradient of the summed batch losses at the checkpoint's
      weights. Compares it with the snapshot and the norms in the grads file.
      With --world-size W, only the samples of rank --rank's shard count (the
      local gradient that rank 0 of a data-parallel run records).
  evaluate: loads the checkpoint (parameters and batch-norm buffers) into the
      PyTorch model and compares its test loss and accuracy with the file's.

Both first check that the file lists PyTorch's parameter names and shapes, in order.
"""
import argparse
import gzip
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, inputs, classes, hidden=256):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(inputs, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


class CNN(nn.Module):
    def __init__(self, channels, side, classes):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(channels, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(64 * ((side - 4) // 2) ** 2, 128), nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or inplanes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """The CIFAR ResNet-18 as commonly written for PyTorch (kuangliu/pytorch-cifar layout)."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        inplanes, layers = 64, []
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes, 1)))
            inplanes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.linear = nn.Linear(512, classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.linear(F.avg_pool2d(out, 4).flatten(1))


class VGG19BN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        layers, channels = [], 3
        for c in [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]:
            if c == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(channels, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
                channels = c
        layers.append(nn.AvgPool2d(1, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(512, classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


class LanguageModel(nn.Module):
    """PyTorch's word_language_model RNNModel with a 2-layer LSTM and no dropout."""

    def __init__(self, vocabulary, embedding, hidden, tied):
        super().__init__()
        self.encoder = nn.Embedding(vocabulary, embedding)
        self.rnn = nn.LSTM(embedding, hidden, 2)
        self.decoder = nn.Linear(hidden, vocabulary)
        if tied:
            self.decoder.weight = self.encoder.weight

    def forward(self, x, state):
        out, state = self.rnn(self.encoder(x), state)
        return self.decoder(out).reshape(-1, self.decoder.out_features), state


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def fashion_mnist(directory, split, count):
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(f"{directory}/{prefix}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(16 + count * 784)[16:], dtype=np.uint8).reshape(count, 1, 28, 28)
    with gzip.open(f"{directory}/{prefix}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(8 + count)[8:], dtype=np.uint8)
    x = (torch.tensor(images, dtype=torch.float32) / 255 - 0.2860) / 0.3530
    return x, torch.tensor(labels, dtype=torch.int64)


def cifar10_test(directory, count):
    raw = np.fromfile(f"{directory}/test_batch.bin", dtype=np.uint8).reshape(-1, 3073)[:count]
    x = torch.tensor(raw[:, 1:].reshape(-1, 3, 32, 32), dtype=torch.float32) / 255
    mean = torch.tensor([0.49, 0.48, 0.45]).view(1, 3, 1, 1)
    std = torch.tensor([0.25, 0.24, 0.26]).view(1, 3, 1, 1)
    return (x - mean) / std, torch.tensor(raw[:, 0], dtype=torch.int64)


def tokens(path):
    out = []
    with open(path) as f:
        for line in f:
            out += line.split() + ["<eos>"]
    return out


MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


class SplitMix64:
    """The toolkit's portable generator (lib/train/sampling.hpp), rewritten from its description."""

    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + GOLDEN) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, bound):
        limit = MASK - MASK % bound
        while True:
            x = self.next()
            if x < limit:
                return x % bound


def mix_seed(seed, *values):
    h = seed & MASK
    for v in (list(values) + [0, 0, 0])[:3]:
        h ^= (v + GOLDEN + ((h << 6) & MASK) + (h >> 2)) & MASK
        h = SplitMix64(h).next()
    return h


def shard_indices(samples, epoch, seed, rank, world_size):
    """Sample indices rank `rank` of `world_size` trains on in `epoch`: every
    world_size-th entry of a permutation drawn from (seed, epoch)."""
    order = list(range(samples))
    random = SplitMix64(mix_seed(seed, 0x0DE5, epoch))
    for i in range(samples, 1, -1):
        j = random.below(i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return order[rank:(samples // world_size) * world_size:world_size]


def load(model, grads_path, checkpoint_path):
    with h5py.File(grads_path, "r") as g:
        stored = [(n.decode() if isinstance(n, bytes) else n) for n in g["parameters/name"][:]]
        shapes = [tuple(int(d) for d in row[:k]) for row, k in zip(g["parameters/shape"][:], g["parameters/ndim"][:])]
    ours = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    if ours != list(zip(stored, shapes)):
        fail(f"{grads_path}: parameters differ from PyTorch's:\n  file:    {list(zip(stored, shapes))}\n  PyTorch: {ours}")
    state = {}
    with h5py.File(checkpoint_path, "r") as c:
        for group in ("model", "buffers"):
            if group in c:
                c[group].visititems(lambda name, obj: state.__setitem__(name, torch.tensor(obj[()]))
                                    if isinstance(obj, h5py.Dataset) else None)
    if "decoder.weight" not in state and "encoder.weight" in state:
        state["decoder.weight"] = state["encoder.weight"]  # tied: PyTorch's state_dict names the shared tensor twice
    model.load_state_dict(state, strict=True)


def check_gradients(args, model):
    model.train()
    if args.model == "lstm":
        words = tokens(f"{args.data_dir}/wiki.train.tokens")
        ids = {}
        for w in words:
            ids.setdefault(w, len(ids))
        data = torch.tensor([ids[w] for w in words])
        length = len(data) // args.batch
        data = data[: length * args.batch].view(args.batch, length).t().contiguous()
        state = None
        for start in range(0, length - 1, args.bptt):
            n = min(args.bptt, length - 1 - start)
            logits, state = model(data[start:start + n], state)
            state = tuple(s.detach() for s in state)
            F.cross_entropy(logits, data[start + 1:start + 1 + n].reshape(-1)).backward()
    else:
        x, y = fashion_mnist(args.data_dir, "train", args.train_samples)
        if args.world_size > 1:
            mine = torch.tensor(shard_indices(args.train_samples, 0, args.seed, args.rank, args.world_size))
            x, y = x[mine], y[mine]
        # Every batch holds `batch` samples, so the sum of the batch means is the total loss / batch.
        (F.cross_entropy(model(x), y, reduction="sum") / args.batch).backward()
    with h5py.File(args.grads, "r") as g:
        norms = g["epochs/norm"][0]
        for i, (name, p) in enumerate(model.named_parameters()):
            reference = p.grad.double().numpy()
            stored = g[f"snapshots/epoch_0/{name}"][()].astype(np.float64)
            scale = np.abs(reference).max()
            if not np.allclose(stored, reference, rtol=1e-3, atol=1e-4 * scale):
                fail(f"{name}: summed gradient differs from PyTorch's by up to {np.abs(stored - reference).max():.3g} "
                     f"(largest entry {scale:.3g})")
            if abs(norms[i] - np.linalg.norm(reference)) > 1e-4 * np.linalg.norm(reference):
                fail(f"{name}: stored norm {norms[i]} but PyTorch's summed gradient has norm {np.linalg.norm(reference)}")
            if abs(norms[i] - np.linalg.norm(stored)) > 1e-5 * norms[i]:
                fail(f"{name}: stored norm {norms[i]} is not the norm of the stored snapshot")


def check_evaluation(args, model):
    model.eval()
    x, y = cifar10_test(args.data_dir, args.test_samples)
    with torch.no_grad():
        logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(1) == y).double().mean().item()
    with h5py.File(args.grads, "r") as g:
        stored_loss, stored_accuracy = g["epochs/test_loss"][-1], g["epochs/test_accuracy"][-1]
    if abs(stored_loss - loss) > 1e-4 * max(1.0, loss) or abs(stored_accuracy - accuracy) > 1e-9:
        fail(f"{args.grads}: test loss {stored_loss}, accuracy {stored_accuracy}; PyTorch: {loss}, {accuracy}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["gradients", "evaluate"])
    ap.add_argument("grads")
    ap.add_argument("checkpoint")
    ap.add_argument("--model", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--train-samples", type=int, default=0)
    ap.add_argument("--test-samples", type=int, default=0)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--bptt", type=int, default=35)
    ap.add_argument("--size", type=int, default=16, help="lstm embedding and hidden size")
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--rank", type=int, default=0, help="the rank whose shard the gradients come from")
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.model == "lstm":
        with h5py.File(args.grads, "r") as g:
            names = [(n.decode() if isinstance(n, bytes) else n) for n in g["parameters/name"][:]]
            args.vocabulary = int(g["parameters/shape"][names.index("decoder.bias")][0])
    model = {"mlp": lambda: MLP(784, 10), "cnn": lambda: CNN(1, 28, 10), "resnet18": ResNet18, "vgg19_bn": VGG19BN,
             "lstm": lambda: LanguageModel(args.vocabulary, args.size, args.size, args.tied)}[args.model]()
    load(model, args.grads, args.checkpoint)
    (check_gradients if args.check == "gradients" else check_evaluation)(args, model)
    print(f"{args.model}: {args.check} agree with PyTorch")


if __name__ == "__main__":
    main()
