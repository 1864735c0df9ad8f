#!/usr/bin/env bash
# Files written by lib/io read back with h5py and h5dump, and a file written
# with h5py from the example in docs/formats.md read by regime-detect.
source "$(dirname "$0")/common.sh"
cd "$WORK"
write_sample_grads grads.h5

$ACC_PYTHON - <<'PY' || fail "h5py reading a file written by lib/io"
import h5py, numpy as np
with h5py.File("grads.h5", "r") as f:
    a = f.attrs
    assert a["format"] == "accordion.grads" and a["format_version"] == "1.1", dict(a)
    assert a["producer"] == "write_sample_grads 1" and a["complete"] == 1 and a["model"] == "tiny"
    assert list(f["parameters/name"].asstr()[()]) == ["fc1.weight", "fc1.bias"]
    np.testing.assert_array_equal(f["parameters/shape"][()], [[3, 2], [3, 0]])
    np.testing.assert_array_equal(f["parameters/ndim"][()], [2, 1])
    np.testing.assert_array_equal(f["parameters/numel"][()], [6, 3])
    np.testing.assert_array_equal(f["epochs/norm"][()], [[1, 10], [2, 20], [3, 30], [4, 40]])
    np.testing.assert_array_equal(f["epochs/lr"][()], [0.1, 0.1, 0.01, 0.01])
    np.testing.assert_array_equal(f["epochs/epoch"][()], [0, 1, 2, 3])
    np.testing.assert_array_equal(f["epochs/steps"][()], [2, 2, 2, 2])
    assert np.isnan(f["epochs/test_loss"][()]).all()
    assert f["steps/norm"].shape == (8, 2)
    np.testing.assert_array_equal(f["steps/epoch"][()], [0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(f["steps/norm"][5], [2.0, 0.75])
    snap = f["snapshots/epoch_2"]
    assert snap.attrs["epoch"] == 2 and snap.attrs["steps"] == 2
    assert snap["fc1.weight"].dtype == np.float32 and snap["fc1.weight"].shape == (3, 2)
    np.testing.assert_array_equal(snap["fc1.weight"][()], [[1, 2], [3, 4], [5, 6]])
    assert snap["fc1.weight"].compression == "gzip"
PY

h5dump -a /format grads.h5 | grep -q '"accordion.grads"' || fail "h5dump: format attribute"
h5dump -d /epochs/norm grads.h5 | tr -s ' \n' ' ' | grep -q '(0,0): 1, 10, (1,0): 2, 20, (2,0): 3, 30, (3,0): 4, 40' ||
    fail "h5dump: /epochs/norm values"

# The h5py example of docs/formats.md, run as written, gives a file regime-detect reads.
awk '/^### Writing one with h5py/ {on=1} on && /^```python/ {code=1; next} code && /^```/ {exit} code {print}' \
    "$ACC_SOURCE/docs/formats.md" >example.py
[ -s example.py ] || fail "no h5py example found in docs/formats.md"
{
    echo "import numpy as np"
    echo "learning_rates = np.array([0.1] * 30)"
    echo "norms = np.linspace(5, 1, 60).reshape(30, 2)"
    cat example.py
} >run_example.py
$ACC_PYTHON run_example.py || fail "the docs/formats.md example does not run"
regime-detect grads.h5 -o sched.h5 --json >summary.json || fail "regime-detect refuses the docs/formats.md example"
grep -q '"parameters": 2' summary.json || fail "regime-detect read the wrong number of parameters"
finish
