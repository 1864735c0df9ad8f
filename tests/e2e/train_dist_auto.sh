#!/usr/bin/env bash
# train-dist --auto on two ranks over loopback: every epoch's plan is in the
# metrics file (/auto) and agrees with the levels used: an epoch that does not
# pay sends every parameter uncompressed; the link, compute and codecs are
# measured before the first epoch, again after an epoch whose step time drifted
# more than --auto-drift, and not otherwise; a resumed run measures again.
# Bad options are usage errors naming the option.
source "$(dirname "$0")/common.sh"
cd "$WORK"
common=(--model mlp --hidden-size 32 --dataset synthetic --test-samples 64 --batch-size 24 --threads 1 --nproc 2)
small=("${common[@]}" --train-samples 480)

expect_exit 2 "^train-dist: error: --compress excludes --auto" -- \
    train-dist "${small[@]}" --epochs 1 --auto --compress powersgd:2
expect_exit 2 "^train-dist: error: --schedule excludes --auto" -- \
    train-dist "${small[@]}" --epochs 1 --auto --schedule s.h5
expect_exit 2 "^train-dist: error: --levels: no candidate levels" -- \
    train-dist "${small[@]}" --epochs 1 --auto --levels ""
expect_exit 2 "^train-dist: error: --levels: fp16 cannot be planned: no error model for it" -- \
    train-dist "${small[@]}" --epochs 1 --auto --levels powersgd:1,fp16
expect_exit 2 "^train-dist: error: --levels: 'warpsgd'" -- \
    train-dist "${small[@]}" --epochs 1 --auto --levels warpsgd
expect_exit 2 "^train-dist: error: --auto-margin: must be in \[0, 1\)" -- \
    train-dist "${small[@]}" --epochs 1 --auto --auto-margin 1
expect_exit 2 "^train-dist: error: --low: needs --accordion or --auto" -- \
    train-dist "${small[@]}" --epochs 1 --low powersgd:4

# check FILE MEASURED: the /auto group against the levels, and which epochs measured (e.g. "1 0 0").
check() {
    $ACC_PYTHON - "$1" "$2" <<'PY' || fail "$1: /auto does not match the run"
import sys, h5py, numpy as np
path, measured = sys.argv[1], [int(x) for x in sys.argv[2].split()]
f = h5py.File(path, "r")
assert f.attrs["mode"] in (b"auto", "auto"), f.attrs["mode"]
a = f["auto"]
levels = f["epochs/level"][()]
shapes = [f["parameters/shape"][i] for i in range(len(f["parameters/name"]))] if "parameters/shape" in f else None
reason = a["reason"][()]
assert list(a["measured"][()]) == measured, (list(a["measured"][()]), measured)
for e in range(levels.shape[0]):
    pays = a["pays"][e]
    if pays:
        assert a["predicted_seconds"][e] > 0 and a["compressed_seconds"][e] < a["uncompressed_seconds"][e]
        assert (levels[e] != 0).any(), levels[e]
    else:
        assert (levels[e] == 0).all(), levels[e]
        assert set(reason[e]) <= {3, 4}, reason[e]
        assert (reason[e] == 3).any()
    for key in ("allreduce_bandwidth", "allgather_bandwidth", "compute_seconds", "uncompressed_seconds",
                "measured_seconds"):
        assert a[key][e] > 0, (key, e, a[key][e])
    assert a["burst_seconds"][e] >= 0, a["burst_seconds"][e]
    if not measured[e]:
        assert a["measure_seconds"][e] == 0
print("ok", path, list(a["pays"][()]), list(a["measure_seconds"][()]))
PY
}

# check_budget FILE LOG: with every epoch drifting, each epoch after the first either measured
# again, within 3 % of the training time before it (give or take the one measurement let through
# last), or the log says that measuring again would have taken more than that.
check_budget() {
    $ACC_PYTHON - "$1" "$2" <<'PY' || fail "$1: measuring again did not keep to its share"
import re, sys, h5py
f = h5py.File(sys.argv[1], "r")
log = open(sys.argv[2]).read()
measure = list(f["auto/measure_seconds"][()])
seconds = list(f["epochs/seconds"][()])
measured = list(f["auto/measured"][()])
for e in range(1, len(measure)):
    refused = re.search(rf"auto: epoch {e - 1} took .* predicted: measuring again would take more than 3 % of the run", log)
    if measured[e]:
        assert not refused, e
        assert sum(measure[1:e]) <= 0.03 * sum(seconds[:e]) + 1e-9, (e, measure, seconds)
    else:
        assert refused, "epoch %d neither measured again nor said why" % e
print("measured again before epochs", [e for e in range(1, len(measure)) if measured[e]], "in", sum(measure[1:]),
      "s of", sum(seconds), "s")
PY
}

longer=("${common[@]}" --train-samples 14400 --epochs 5)
# A drift no step time stays within: measured again as often as 3 % of the time allows.
train-dist "${longer[@]}" --auto --auto-drift 1e-9 --metrics always.h5 >always.out 2>always.log ||
    fail "always: exit $?: $(tail -3 always.log)"
check_budget always.h5 always.log
grep -q "train-dist\[0\]: auto: epoch 0 took .* per step against .* predicted: measuring again" always.log ||
    fail "always: no 'measuring again' line: $(grep auto always.log)"
# A drift every step time stays within: only before the first epoch.
train-dist "${small[@]}" --epochs 3 --auto --auto-drift 1e6 --metrics never.h5 >never.out 2>never.log ||
    fail "never: exit $?: $(tail -3 never.log)"
check never.h5 "1 0 0"
grep -q "train-dist\[0\]: epoch 0 (1/3): .*; auto \(pays\|does not pay\): modelled" never.log ||
    fail "never: the epoch line does not say whether compression pays: $(grep 'epoch 0' never.log)"
# Resumed: measured again before its first epoch.
train-dist "${small[@]}" --epochs 4 --auto --auto-drift 1e6 --metrics never.h5 --resume >resumed.out 2>resumed.log ||
    fail "resumed: exit $?: $(tail -3 resumed.log)"
check never.h5 "1 0 0 1"
finish
