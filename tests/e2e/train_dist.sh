#!/usr/bin/env bash
# train-dist on two ranks: every rank holds the same weights after every epoch
# (uncompressed, powersgd, topk and a mixed schedule), the metrics file counts
# the data sent as docs/metrics.md defines it, a schedule's levels and a batch
# schedule's batch sizes are followed, and online Accordion decides exactly as
# regime-detect does offline on the same norms.
source "$(dirname "$0")/common.sh"
cd "$WORK"
check="$ACC_PYTHON $ACC_SOURCE/tests/e2e/train_dist_check.py"
base=(--model mlp --hidden-size 64 --train-samples 1200 --test-samples 300 --threads 1
      --momentum 0.9 --weight-decay 1e-4 --lr 0.05 --seed 3 --nproc 2 -v)

# checksums LOG: "epoch rank checksum" per line, from each rank's own debug line.
checksums() {
    sed -nE 's/^train-dist\[[01]\]: debug: rank ([01]): weights after epoch ([0-9]+) \(step [0-9]+\): checksum ([0-9a-f]{16})$/\2 \1 \3/p' "$1"
}

# same_weights NAME: both ranks logged equal checksums after every epoch.
same_weights() {
    local lines
    lines=$(checksums "$1.log" | sort)
    [ "$(echo "$lines" | wc -l)" = 6 ] || { fail "$1: expected 3 epochs x 2 ranks of checksums: $lines"; return; }
    for e in 0 1 2; do
        local sums
        sums=$(echo "$lines" | awk -v e="$e" '$1 == e {print $3}' | sort -u | wc -l)
        [ "$sums" = 1 ] || fail "$1: ranks hold different weights after epoch $e: $(echo "$lines" | grep "^$e ")"
    done
}

# run NAME EPOCHS [OPTION...]: a run at 24 samples per rank and step.
run() {
    local name=$1 epochs=$2
    shift 2
    train-dist "${base[@]}" --batch-size 24 --epochs "$epochs" --metrics "$name.h5" --checkpoint-dir "ck-$name" "$@" \
        >"$name.out" 2>"$name.log" ||
        fail "$name: exit $?: $(tail -3 "$name.log")"
}

mkdir ck-none ck-powersgd ck-topk ck-mixed ck-batch ck-accordion
run none 3
run powersgd 3 --compress powersgd:2 --json
run topk 3 --compress topk:0.1
$check schedule mixed-sched.h5 --model-from none.h5 --levels powersgd:1,none,topk:0.2,signsgd,fp16 --epochs 2
run mixed 3 --schedule mixed-sched.h5 --schedule-extend last --micro-batch-size 10
for name in none powersgd topk mixed; do
    same_weights "$name"
    $check data-sent "$name.h5" >/dev/null || fail "$name: data sent does not follow docs/metrics.md"
done
$check levels mixed.h5 mixed-sched.h5 || fail "the mixed run did not follow its schedule"
# The checks can fail: different levels end with different weights.
final() { checksums "$1.log" | awk '$1 == 2 && $2 == 0 {print $3}'; }
[ "$(final none)" != "$(final powersgd)" ] && [ "$(final powersgd)" != "$(final topk)" ] ||
    fail "different compressors ended with the same weights"
grep -q "train-dist\[0\]: epoch 2 (3/3): loss [0-9.]*, accuracy [0-9.]*%, test loss [0-9.]*, test accuracy [0-9.]*%, lr 0.05, batch 48; levels none x3, powersgd:2 x3; sent" powersgd.log ||
    fail "powersgd: epoch line: $(grep 'epoch 2' powersgd.log)"
grep -qE "rank 0: ([1-9][0-9]*) of \1 buckets launched during the backward pass" none.log ||
    fail "uncompressed buckets did not overlap the backward pass: $(grep buckets none.log | head -2)"

$ACC_PYTHON - <<'PY' || fail "--json summary: $(head -c 300 powersgd.out)"
import json, h5py
summary = json.load(open("powersgd.out"))
assert summary["metrics"] == "powersgd.h5" and summary["world_size"] == 2 and summary["mode"] == "compress"
rows = summary["trained"]
assert [r["epoch"] for r in rows] == [0, 1, 2]
assert rows[0]["levels"] == ["powersgd:2", "none"] * 3, rows[0]["levels"]
with h5py.File("powersgd.h5", "r") as f:
    assert [r["bytes_sent_total"] for r in rows] == list(f["epochs/bytes_sent_total"][()])
PY
$ACC_PYTHON - <<'PY' || fail "metrics files"
import h5py, numpy as np
with h5py.File("none.h5", "r") as f:
    a = f.attrs
    assert a["format"] == "accordion.metrics" and a["complete"] == 1 and a["world_size"] == 2, dict(a)
    assert a["mode"] == "compress" and a["compress"] == "none" and a["backend"] == "gloo"
    assert list(f["epochs/steps"][()]) == [25, 25, 25], f["epochs/steps"][()]  # 600 samples per rank / 24
    assert list(f["epochs/samples"][()]) == [1200] * 3
    assert list(f["epochs/batch_size"][()]) == [48] * 3
    assert (f["epochs/lr"][()] == 0.05).all()
    assert ((f["epochs/test_accuracy"][()] > 0.4) & (f["epochs/accuracy"][()] > 0.3)).all()
    assert (f["epochs/compression_seconds"][()] == 0).all()
with h5py.File("mixed.h5", "r") as f:
    assert f.attrs["mode"] == "schedule" and f.attrs["schedule_mode"] == "compression"
    assert f["epochs/level"].shape == (3, 6)
PY

# A batch schedule: global batches of 48, 96, 96 (24 and 48 per rank, 16 at a time), learning rate scaled.
$check batch-schedule batch-sched.h5 --model-from none.h5 --batch 48,96,96 --scale 1,2,2
train-dist "${base[@]}" --epochs 3 --metrics batch.h5 --checkpoint-dir ck-batch --schedule batch-sched.h5 --micro-batch-size 16 \
    >batch.out 2>batch.log || fail "batch schedule: $(tail -3 batch.log)"
same_weights batch
$ACC_PYTHON - <<'PY' || fail "batch schedule metrics"
import h5py
with h5py.File("batch.h5", "r") as f:
    assert f.attrs["schedule_mode"] == "batch" and f.attrs["batch_size"] == 0
    assert list(f["epochs/batch_size"][()]) == [48, 96, 96], f["epochs/batch_size"][()]
    assert list(f["epochs/steps"][()]) == [25, 13, 13], f["epochs/steps"][()]  # 600 per rank: 24 x 25; 48 x 12 + 24
    assert list(f["epochs/lr"][()]) == [0.05, 0.1, 0.1], f["epochs/lr"][()]
PY

# Online Accordion against regime-detect on the norms the run recorded.
run accordion 7 --accordion --low topk:0.05 --high powersgd:2 --interval 2 --eta 0.5 --lr-decay-epochs 5
$check data-sent accordion.h5 >/dev/null || fail "accordion: data sent"
$check grads-from accordion.h5 accordion-grads.h5
regime-detect accordion-grads.h5 --eta 0.5 --interval 2 --low topk:0.05 --high powersgd:2 -o offline.h5 -q ||
    fail "regime-detect on the recorded norms"
$check decisions accordion.h5 offline.h5 || fail "online decisions differ from regime-detect's"
$ACC_PYTHON - <<'PY' || fail "accordion metrics"
import h5py
with h5py.File("accordion.h5", "r") as f:
    levels = [l.decode() if isinstance(l, bytes) else l for l in f["levels"][()]]
    assert levels == ["none", "topk:0.05", "powersgd:2"], levels
    assert f.attrs["mode"] == "accordion" and f.attrs["interval"] == 2 and f.attrs["low"] == "topk:0.05"
    used = set(f["epochs/level"][()].flatten())
    assert used == {0, 1, 2}, used  # both levels were used
    assert (f["epochs/reason"][5] == 4).all()  # the rate decays at epoch 5
PY
finish
