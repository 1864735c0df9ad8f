#!/usr/bin/env bash
# train-dist --auto on two ranks joined by a 20 Mbit/s link (scripts/shaped-link.sh):
# the measured link is the shaped one (within a factor of two of 2.5 MB/s), its burst
# tbf's 32 KB (13 ms at 2.5 MB/s, within a factor of 2.5), every epoch compresses, and
# it sends fewer floats than uncompressed training does.
source "$(dirname "$0")/common.sh"
use_shaped_link
cd "$WORK"
shaped_link_up 20mbit || skip "no shaped link here: $SHAPED_WHY"
run=(--model mlp --hidden-size 64 --dataset synthetic --train-samples 960 --test-samples 64 --batch-size 24 --threads 1
     --epochs 3 --auto)
got=0
SHAPED_RANK1_LOG=rank1.err shaped_ranks "$ACC_BIN/train-dist" "${run[@]}" --metrics auto.h5 2>rank0.err || got=$?
[ "$got" = 0 ] || fail "a rank failed (exit $got): $(tail -2 rank0.err) $(tail -2 rank1.err)"
"$ACC_PYTHON" - <<'PY' || fail "--auto did not compress on a 20 Mbit/s link: $(grep auto rank0.err)"
import h5py
f = h5py.File("auto.h5", "r")
a = f["auto"]
bandwidth, burst = a["allreduce_bandwidth"][0], a["burst_seconds"][0]
print("link", bandwidth / 1e6, "MB/s, burst", burst * 1e3, "ms; pays", list(a["pays"][()]), "floats sent",
      list(f["epochs/floats_sent"][()]))
assert 1.25e6 <= bandwidth <= 5e6, bandwidth
assert 0.0052 <= burst <= 0.032, burst
assert all(a["pays"][()]), list(a["pays"][()])
# Uncompressed, every step sends every value: 4 bytes each, a float each.
dense = f["epochs/steps"][()] * f["parameters/numel"][()].sum()
sent = f["epochs/floats_sent"][()]
assert (sent < dense / 4).all(), (sent, dense)
assert (f["epochs/level"][()] != 0).any(axis=1).all(), f["epochs/level"][()]
PY
grep -q "train-dist\[0\]: epoch 0 (1/3): .*; auto pays: modelled" rank0.err ||
    fail "the epoch line does not say that compression pays: $(grep 'epoch 0' rank0.err)"
finish
