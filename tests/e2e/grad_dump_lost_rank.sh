#!/usr/bin/env bash
# grad-dump --nproc 2 with a rank killed during training: rank 0 names the lost
# rank and stops with exit 1, the launcher exits with 128 + 9, and the files
# hold every completed epoch. --resume on 2 ranks then ends with the files of a
# run that was never stopped. Ranks started with different options refuse to train.
source "$(dirname "$0")/common.sh"
cd "$WORK"
# Ranks this script started do not outlive it.
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
args=(--model mlp --hidden-size 64 --train-samples 4000 --test-samples 100 --batch-size 10 --epochs 5 --lr 0.02
      --momentum 0.9 --seed 3 --step-norms --snapshot-epochs 1,4 --nproc 2 --timeout 30)

grad-dump "${args[@]}" -q -o full.h5 || fail "uninterrupted 2-rank run"

grad-dump "${args[@]}" -v -o part.h5 2>part.log &
launcher=$!
wait_for_line part.log '^grad-dump\[0\]: epoch 0 \(1/5\)' 30 || true
victim=$(grep -oE 'rank 1 is pid [0-9]+' part.log | grep -oE '[0-9]+$')
kill -KILL "$victim"
got=0
wait "$launcher" || got=$?
[ "$got" = 137 ] || fail "the launcher exited with $got, expected 137: $(tail -3 part.log)"
grep -qE "^grad-dump\[0\]: error: rank 1 \(host [^,]+, pid $victim\) lost during allreduce after [0-9.]+ s \(connection closed\)$" part.log ||
    fail "rank 0 did not name the lost rank: $(grep 'error' part.log)"
grep -q "^grad-dump: warning: rank 1 was killed by signal 9" part.log || fail "the launcher did not report the killed rank"

$ACC_PYTHON - <<'PY' || fail "the stopped run's file is not a valid partial file"
import h5py
with h5py.File("part.h5", "r") as f:
    assert f.attrs["complete"] == 0 and f.attrs["world_size"] == 2, dict(f.attrs)
    assert 1 <= f["epochs/norm"].shape[0] < 5, f["epochs/norm"].shape
PY

grad-dump "${args[@]}" -o part.h5 --resume 2>resume.log || fail "resume on 2 ranks: $(tail -3 resume.log)"
grep -Eq '^grad-dump\[0\]: resuming part.h5 after epoch [0-3] from part.ckpt.h5' resume.log || fail "resume log: $(cat resume.log)"

"$ACC_PYTHON" "$ACC_SOURCE/tests/e2e/same_run.py" full.h5 part.h5 --epochs 5 --parameters 6 --global-step 1000 \
    --checkpoint-groups model,optimizer,extra || fail "the resumed run differs from the uninterrupted one"
# Ranks started by hand with different options refuse to train.
port=$(free_port)
expect_exit 2 "^grad-dump\[0\]: error: rank 1 was started with other options than rank 0; every rank needs the same" -- \
    bash -c "grad-dump --model mlp --train-samples 100 --epochs 1 --rank 1 --world-size 2 --master-port $port --lr 0.2 -q -o o1.h5 2>/dev/null & grad-dump --model mlp --train-samples 100 --epochs 1 --rank 0 --world-size 2 --master-port $port -o o0.h5; status=\$?; wait; exit \$status"
finish
