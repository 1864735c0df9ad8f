#!/usr/bin/env bash
# train-dist --gravac powersgd on two ranks: both ranks take the same decisions,
# the metrics file records the family, floats_sent is every step's PowerSGD P and
# Q at each matrix's rank for the chosen factor (rank max(1, floor(rows cols /
# (f (rows + cols)))), whole where PowerSGD would not compress) plus the vectors
# and GraVAC's two scalar allreduces, and --resume continues from the warm-start
# Q in the checkpoint exactly. Families GraVAC cannot scale are usage errors.
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/gravac_common.sh"
cd "$WORK"
small=(--model mlp --hidden-size 16 --dataset synthetic --train-samples 64 --test-samples 16 --batch-size 16 --threads 1)

for family in fp16 qsgd powersgd:2; do
    expect_exit 2 "^train-dist: error: --gravac: must be topk, dgc, randomk or powersgd, not '$family'" -- \
        train-dist "${small[@]}" --epochs 1 --gravac "$family"
done

base=(--model mlp --hidden-size 64 --train-samples 1200 --test-samples 300 --threads 1 --batch-size 24
      --momentum 0.9 --lr 0.05 --seed 3 --nproc 2 -v)
train-dist "${base[@]}" --epochs 2 --gravac powersgd --gravac-theta-min 4 --gravac-theta-max 64 --gravac-window 10 \
    --gravac-epsilon 0.5 --metrics g.h5 >g.out 2>g.log || fail "gravac powersgd run: exit $?: $(tail -3 g.log)"

same_gravac_decisions g.log 2

$ACC_PYTHON - g.h5 <<'PY' || fail "GraVAC powersgd metrics"
import sys, math, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    g = f["gravac"]
    assert g.attrs["family"] in (b"powersgd", "powersgd"), g.attrs["family"]
    steps = f["epochs/steps"][()]
    s = g["steps"]
    factor, choice, epoch = s["factor"][()], s["choice"][()], s["epoch"][()]
    assert len(factor) == steps.sum(), (len(factor), steps)
    assert 0 in set(np.unique(choice)) and len(np.unique(factor)) >= 2, (np.unique(choice), np.unique(factor))
    assert np.isfinite(s["gain_min"][()]).all() and ((s["gain_min"][()] > 0) & (s["gain_min"][()] <= 1 + 1e-6)).all()
    shapes = [list(r[:n]) for r, n in zip(f["parameters/shape"][()], f["parameters/ndim"][()])]
    matrices = [(int(sh[0]), int(np.prod(sh)) // int(sh[0])) for sh in shapes if len(sh) >= 2]
    vectors = sum(int(np.prod(sh)) for sh in shapes if len(sh) < 2)
    def level_bytes(rows, cols, fct):
        r = min(max(1, math.floor(rows * cols / (fct * (rows + cols)))), rows, cols)
        return 4 * r * (rows + cols) if 2 * r * (rows + cols) < rows * cols else 4 * rows * cols
    expected = np.zeros(len(steps), dtype=np.int64)
    for e, fct, c in zip(epoch, factor, choice):
        expected[e] += 40 + 4 * vectors + sum(4 * r * k if c == 2 else level_bytes(r, k, fct) for r, k in matrices)
    sent = f["epochs/bytes_sent"][()]
    assert (sent == expected).all(), (sent, expected)
PY

# Resume: the window is longer than the run, so no decision depends on measured
# times; two epochs then --resume to four must end as four in one go.
gravac_resume powersgd
$ACC_PYTHON - full/m.ckpt.h5 <<'PY' || fail "resume: the checkpoint lacks powersgd's warm-start Q"
import sys, h5py
with h5py.File(sys.argv[1], "r") as a:
    for r in ("0", "1"):
        assert "powersgd_q" in a["extra/ranks/" + r + "/fc1.weight"], list(a["extra/ranks/" + r + "/fc1.weight"])
PY
finish
