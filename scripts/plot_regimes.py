#!/usr/bin/python3
"""Plot the critical regimes of a training run as PNG.

Top: the gradient norm of each parameter over the epochs (normalized to its
first epoch). Bottom: the rate of change Accordion compares with eta,
|n(e - interval) - n(e)| / n(e - interval), for the same parameters, with the
critical epochs of the schedule shaded and eta drawn as a line.

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


def shade(ax, critical):
    """Shades runs of critical epochs."""
    start = None
    for e, c in enumerate(list(critical) + [False]):
        if c and start is None:
            start = e
        elif not c and start is not None:
            ax.axvspan(start - 0.5, e - 0.5, color="tab:red", alpha=0.15, lw=0)
            start = None


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
            eta, interval = float(s.attrs["eta"]), int(s.attrs["interval"])
            mode = text(s.attrs["mode"])
    except OSError as e:
        sys.exit(f"plot_regimes.py: error: {e}")
    if critical.shape[0] != norm.shape[0]:
        sys.exit(f"plot_regimes.py: error: {args.schedule} covers {critical.shape[0]} epochs, "
                 f"{args.grads} holds {norm.shape[0]}")

    matrices = [p for p in range(len(names)) if ndim[p] >= 2] or list(range(len(names)))
    chosen = sorted(matrices, key=lambda p: -numel[p])[: args.parameters]
    any_critical = critical[:, matrices].any(axis=1) if mode == "compression" else critical[:, 0].astype(bool)
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
    for ax in (top, bottom):
        shade(ax, any_critical)
    top.set_yscale("log")
    top.set_ylabel("gradient norm\n(relative to epoch 0)")
    top.set_title(f"{args.grads}: critical regimes (shaded), eta {eta:g}, interval {interval}")
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
