#!/usr/bin/env bash
# A grad-dump run killed with SIGKILL after epoch 2 and resumed with --resume
# ends with the same weights, optimizer state and gradient-statistics file
# (norms, per-step norms, snapshots, losses) as a run that was never stopped.
source "$(dirname "$0")/common.sh"
cd "$WORK"
args=(--model mlp --train-samples 2000 --test-samples 200 --batch-size 20 --epochs 6 --lr 0.02 --momentum 0.9
      --nesterov --weight-decay 1e-4 --lr-decay-epochs 4 --seed 5 --step-norms --snapshot-epochs 1,4 --threads 1)

grad-dump "${args[@]}" -o full.h5 -q || fail "uninterrupted run"

grad-dump "${args[@]}" -o part.h5 2>part.log &
pid=$!
wait_for_line part.log '^epoch 2 \(3/6\)' 60 || true
kill -KILL "$pid" 2>/dev/null || true
status=0
wait "$pid" 2>/dev/null || status=$?
[ "$status" = 137 ] || fail "the run was not killed mid-way (exit $status): $(cat part.log)"

$ACC_PYTHON - <<'PY' || fail "the killed run's file is not a valid partial file"
import h5py
with h5py.File("part.h5", "r") as f:
    assert f.attrs["complete"] == 0, dict(f.attrs)
    assert 3 <= f["epochs/norm"].shape[0] < 6, f["epochs/norm"].shape
PY
regime-detect part.h5 -o partial-sched.h5 -q 2>/dev/null || fail "regime-detect cannot read the killed run's file"

grad-dump "${args[@]}" -o part.h5 --resume 2>resume.log || fail "resume: $(cat resume.log)"
grep -Eq '^resuming part.h5 after epoch [2-4] from part.ckpt.h5' resume.log || fail "resume log: $(cat resume.log)"

"$ACC_PYTHON" "$ACC_SOURCE/tests/e2e/same_run.py" full.h5 part.h5 --epochs 6 --parameters 6 --global-step 600 ||
    fail "the resumed run differs from the uninterrupted one"
finish
