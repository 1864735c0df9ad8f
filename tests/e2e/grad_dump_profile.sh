#!/usr/bin/env bash
# grad-dump --profile: the recorded compressibility profile (singular values of
# PowerSGD's matrix view, Top-k tail fractions) equals numpy's own computation on
# the snapshot of the same epoch; PowerSGD's actual error on that snapshot is
# never below the spectrum's bound; the reader refuses a damaged profile, and
# --resume keeps a profile that covers every epoch.
source "$(dirname "$0")/common.sh"
cd "$WORK"

run_dump() {
    grad-dump --model mlp --train-samples 600 --test-samples 100 --batch-size 100 --lr 0.1 --threads 1 "$@" 2>log.txt ||
        { fail "grad-dump $*"; cat log.txt >&2; }
}
run_dump --epochs 3 --profile --snapshot-epochs 0,2 -o grads.h5
regime-detect grads.h5 --interval 1 -o sched.h5 -q || fail "regime-detect cannot read a file with a profile"

$ACC_PYTHON - <<'PY' || fail "the profile differs from numpy's"
import math
import h5py
import numpy as np

g = h5py.File("grads.h5", "r")
assert g.attrs["format_version"] == "1.1", dict(g.attrs)
fractions = g["profile/topk_fraction"][()]
assert list(fractions) == [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0], fractions
names = list(g["parameters/name"].asstr()[()])
tail = g["profile/topk_tail"][()]
assert tail.shape == (3, len(names), len(fractions)), tail.shape
assert sorted(g["profile/singular_values"].keys()) == ["fc1.weight", "fc2.weight", "fc3.weight"]

def tails(values):
    squares = np.sort(values.astype(np.float64).ravel() ** 2)  # ascending
    n, total = squares.size, squares.sum()
    out = []
    for f in fractions:
        k = min(n, max(1, math.floor(f * n)))  # the count the Top-k compressor keeps
        out.append(squares[: n - k].sum() / total if total > 0 else 0.0)
    return np.array(out)

rng = np.random.default_rng(0)
checked = 0
for epoch in (0, 2):
    snap = g[f"snapshots/epoch_{epoch}"]
    for p, name in enumerate(names):
        t = snap[name][()]
        np.testing.assert_allclose(tail[epoch, p], tails(t), rtol=1e-9, atol=1e-12, err_msg=f"{name} epoch {epoch}")
        if t.ndim < 2:
            continue
        m = t.reshape(t.shape[0], -1).astype(np.float64)  # PowerSGD's view: shape[0] rows
        s = g[f"profile/singular_values/{name}"][epoch]
        want = np.linalg.svd(m, compute_uv=False)
        assert s.shape == want.shape, (name, s.shape, want.shape)
        np.testing.assert_allclose(s, want, rtol=0, atol=1e-9 * want[0], err_msg=f"{name} epoch {epoch}")
        # One PowerSGD step without error feedback (a random Q, one power
        # iteration) can never beat the best rank-r approximation.
        for rank in (1, 2, 4, 8):
            q = rng.standard_normal((m.shape[1], rank))
            pm, _ = np.linalg.qr(m @ q)
            approx = pm @ (pm.T @ m)
            actual = np.linalg.norm(m - approx)
            bound = math.sqrt(float(np.sum(s[rank:] ** 2)))
            assert actual >= bound * (1 - 1e-9), (name, epoch, rank, actual, bound)
            checked += 1
assert checked == 2 * 3 * 4, checked
PY

# A file without --profile has no /profile, and a resume must not change that.
run_dump --epochs 2 -o plain.h5
$ACC_PYTHON -c 'import h5py; f = h5py.File("plain.h5", "r"); assert "profile" not in f and f.attrs["format_version"] == "1.1"' ||
    fail "a file without --profile holds a profile"
expect_exit 1 "plain.h5: records no compressibility profile; resume without --profile" -- \
    grad-dump --model mlp --train-samples 600 --test-samples 100 --batch-size 100 --lr 0.1 --threads 1 --epochs 3 \
    -o plain.h5 --resume --profile

# Resumed with --profile, every epoch keeps its row.
run_dump --epochs 2 --profile -o resumed.h5
run_dump --epochs 3 --profile -o resumed.h5 --resume
$ACC_PYTHON - <<'PY' || fail "a resumed profile does not cover every epoch"
import h5py
f = h5py.File("resumed.h5", "r")
assert f["profile/topk_tail"].shape[0] == 3 and f["profile/singular_values/fc1.weight"].shape == (3, 256)
PY

# Damaged profiles are refused by every reader, naming the dataset.
damage() {  # damage NAME PYTHON: copies grads.h5 to NAME and runs PYTHON on it as f
    cp grads.h5 "$1"
    $ACC_PYTHON -c "import h5py, numpy as np
f = h5py.File('$1', 'r+')
$2" || fail "cannot damage $1"
}
damage unsorted.h5 'd = f["profile/singular_values/fc2.weight"]; v = d[()]; v[1, :2] = v[1, 1::-1]; d[...] = v'
expect_exit 1 "unsorted.h5: /profile/singular_values/fc2.weight is not sorted largest first at epoch 1" -- \
    regime-detect unsorted.h5 -o s.h5 -q
damage negative.h5 'd = f["profile/topk_tail"]; v = d[()]; v[2, 1, 3] = -0.5; d[...] = v'
expect_exit 1 "negative.h5: /profile/topk_tail is -0.5.* at epoch 2, parameter 'fc1.bias'" -- \
    regime-detect negative.h5 -o s.h5 -q
damage missing.h5 'del f["profile/singular_values/fc3.weight"]'
expect_exit 1 "missing.h5: dataset /profile/singular_values/fc3.weight is missing" -- regime-detect missing.h5 -o s.h5 -q
damage short.h5 'v = f["profile/topk_tail"][:2]; del f["profile/topk_tail"]; f["profile/topk_tail"] = v'
expect_exit 1 "short.h5: /profile/topk_tail has shape 2x6x9, expected 3x6x9" -- regime-detect short.h5 -o s.h5 -q
damage nan.h5 'd = f["profile/singular_values/fc1.weight"]; v = d[()]; v[0, 5] = np.nan; d[...] = v'
expect_exit 1 "nan.h5: /profile/singular_values/fc1.weight holds nan at epoch 0" -- regime-detect nan.h5 -o s.h5 -q
damage extra.h5 'f["profile/singular_values/intruder"] = f["profile/singular_values/fc1.weight"][()]'
expect_exit 1 "extra.h5: /profile/singular_values/intruder names no parameter of /parameters$" -- \
    regime-detect extra.h5 -o s.h5 -q
# Top-k leaves nothing out at fraction 1: a tail there is not a profile of Top-k.
damage tail.h5 'd = f["profile/topk_tail"]; v = d[()]; v[1, 0, :] = np.maximum(v[1, 0, :], 0.25); d[...] = v'
expect_exit 1 "tail.h5: /profile/topk_tail is 0.25.* at epoch 1, parameter 'fc1.weight' at fraction 1(\.0*)?, where Top-k leaves nothing out; it must be 0$" -- \
    regime-detect tail.h5 -o s.h5 -q
# A 1.0 file has no profile (docs/formats.md): one that holds it is refused, not planned on.
damage old.h5 'f.attrs["format_version"] = "1.0"'
expect_exit 1 "old.h5: /profile is present, but format_version 1.0 has no profile \(it came with 1.1\); write format_version 1.1$" -- \
    regime-detect old.h5 --plan powersgd:1,powersgd:2 -o s.h5 -q
# world_size below 1, as the comm-profile reader refuses it, in both readers of grads files.
damage ranks.h5 'f.attrs["world_size"] = -3'
expect_exit 1 "^regime-detect: error: ranks.h5: world_size is -3; it must be at least 1$" -- regime-detect ranks.h5 -o s.h5 -q
expect_exit 1 "^compress-bench: error: ranks.h5: world_size is -3; it must be at least 1$" -- \
    compress-bench --from ranks.h5 --compressors none --world 2 --reps 1 -q

finish
