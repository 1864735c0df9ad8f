#!/usr/bin/env bash
# train-dist --gravac on two ranks: both ranks log the same GraVAC decisions
# every epoch and hold the same weights, the metrics file records every step's
# factor and gains, and floats_sent is exactly the chosen levels' payloads plus
# the dense vectors and GraVAC's two scalar allreduces. Bad --gravac options
# are usage errors naming the option; --gravac-throughput mean and
# --gravac-reset-gains run.
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/gravac_common.sh"
cd "$WORK"
small=(--model mlp --hidden-size 16 --dataset synthetic --train-samples 64 --test-samples 16 --batch-size 16 --threads 1)

expect_exit 2 "^train-dist: error: --gravac: must be topk, dgc, randomk or powersgd, not 'fp16'" -- \
    train-dist "${small[@]}" --epochs 1 --gravac fp16
expect_exit 2 "^train-dist: error: --compress excludes --gravac" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --compress topk:0.1
expect_exit 2 "^train-dist: error: --accordion excludes --gravac" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --accordion
expect_exit 2 "^train-dist: error: --schedule excludes --gravac" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --schedule s.h5
expect_exit 2 "^train-dist: error: --gravac-epsilon requires --gravac" -- \
    train-dist "${small[@]}" --epochs 1 --gravac-epsilon 0.5
expect_exit 2 "^train-dist: error: --gravac-epsilon: must be a number in \(0, 1\], not '1.5'" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --gravac-epsilon 1.5
expect_exit 2 "^train-dist: error: --gravac-theta-max: must be a compression factor at least --gravac-theta-min" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --gravac-theta-max 5
expect_exit 2 "^train-dist: error: --gravac-policy: must be 'exponential' or 'geometric', not 'linear'" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --gravac-policy linear
expect_exit 2 "^train-dist: error: --gravac-omega: must be a fraction in \[0, 1\)" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --gravac-omega 1
expect_exit 2 "^train-dist: error: --gravac-smoothing: must be a number in \(0, 1\], not '0'" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --gravac-smoothing 0
expect_exit 2 "^train-dist: error: --gravac-smoothing: must be a number in \(0, 1\], not '1.5'" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --gravac-smoothing 1.5
expect_exit 2 "^train-dist: error: --gravac-throughput: must be 'median' or 'mean', not 'last'" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --gravac-throughput last
expect_exit 2 "^train-dist: error: --gravac-throughput requires --gravac" -- \
    train-dist "${small[@]}" --epochs 1 --gravac-throughput mean
expect_exit 2 "^train-dist: error: --gravac-gain: must be 'squared' or 'norm', not 'plain'" -- \
    train-dist "${small[@]}" --epochs 1 --gravac topk --gravac-gain plain
expect_exit 2 "^train-dist: error: --gravac-gain requires --gravac" -- \
    train-dist "${small[@]}" --epochs 1 --gravac-gain norm
expect_exit 2 "^train-dist: error: --gravac-reset-gains requires --gravac" -- \
    train-dist "${small[@]}" --epochs 1 --gravac-reset-gains

base=(--model mlp --hidden-size 64 --train-samples 1200 --test-samples 300 --threads 1 --batch-size 24
      --momentum 0.9 --lr 0.05 --seed 3 --nproc 2 -v)
train-dist "${base[@]}" --epochs 2 --gravac topk --gravac-theta-min 4 --gravac-theta-max 64 --gravac-window 10 \
    --gravac-epsilon 0.6 --metrics g.h5 >g.out 2>g.log || fail "gravac run: exit $?: $(tail -3 g.log)"

same_gravac_decisions g.log 2

# The choices the paper leaves open, set the other way: both ranks still agree.
train-dist "${base[@]}" --epochs 1 --gravac topk --gravac-theta-min 4 --gravac-theta-max 64 --gravac-window 10 \
    --gravac-epsilon 0.6 --gravac-throughput mean --gravac-reset-gains --gravac-smoothing 0.32 --gravac-gain norm \
    --metrics r.h5 >r.out 2>r.log ||
    fail "gravac run with --gravac-throughput mean --gravac-reset-gains --gravac-gain norm: exit $?: $(tail -3 r.log)"
same_gravac_decisions r.log 1

$ACC_PYTHON - g.h5 <<'PY' || fail "GraVAC metrics"
import sys, math, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["format_version"] in (b"1.3", "1.3"), f.attrs["format_version"]
    assert f.attrs["mode"] in (b"gravac", "gravac"), f.attrs["mode"]
    g = f["gravac"]
    assert g.attrs["family"] in (b"topk", "topk") and g.attrs["theta_min"] == 4 and g.attrs["window"] == 10
    assert abs(g.attrs["smoothing"] - 0.02) < 1e-12, g.attrs["smoothing"]
    steps = f["epochs/steps"][()]
    s = g["steps"]
    factor, choice, epoch = s["factor"][()], s["choice"][()], s["epoch"][()]
    assert len(factor) == steps.sum(), (len(factor), steps)
    assert (np.bincount(epoch) == steps).all()
    assert set(np.unique(choice)) >= {0} and len(np.unique(factor)) >= 2, np.unique(factor)
    for c, name in enumerate(["steps_candidate", "steps_theta_min", "steps_dense"]):
        assert (g["epochs"][name][()] == [np.sum((epoch == e) & (choice == c)) for e in range(len(steps))]).all()
    assert np.isfinite(s["gain_min"][()]).all() and ((s["gain_min"][()] > 0) & (s["gain_min"][()] <= 1 + 1e-9)).all()
    assert len(g["throughput/factor"][()]) > 0
    # Bytes per worker: for each step 4 + 1 float64 scalars, the vectors whole, and
    # the matrices at the chosen level (topk: 8 bytes per kept entry; dense: 4 per entry).
    shapes = [list(r[:n]) for r, n in zip(f["parameters/shape"][()], f["parameters/ndim"][()])]
    matrices = [int(np.prod(sh)) for sh in shapes if len(sh) >= 2]
    vectors = sum(int(np.prod(sh)) for sh in shapes if len(sh) < 2)
    expected = np.zeros(len(steps), dtype=np.int64)
    for e, fct, c in zip(epoch, factor, choice):
        b = 40 + 4 * vectors
        for n in matrices:
            b += 4 * n if c == 2 else 8 * min(n, max(1, math.floor(n / fct)))
        expected[e] += b
    sent = f["epochs/bytes_sent"][()]
    assert (sent == expected).all(), (sent, expected)
PY

# Resume: two epochs, then --resume to four, against four in one go. The window
# is longer than the run, so no decision depends on measured times and both runs
# must take the same decisions and end with the same weights, error memories and
# controller inputs (the throughput column excepted).
gravac_resume dgc
$ACC_PYTHON - full/m.ckpt.h5 part/m.ckpt.h5 <<'PY' || fail "resume: the checkpoints' GraVAC state differs"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    for r in ("0", "1"):
        x, y = a["extra/ranks/" + r + "/gravac/inputs"][()], b["extra/ranks/" + r + "/gravac/inputs"][()]
        assert x.shape == y.shape == (40, 4), (x.shape, y.shape)
        assert np.array_equal(x[:, :3], y[:, :3]), "the all-reduced norms differ"
        assert "fc1.weight" in a["extra/ranks/" + r] and "dgc_momentum" in a["extra/ranks/" + r + "/fc1.weight"]
PY
finish
