#!/usr/bin/python3
"""Write a synthetic gradient-statistics file (format accordion.grads) with h5py.

The file follows docs/formats.md and uses no code of the toolkit, so it doubles
as a worked example of writing the format by hand. The gradient norms imitate a
ResNet-18 run on CIFAR-10: a fast-changing start, a linear learning-rate warm-up,
and step decays after which some layers change sharply and others barely.

    examples/synth_grads.py -o grads.h5 --epochs 300
"""
import argparse
import math
import sys

import h5py
import numpy as np


def resnet18_cifar(classes=10):
    """Parameter names and shapes of the CIFAR ResNet-18 (3x3 stem, no max-pool)."""
    params = [("conv1.weight", (64, 3, 3, 3)), ("bn1.weight", (64,)), ("bn1.bias", (64,))]
    inplanes = 64
    for layer, planes in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            prefix = f"layer{layer}.{block}"
            stride_in = inplanes if block == 0 else planes
            params += [(f"{prefix}.conv1.weight", (planes, stride_in, 3, 3)),
                       (f"{prefix}.bn1.weight", (planes,)), (f"{prefix}.bn1.bias", (planes,)),
                       (f"{prefix}.conv2.weight", (planes, planes, 3, 3)),
                       (f"{prefix}.bn2.weight", (planes,)), (f"{prefix}.bn2.bias", (planes,))]
            if block == 0 and inplanes != planes:
                params += [(f"{prefix}.shortcut.0.weight", (planes, inplanes, 1, 1)),
                           (f"{prefix}.shortcut.1.weight", (planes,)), (f"{prefix}.shortcut.1.bias", (planes,))]
        inplanes = planes
    params += [("linear.weight", (classes, 512)), ("linear.bias", (classes,))]
    return params


def tiny():
    return [("fc1.weight", (32, 16)), ("fc1.bias", (32,)), ("fc2.weight", (10, 32)), ("fc2.bias", (10,))]


def learning_rates(epochs, base, warmup, decay_after):
    rates = []
    for e in range(epochs):
        lr = base * (1 + 3 * min(e / warmup, 1.0)) if warmup > 0 else base * 4
        lr /= 10 ** sum(1 for d in decay_after if e > d)
        rates.append(lr)
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--model", choices=["resnet18", "tiny"], default="resnet18")
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--steps", type=int, default=98, help="steps per epoch (CIFAR-10, 4 workers x 128)")
    ap.add_argument("--decay-after", default="150,250", help="epochs after which the learning rate drops 10x")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--nan-at", help="EPOCH:PARAMETER_INDEX whose norm is NaN (for tests)")
    ap.add_argument("--format-version", default="1.0")
    ap.add_argument("--incomplete", action="store_true", help="mark the file as from a run that stopped early")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    params = resnet18_cifar() if args.model == "resnet18" else tiny()
    decay_after = [int(d) for d in args.decay_after.split(",") if d]
    lr = learning_rates(args.epochs, 0.1, 5, decay_after)
    P, E = len(params), args.epochs

    scale = np.array([math.sqrt(math.prod(s)) * 0.05 for _, s in params]) * rng.lognormal(0, 0.3, P)
    drop = rng.uniform(0.3, 0.9, (len(decay_after), P))  # how far each layer's norm falls after a decay
    norm = np.empty((E, P))
    for e in range(E):
        trend = 1 + 3 * math.exp(-e / 5)
        factor = np.ones(P)
        for k, d in enumerate(decay_after):
            if e > d:
                factor *= drop[k] + (1 - drop[k]) * math.exp(-(e - d - 1) / 2)
        norm[e] = scale * trend * factor * rng.normal(1, 0.02, P)
    if args.nan_at:
        e, p = (int(x) for x in args.nan_at.split(":"))
        norm[e, p] = float("nan")

    with h5py.File(args.output, "w") as f:
        f.attrs["format"] = "accordion.grads"
        f.attrs["format_version"] = args.format_version
        f.attrs["producer"] = "synth_grads.py"
        f.attrs["command_line"] = " ".join(sys.argv)
        f.attrs["complete"] = 0 if args.incomplete else 1
        f.attrs["model"] = args.model
        f.attrs["dataset"] = "synthetic"
        f.attrs["batch_size"] = 128
        f.attrs["world_size"] = 4
        f.attrs["seed"] = args.seed
        width = max(len(s) for _, s in params)
        f["parameters/name"] = np.array([n for n, _ in params], dtype=h5py.string_dtype())
        f["parameters/ndim"] = np.array([len(s) for _, s in params], dtype=np.int32)
        f["parameters/shape"] = np.array([list(s) + [0] * (width - len(s)) for _, s in params], dtype=np.int64)
        f["parameters/numel"] = np.array([math.prod(s) for _, s in params], dtype=np.int64)
        f["epochs/epoch"] = np.arange(E, dtype=np.int64)
        f["epochs/norm"] = norm
        f["epochs/lr"] = np.array(lr)
        f["epochs/steps"] = np.full(E, args.steps, dtype=np.int64)
        f["epochs/samples"] = np.full(E, args.steps * 128, dtype=np.int64)
        f["epochs/loss"] = np.array([2.3 * math.exp(-e / 40) + 0.05 for e in range(E)])
        f["epochs/accuracy"] = np.array([min(0.99, 0.3 + 0.7 * (1 - math.exp(-e / 30))) for e in range(E)])


if __name__ == "__main__":
    main()
