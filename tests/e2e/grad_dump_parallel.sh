#!/usr/bin/env bash
# grad-dump --nproc 2: data-parallel training on Fashion-MNIST slices.
#  - Averaging: 2 ranks with batch B end with the weights of 1 rank with batch
#    2B (rank r's batch i is every other sample of the 1-rank batch i).
#  - Every rank holds the same weights after every epoch (the checksums each rank logs).
#  - Rank 0 records its local gradient: with --lr 0 its summed gradient is
#    PyTorch's gradient over rank 0's shard alone (not the average over ranks).
#  - world_size 2 in the files; --resume refuses another world size.
source "$(dirname "$0")/common.sh"
cd "$WORK"
check="$ACC_PYTHON $ACC_SOURCE/tests/e2e/grad_dump_pytorch.py"
fashion=/usr/share/datasets/fashion-mnist
slice=(--model mlp --hidden-size 32 --train-samples 1200 --test-samples 200 --epochs 3 --lr 0.1 --momentum 0.9
       --weight-decay 1e-3 --seed 7)

grad-dump "${slice[@]}" --batch-size 50 --nproc 2 -v -o two.h5 --json >two.json 2>two.log ||
    { fail "grad-dump --nproc 2"; cat two.log >&2; }
grad-dump "${slice[@]}" --batch-size 100 --threads 1 -q -o one.h5 || fail "grad-dump on one process"

for epoch in 0 1 2; do
    sums=$(grep -oE "^grad-dump\[[01]\]: debug: rank [01]: weights after epoch $epoch \(step [0-9]+\): checksum [0-9a-f]{16}$" two.log |
        sed 's/.*checksum //' | sort -u)
    [ "$(grep -c "weights after epoch $epoch (" two.log)" = 2 ] && [ "$(echo "$sums" | wc -l)" = 1 ] ||
        fail "epoch $epoch: the ranks' weights differ or were not logged: $(grep "after epoch $epoch (" two.log)"
done
# 4 bytes x (784 x 32 + 32 + 32 x 32 + 32 + 32 x 10 + 10) values
grep -q "^grad-dump\[0\]: data-parallel on 2 ranks (gloo): gradients averaged every step (106,024 bytes per rank in 1 bucket of allreduce, launched during the backward pass)" two.log ||
    fail "no data-parallel line: $(grep data-parallel two.log)"
grep -q "^grad-dump\[0\]: epoch 2 (3/3): loss [0-9.]*, accuracy [0-9.]*%, test loss [0-9.]*, test accuracy [0-9.]*%, lr 0.1, batch 100, " two.log || fail "rank 0 printed no epoch lines"
grep -q "^grad-dump\[1\]: epoch" two.log && fail "rank 1 printed epoch lines"

$ACC_PYTHON - <<'PY' || fail "the 2-rank files are wrong"
import json
import h5py
import numpy as np

two, one = h5py.File("two.h5", "r"), h5py.File("one.h5", "r")
assert two.attrs["world_size"] == 2 and two.attrs["batch_size"] == 50 and two.attrs["complete"] == 1, dict(two.attrs)
assert one.attrs["world_size"] == 1
# Rank 0's share: 600 samples in 12 steps per epoch.
assert list(two["epochs/steps"][:]) == [12] * 3 and list(two["epochs/samples"][:]) == [600] * 3
# Same test loss: the same weights, evaluated on the same 200 test images.
assert np.allclose(two["epochs/test_loss"][:], one["epochs/test_loss"][:], rtol=1e-4), (
    two["epochs/test_loss"][:], one["epochs/test_loss"][:])
# The recorded norms are rank 0's local ones, not those of the averaged gradient.
assert not np.allclose(two["epochs/norm"][:], one["epochs/norm"][:], rtol=1e-2)
a, b = h5py.File("two.ckpt.h5", "r"), h5py.File("one.ckpt.h5", "r")
assert a.attrs["world_size"] == 2 and a.attrs["global_step"] == 36 and b.attrs["global_step"] == 36
for name in b["model"]:
    x, y = a["model"][name][()], b["model"][name][()]
    assert np.allclose(x, y, rtol=1e-4, atol=1e-6), (name, np.abs(x - y).max())
    # Summed instead of averaged gradients would have moved the weights twice as far.
    assert np.abs(x - y).max() < 1e-3 * np.abs(y).max(), name
j = json.load(open("two.json"))
assert j["world_size"] == 2 and j["trained"][-1]["samples"] == 600, j
PY

# --lr 0: the weights stay put; rank 0's summed gradient is PyTorch's over rank 0's
# shard (the check fails on rank 1's shard or on the whole slice). --backend gloo
# names the default.
fixed=(--model mlp --train-samples 600 --test-samples 100 --batch-size 50 --lr 0 --momentum 0 --weight-decay 0
       --epochs 1 --snapshot-epochs 0 --seed 42 -q)
grad-dump "${fixed[@]}" --nproc 2 --backend gloo -o local.h5 || fail "grad-dump --nproc 2 --backend gloo --lr 0"
$check gradients local.h5 local.ckpt.h5 --model mlp --data-dir "$fashion" --train-samples 600 --batch 50 \
    --rank 0 --world-size 2 --seed 42 || fail "rank 0 did not record its local gradient"
$check gradients local.h5 local.ckpt.h5 --model mlp --data-dir "$fashion" --train-samples 600 --batch 50 \
    --rank 1 --world-size 2 --seed 42 2>/dev/null && fail "the recorded gradient matches rank 1's shard too"

# A 2-rank checkpoint resumes only on 2 ranks.
expect_exit 2 "^grad-dump: error: --resume: two.ckpt.h5 is from a run with world size 2, not 1; resume with the options of the original run$" -- \
    grad-dump "${slice[@]}" --batch-size 50 -o two.h5 --resume
expect_exit 2 "^grad-dump\[[01]\]: error: --resume: one.ckpt.h5 is from a run with world size 1, not 2" -- \
    grad-dump "${slice[@]}" --batch-size 100 -o one.h5 --resume --nproc 2
# Rank 0 fails alone (no statistics file to continue): the other rank says why.
rm local.h5
expect_exit 1 "^grad-dump\[1\]: error: rank 0 stopped: local.h5: no such file; --resume continues" -- \
    grad-dump "${fixed[@]}" --nproc 2 -o local.h5 --resume
finish
