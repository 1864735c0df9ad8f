#!/usr/bin/env bash
# Slow: the mlp trained on the whole of Fashion-MNIST for three epochs reaches
# the test accuracy such a network is known for (85-88%).
source "$(dirname "$0")/common.sh"
cd "$WORK"
grad-dump --model mlp --epochs 3 --batch-size 64 --lr 0.05 --json -o grads.h5 >summary.json 2>log.txt ||
    { fail "grad-dump"; cat log.txt >&2; }
$ACC_PYTHON - <<'PY' || fail "the mlp did not learn Fashion-MNIST: $(tail -3 log.txt)"
import json
import h5py
s = json.load(open("summary.json"))
assert s["trained"][-1]["test_accuracy"] > 0.84, s["trained"]
with h5py.File("grads.h5", "r") as f:
    assert list(f["epochs/samples"][:]) == [60000] * 3
    assert list(f["epochs/steps"][:]) == [938] * 3  # 937 full batches and one of 32
    assert f["epochs/test_accuracy"][-1] == s["trained"][-1]["test_accuracy"]
PY
finish
