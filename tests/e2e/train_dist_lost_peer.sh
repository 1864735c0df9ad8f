#!/usr/bin/env bash
# A rank killed in the middle of an epoch: the other rank stops with an error
# naming it within --timeout, the launcher reports it, and the last checkpoint
# and metrics file stay whole (and resume). A rank that fails for a reason of its
# own (a schedule that does not fit) tells the other why.
source "$(dirname "$0")/common.sh"
cd "$WORK"
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
# lr 0.02: batch 8 at the default 0.1 can diverge (LibTorch 2.x reached NaN at step 104).
args=(--model mlp --train-samples 6000 --test-samples 100 --batch-size 8 --epochs 4 --threads 1 --compress powersgd:2
      --lr 0.02 --nproc 2 --timeout 10)

train-dist "${args[@]}" -v >out.txt 2>err.txt &
launcher=$!
for _ in $(seq 1200); do
    grep -q 'train-dist\[0\]: epoch 1 (2/4)' err.txt 2>/dev/null && break
    sleep 0.05
done
sleep 0.3  # into epoch 2
victim=$(grep -oE 'rank 1 is pid [0-9]+' err.txt | grep -oE '[0-9]+$')
start=$(date +%s%N)
kill -KILL "$victim"
got=0
wait "$launcher" || got=$?
took=$(( ($(date +%s%N) - start) / 1000000000 ))
[ "$got" = 137 ] || fail "the launcher exited with $got, expected 137 (rank 1 killed)"
[ "$took" -lt 10 ] || fail "rank 0 took $took s to stop after its peer was killed (timeout 10 s)"
grep -qE "^train-dist\[0\]: error: rank 1 \(host [^,]+, pid $victim\) lost during [a-z_]+ after [0-9.]+ s" err.txt ||
    fail "rank 0 did not name the lost rank: $(grep 'train-dist\[0\]: error' err.txt)"
grep -q "^train-dist: warning: rank 1 was killed by signal 9" err.txt || fail "the launcher did not report the killed rank"
pgrep -P "$launcher" >/dev/null && fail "the launcher left ranks running"

$ACC_PYTHON - <<'PY' || fail "the checkpoint or metrics file is not whole"
import h5py
with h5py.File("metrics.h5", "r") as m, h5py.File("metrics.ckpt.h5", "r") as c:
    assert m.attrs["complete"] == 0
    done = c.attrs["epoch"]
    assert 2 <= done < 4, done
    assert m["epochs/lr"].shape[0] == done, (m["epochs/lr"].shape, done)
    assert c["model/fc1.weight"].shape == (256, 784)
PY
ls -a | grep -q '\.tmp-' && fail "a temporary file was left behind: $(ls -a)"
train-dist "${args[@]}" --resume -q 2>resume.err || fail "resume after the lost peer: $(tail -2 resume.err)"
$ACC_PYTHON -c 'import h5py; f = h5py.File("metrics.h5", "r"); assert f.attrs["complete"] == 1 and f["epochs/lr"].shape[0] == 4' ||
    fail "the resumed run did not complete the metrics file"

# Rank 0 refuses a schedule for another model; rank 1 reports why rank 0 stopped.
"$ACC_PYTHON" - <<'PY'
import h5py, numpy as np
with h5py.File("other.h5", "w") as f:
    f.attrs["format"], f.attrs["format_version"], f.attrs["mode"] = "accordion.schedule", "1.0", "compression"
    f["parameters/name"] = np.array(["w"], dtype=h5py.string_dtype())
    f["parameters/ndim"] = np.array([2], dtype=np.int32)
    f["parameters/shape"] = np.array([[3, 4]], dtype=np.int64)
    f["parameters/numel"] = np.array([12], dtype=np.int64)
    f["levels"] = np.array(["none"], dtype=h5py.string_dtype())
    f["epochs/level"] = np.zeros((4, 1), dtype=np.int32)
    f["epochs/critical"] = np.zeros((4, 1), dtype=np.uint8)
    f["epochs/ratio"] = np.zeros((4, 1))
    f["epochs/reason"] = np.zeros((4, 1), dtype=np.int8)
PY
expect_exit 2 "^train-dist\[0\]: error: other.h5 does not fit this run: \(1\) it lists 1 parameters, the model has 6; \(2\) the model's parameter 'fc1.weight' is missing" -- \
    train-dist --model mlp --train-samples 500 --epochs 4 --nproc 2 --schedule other.h5 --metrics o.h5
grep -q "^train-dist\[1\]: error: rank 0 stopped: other.h5 does not fit this run" "$WORK/err" || fail "rank 1: $(grep 'train-dist\[1\]' "$WORK/err")"

# Ranks started by hand with different options refuse to train.
port=$(free_port)
expect_exit 2 "^train-dist\[0\]: error: rank 1 was started with other options than rank 0; every rank needs the same" -- \
    bash -c "train-dist --model mlp --train-samples 100 --epochs 1 --rank 1 --world-size 2 --master-port $port --lr 0.2 -q 2>/dev/null & train-dist --model mlp --train-samples 100 --epochs 1 --rank 0 --world-size 2 --master-port $port --metrics o2.h5; status=\$?; wait; exit \$status"
finish
