#!/usr/bin/env bash
# grad-dump on a slice of Fashion-MNIST, regime-detect on its output, and h5py
# and h5dump reading both files: values that follow from the options (learning
# rate per epoch, steps, samples), norms that agree with the stored snapshots,
# per-step norms, the JSON summary, and plain progress lines off a terminal.
source "$(dirname "$0")/common.sh"
cd "$WORK"

grad-dump --model mlp --train-samples 1200 --test-samples 300 --batch-size 100 --epochs 4 --lr 0.2 \
    --warmup-epochs 2 --warmup-lr 0.05 --lr-decay-epochs 3 --momentum 0.9 --nesterov --weight-decay 5e-4 \
    --snapshot-epochs 0,3 --step-norms --threads 1 -o grads.h5 --json >summary.json 2>log.txt ||
    { fail "grad-dump"; cat log.txt >&2; }
regime-detect grads.h5 --interval 1 -o sched.h5 -q || fail "regime-detect cannot read grad-dump's file"

grep -q '^epoch 3 (4/4): loss [0-9.]*, accuracy [0-9.]*%, test loss [0-9.]*, test accuracy [0-9.]*%, lr 0.02, batch 100, ' log.txt ||
    fail "no summary line for the last epoch in: $(cat log.txt)"
! grep -q $'\r' log.txt || fail "a live progress line went to a file"

$ACC_PYTHON - <<'PY' || fail "h5py finds wrong values"
import json
import h5py
import numpy as np

g = h5py.File("grads.h5", "r")
a = g.attrs
assert a["format"] == "accordion.grads" and a["format_version"] == "1.1", dict(a)
assert a["complete"] == 1 and a["model"] == "mlp" and a["dataset"] == "fashion-mnist", dict(a)
assert a["batch_size"] == 100 and a["world_size"] == 1 and a["seed"] == 42, dict(a)
assert a["producer"].startswith("grad-dump ") and "--step-norms" in a["command_line"], dict(a)
names = [n.decode() if isinstance(n, bytes) else n for n in g["parameters/name"][:]]
assert names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"], names
assert list(g["parameters/numel"][:]) == [784 * 256, 256, 256 * 256, 256, 2560, 10]

e = g["epochs"]
norm = e["norm"][:]
assert norm.shape == (4, 6) and np.all(np.isfinite(norm)) and np.all(norm > 0), norm
# warm-up from 0.05 to 0.2 over 2 epochs, then /10 from epoch 3
assert np.allclose(e["lr"][:], [0.05, 0.125, 0.2, 0.02], rtol=1e-12), e["lr"][:]
assert list(e["epoch"][:]) == [0, 1, 2, 3]
assert list(e["steps"][:]) == [12] * 4 and list(e["samples"][:]) == [1200] * 4
loss, accuracy = e["loss"][:], e["accuracy"][:]
assert np.all(np.isfinite(loss)) and loss[-1] < loss[0], loss
assert np.all((accuracy >= 0) & (accuracy <= 1)) and accuracy[-1] > 0.6, accuracy
assert np.all(np.isfinite(e["test_loss"][:])) and np.all(e["test_accuracy"][:] > 0.5), e["test_accuracy"][:]
assert np.all(e["seconds"][:] > 0)

# Snapshots hold the summed gradients whose norms are in /epochs/norm.
assert sorted(g["snapshots"].keys()) == ["epoch_0", "epoch_3"]
for epoch in (0, 3):
    s = g[f"snapshots/epoch_{epoch}"]
    assert s.attrs["epoch"] == epoch and s.attrs["steps"] == 12
    for p, name in enumerate(names):
        t = s[name]
        assert t.shape == tuple(g["parameters/shape"][p][: g["parameters/ndim"][p]]) and t.dtype == np.float32
        assert t.compression == "gzip"
        assert abs(np.linalg.norm(t[()].astype(np.float64)) - norm[epoch, p]) <= 1e-5 * norm[epoch, p], (epoch, name)

# Per-step norms: 48 steps; the norm of a sum is at most the sum of the norms.
st = g["steps"]
assert st["norm"].shape == (48, 6)
assert list(st["step"][:]) == list(range(48)) and list(st["epoch"][:]) == sorted(list(range(4)) * 12)
step_norm = st["norm"][:]
for epoch in range(4):
    assert np.all(norm[epoch] <= step_norm[12 * epoch:12 * epoch + 12].sum(axis=0) * (1 + 1e-6))

s = h5py.File("sched.h5", "r")
assert s.attrs["format"] == "accordion.schedule" and s.attrs["source"] == "grads.h5", dict(s.attrs)
assert s["epochs/critical"].shape == (4, 6)

j = json.load(open("summary.json"))
assert j["epochs"] == 4 and j["first_epoch"] == 0 and j["parameters"] == 6 and j["values"] == 269322, j
assert [round(x["lr"], 9) for x in j["trained"]] == [0.05, 0.125, 0.2, 0.02], j["trained"]
assert j["trained"][-1]["loss"] == loss[-1] and j["trained"][-1]["steps"] == 12
PY

h5dump -A grads.h5 >dump.txt && grep -q '"accordion.grads"' dump.txt || fail "h5dump cannot read the gradient statistics"
h5dump -d /epochs/norm grads.h5 >dump.txt && grep -q 'DATASPACE  SIMPLE { ( 4, 6 ) / ( H5S_UNLIMITED, 6 ) }' dump.txt ||
    fail "h5dump: /epochs/norm is not 4x6 and growable"
h5dump -A grads.ckpt.h5 >dump.txt && grep -q '"accordion.checkpoint"' dump.txt || fail "h5dump cannot read the checkpoint"

# Quiet: nothing on stderr.
grad-dump --model mlp --train-samples 200 --test-samples 50 --batch-size 50 --epochs 1 --threads 1 -o q.h5 -q 2>q.txt ||
    fail "grad-dump -q"
[ ! -s q.txt ] || fail "-q still prints: $(cat q.txt)"

# On a terminal: a live line with step, loss, rate and time left, redrawn in place.
if command -v script >/dev/null; then
    script -qfec "grad-dump --model mlp --train-samples 3000 --test-samples 50 --batch-size 10 --epochs 1 --lr 0.01 \
        --threads 1 -o tty.h5" tty.txt >/dev/null 2>&1 || fail "grad-dump on a terminal"
    grep -aq $'\r\033\\[Kepoch 0 (1/1)  step [0-9]*/300  loss [0-9.]*  [0-9,]* images/s  [0-9:]* left' tty.txt ||
        fail "no live progress line on a terminal: $(tr '\r' '\n' <tty.txt | head -5)"
fi
finish
