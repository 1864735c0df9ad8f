#!/usr/bin/python3
"""Plot the critical regimes of a training run as PNG.

Top: the gradient norm of each parameter over the epochs (normalized to its
first epoch). Bottom: the rate of change Accordion compares with eta,
|n(e - interval) - n(e)| / n(e - interval), for the same parameters, with eta
drawn as a line. Critical epochs are shaded by why they are critical: red for
the rate of change (and the first interval), blue hatched where only a
learning-rate decay makes them critical, whatever the norms did.

    scripts/plot_regimes.py GRADS.h5 SCHED.h5 -o regimes.png [--parameters 6]
"""
import argparse
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


LR_DECAY = 4  # the schedule file's reason code for a learning-rate decay


def runs(flags):
    """(first, end) of each run of true flags, end exclusive."""
    start = None
    for e, c in enumerate(list(flags) + [False]):
        if c and start is None:
            start = e
        elif not c and start is not None:
            yield start, e
            start = None


def shade(ax, critical, decay, legend):
    """Shades runs of critical epochs, those critical for a learning-rate decay apart."""
    label = "critical: rate of change or first interval" if legend else None
    for first, end in runs(critical & ~decay):
        ax.axvspan(first - 0.5, end - 0.5, color="tab:red", alpha=0.15, lw=0, label=label)
        label = None
    label = "critical: learning-rate decay" if legend else None
    for first, end in runs(decay):
        ax.axvspan(first - 0.5, end - 0.5, facecolor="tab:blue", edgecolor="tab:blue", alpha=0.25, hatch="//",
                   lw=0, label=label)
        label = None


def decay_epochs(reason, counted, lr, interval):
    """Epochs critical because the learning rate decayed: from the schedule's
    reasons, else (files without them) derived from the learning rates by the rule."""
    if reason is not None:
        return (reason[:, counted] == LR_DECAY).any(axis=1)
    out = np.zeros(len(lr), dtype=bool)
    for e in range(len(lr) - 1):
        if lr[e + 1] < lr[e]:
            out[e + 1: -(-(e + 1) // interval) * interval + 1] = True
    out[: interval + 1] = False  # the first interval is critical anyway
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("grads")
    ap.add_argument("schedule")
    ap.add_argument("-o", "--output", default="regimes.png")
    ap.add_argument("--parameters", type=int, default=6, help="how many of the largest matrices to draw")
    args = ap.parse_args()

    try:
        with h5py.File(args.grads, "r") as g, h5py.File(args.schedule, "r") as s:
            if text(g.attrs.get("format", "")) != "accordion.grads":
                sys.exit(f"plot_regimes.py: error: {args.grads}: not an accordion.grads file")
            if text(s.attrs.get("format", "")) != "accordion.schedule":
                sys.exit(f"plot_regimes.py: error: {args.schedule}: not an accordion.schedule file")
            names = [text(n) for n in g["parameters/name"][()]]
            ndim, numel = g["parameters/ndim"][()], g["parameters/numel"][()]
            norm = g["epochs/norm"][()]
            critical = s["epochs/critical"][()]
            reason = s["epochs/reason"][()] if "epochs/reason" in s else None
            lr = g["epochs/lr"][()]
            eta, interval = float(s.attrs["eta"]), int(s.attrs["interval"])
            mode = text(s.attrs["mode"])
    except OSError as e:
        sys.exit(f"plot_regimes.py: error: {e}")
    if critical.shape[0] != norm.shape[0]:
        sys.exit(f"plot_regimes.py: error: {args.schedule} covers {critical.shape[0]} epochs, "
                 f"{args.grads} holds {norm.shape[0]}")

    matrices = [p for p in range(len(names)) if ndim[p] >= 2] or list(range(len(names)))
    chosen = sorted(matrices, key=lambda p: -numel[p])[: args.parameters]
    counted = matrices if mode == "compression" else [0]
    any_critical = critical[:, counted].astype(bool).any(axis=1)
    decay = decay_epochs(reason, counted, lr, interval) & any_critical
    epochs = np.arange(norm.shape[0])

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    for p in chosen:
        first = norm[0, p] if norm[0, p] > 0 else 1.0
        top.plot(epochs, norm[:, p] / first, lw=1.2, label=names[p])
        change = np.full(len(epochs), np.nan)
        lagged = norm[: -interval, p] if interval < len(epochs) else np.array([])
        with np.errstate(divide="ignore", invalid="ignore"):
            change[interval:] = np.abs(lagged - norm[interval:, p]) / lagged
        bottom.plot(epochs, change, lw=1.0)
    shade(top, any_critical, decay, False)
    shade(bottom, any_critical, decay, True)
    top.set_yscale("log")
    top.set_ylabel("gradient norm\n(relative to epoch 0)")
    top.set_title(f"{args.grads}: critical regimes (shaded by why), eta {eta:g}, interval {interval}")
    top.legend(fontsize=7, ncol=2, loc="upper right")
    bottom.axhline(eta, color="black", ls="--", lw=1, label=f"eta = {eta:g}")
    bottom.set_ylabel(f"rate of change\nover {interval} epochs")
    bottom.set_xlabel("epoch")
    bottom.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot_regimes.py: wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
