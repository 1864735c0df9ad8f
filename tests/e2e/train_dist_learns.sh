#!/usr/bin/env bash
# Training that learns: two ranks on the whole of Fashion-MNIST, uncompressed,
# with powersgd:2, and with Accordion online between powersgd:2 and powersgd:1.
# Every run reaches a test accuracy that only learning gives, the compressed
# ones within a few points of the uncompressed one while sending a small
# fraction of its data. Labelled slow.
source "$(dirname "$0")/common.sh"
cd "$WORK"
base=(--model mlp --epochs 4 --batch-size 64 --lr 0.05 --threads 1 --nproc 2 --test-samples 5000 -q)
train-dist "${base[@]}" --metrics none.h5 --checkpoint-dir . || fail "uncompressed run"
train-dist "${base[@]}" --compress powersgd:2 --metrics psgd.h5 --checkpoint-dir . || fail "powersgd run"
train-dist "${base[@]}" --accordion --interval 1 --metrics accordion.h5 --checkpoint-dir . || fail "accordion run"
$ACC_PYTHON - <<'PY' || fail "the runs did not learn as expected"
import h5py
runs = {name: h5py.File(name + ".h5", "r")["epochs"] for name in ("none", "psgd", "accordion")}
accuracy = {name: e["test_accuracy"][-1] for name, e in runs.items()}
sent = {name: e["floats_sent_total"][-1] for name, e in runs.items()}
print({name: round(float(a), 4) for name, a in accuracy.items()}, {name: f"{s / 1e6:.1f} M floats" for name, s in sent.items()})
assert accuracy["none"] > 0.82, accuracy
for name in ("psgd", "accordion"):
    assert accuracy[name] > accuracy["none"] - 0.04, accuracy
    assert sent[name] < 0.1 * sent["none"], sent
PY
finish
