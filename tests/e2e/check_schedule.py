#!/usr/bin/python3
"""Check a schedule file against its gradient-statistics file with h5py alone.

Re-implements Accordion's rule (DESIGN.md) independently of the C++ code and
compares every epoch and parameter: critical flag, reason, ratio and level.

    check_schedule.py GRADS.h5 SCHED.h5
"""
import math
import sys

import h5py
import numpy as np


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def expected_decisions(norm, lr, eta, interval):
    E, C = norm.shape
    critical = np.zeros((E, C), dtype=np.uint8)
    reason = np.zeros((E, C), dtype=np.int8)
    ratio = np.full((E, C), np.nan)
    for e in range(E):
        decided = -1 if e == 0 else ((e - 1) // interval) * interval
        for c in range(C):
            if decided <= 0:
                critical[e, c], reason[e, c] = 1, 2
                continue
            prev, cur = norm[decided - interval, c], norm[decided, c]
            if prev == 0:
                critical[e, c], reason[e, c], ratio[e, c] = 1, 3, math.inf
                continue
            r = abs(prev - cur) / prev
            ratio[e, c] = r
            critical[e, c] = 1 if r >= eta else 0
            reason[e, c] = 1 if r >= eta else 0
    for e in range(E - 1):
        if lr[e + 1] < lr[e]:
            nxt = -(-(e + 1) // interval) * interval
            for k in range(e + 1, min(nxt, E - 1) + 1):
                critical[k, :] = 1
                reason[k, :] = np.where(reason[k, :] == 2, 2, 4)
    return critical, reason, ratio


def main():
    grads_path, sched_path = sys.argv[1], sys.argv[2]
    with h5py.File(grads_path, "r") as g, h5py.File(sched_path, "r") as s:
        assert text(s.attrs["format"]) == "accordion.schedule", s.attrs["format"]
        assert text(s.attrs["format_version"]).startswith("1."), s.attrs["format_version"]
        assert text(s.attrs["producer"]).startswith("regime-detect "), s.attrs["producer"]
        assert "regime-detect" in text(s.attrs["command_line"])
        assert text(s.attrs["source"]) == grads_path
        names = [text(n) for n in g["parameters/name"][()]]
        assert [text(n) for n in s["parameters/name"][()]] == names
        ndim = g["parameters/ndim"][()]
        norm, lr = g["epochs/norm"][()], g["epochs/lr"][()]
        eta, interval = float(s.attrs["eta"]), int(s.attrs["interval"])
        mode, granularity = text(s.attrs["mode"]), text(s.attrs["granularity"])
        if granularity == "model":
            whole = np.sqrt((norm ** 2).sum(axis=1, keepdims=True))
            crit, reason, ratio = expected_decisions(whole, lr, eta, interval)
            crit, reason, ratio = (np.repeat(a, norm.shape[1], axis=1) for a in (crit, reason, ratio))
        else:
            crit, reason, ratio = expected_decisions(norm, lr, eta, interval)
        np.testing.assert_array_equal(s["epochs/critical"][()], crit)
        np.testing.assert_array_equal(s["epochs/reason"][()], reason)
        np.testing.assert_allclose(s["epochs/ratio"][()], ratio, rtol=1e-12, equal_nan=True)
        np.testing.assert_array_equal(s["epochs/epoch"][()], np.arange(norm.shape[0]))
        low, high = text(s.attrs["low"]), text(s.attrs["high"])
        if mode == "compression":
            levels = [text(l) for l in s["levels"][()]]
            level = s["epochs/level"][()]
            for e in range(norm.shape[0]):
                for p in range(norm.shape[1]):
                    want = "none" if ndim[p] < 2 else (low if crit[e, p] else high)
                    assert levels[level[e, p]] == want, (e, names[p], levels[level[e, p]], want)
        else:
            monotone = int(s.attrs["monotone"]) == 1
            batch, scale = s["epochs/batch_size"][()], s["epochs/lr_scale"][()]
            grown = False
            for e in range(norm.shape[0]):
                small = crit[e, 0] and not (monotone and grown)
                want = int(low) if small else int(high)
                grown = grown or want > int(low)
                assert batch[e] == want, (e, batch[e], want)
                assert abs(scale[e] - want / int(low)) < 1e-12
    print(f"{sched_path}: {norm.shape[0]} epochs x {norm.shape[1]} parameters agree with the rule")


if __name__ == "__main__":
    main()
