#!/usr/bin/env bash
# A two-rank train-dist run whose ranks are killed (SIGKILL) after an epoch and
# that is resumed with --resume ends bit for bit with the weights, optimizer
# state, per-rank error-feedback memories and metrics of a run never stopped:
# once with online Accordion switching between topk and powersgd, once with a
# schedule that moves DGC, top-k and PowerSGD around the layers.
source "$(dirname "$0")/common.sh"
cd "$WORK"
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
check="$ACC_PYTHON $ACC_SOURCE/tests/e2e/train_dist_check.py"
base=(--model mlp --hidden-size 64 --train-samples 2400 --test-samples 200 --batch-size 16 --epochs 6 --threads 1
      --momentum 0.9 --nesterov --weight-decay 1e-4 --lr 0.05 --lr-decay-epochs 4 --seed 11 --nproc 2)

# resume_case NAME OPTION...: uninterrupted run in NAME-full/, killed and resumed run in NAME-part/.
resume_case() {
    local name=$1
    shift
    mkdir "$name-full" "$name-part"
    train-dist "${base[@]}" "$@" --metrics "$name-full/m.h5" -q || { fail "$name: uninterrupted run"; return; }

    train-dist "${base[@]}" "$@" --metrics "$name-part/m.h5" -v >"$name-part/out" 2>"$name-part/log" &
    local launcher=$!
    for _ in $(seq 1200); do
        grep -q 'train-dist\[0\]: epoch 2 (3/6)' "$name-part/log" 2>/dev/null && break
        sleep 0.05
    done
    local ranks
    ranks=$(grep -oE 'rank [01] is pid [0-9]+' "$name-part/log" | grep -oE '[0-9]+$' | tr '\n' ' ')
    kill -KILL $ranks 2>/dev/null || true
    local status=0
    wait "$launcher" 2>/dev/null || status=$?
    [ "$status" = 137 ] || { fail "$name: the ranks were not killed mid-run (launcher exit $status)"; return; }
    $ACC_PYTHON - "$name-part" <<'PY' || fail "$name: the killed run did not leave a whole checkpoint and metrics file"
import sys, h5py
d = sys.argv[1]
with h5py.File(d + "/m.h5", "r") as m, h5py.File(d + "/m.ckpt.h5", "r") as c:
    assert m.attrs["complete"] == 0
    done = c.attrs["epoch"]
    assert 3 <= done < 6 and m["epochs/lr"].shape[0] >= done, (done, m["epochs/lr"].shape)
    assert sorted(c["extra/ranks"].keys()) == ["0", "1"], list(c["extra/ranks"].keys())
PY
    train-dist "${base[@]}" "$@" --metrics "$name-part/m.h5" --resume 2>"$name-part/resume.log" ||
        { fail "$name: resume: $(tail -3 "$name-part/resume.log")"; return; }
    grep -qE "^train-dist\[0\]: resuming $name-part/m.h5 after epoch [2-4] from $name-part/m.ckpt.h5" \
        "$name-part/resume.log" || fail "$name: resume log: $(head -3 "$name-part/resume.log")"
    $check same-run "$name-full/m.ckpt.h5" "$name-part/m.ckpt.h5" ||
        fail "$name: the resumed run's checkpoint differs from the uninterrupted run's"
    $check same-run "$name-full/m.h5" "$name-part/m.h5" \
        --skip seconds,compute_seconds,compression_seconds,encode_seconds,decode_seconds,communication_seconds,rank_communication_seconds ||
        fail "$name: the resumed run's metrics differ from the uninterrupted run's"
}

resume_case accordion --accordion --low topk:0.3 --high powersgd:1 --interval 2 --eta 0.15
# The checkpoints compared above hold each rank's own error memories.
$ACC_PYTHON - <<'PY' || fail "per-rank error memories"
import h5py, numpy as np
with h5py.File("accordion-full/m.ckpt.h5", "r") as c:
    r0, r1 = c["extra/ranks/0"], c["extra/ranks/1"]
    assert "fc1.weight" in r0 and "error" in r0["fc1.weight"], list(r0.keys())
    assert not np.array_equal(r0["fc1.weight/error"][()], r1["fc1.weight/error"][()])
    assert c["extra/accordion/norm"].shape == (6, 6)
PY

# A schedule that changes levels every epoch, DGC (per-rank momentum) among them.
train-dist --model mlp --hidden-size 64 --train-samples 200 --test-samples 50 --epochs 1 --threads 1 \
    --metrics shapes.h5 --checkpoint-dir . -q || fail "shapes run"
$check schedule sched.h5 --model-from shapes.h5 --levels dgc:0.2,topk:0.1,none,powersgd:2 --epochs 6
resume_case schedule --schedule sched.h5
finish
