#!/usr/bin/env bash
# A seed's training is deterministic: the same CNN run twice, uncompressed on one
# rank and with PowerSGD rank 2 on two (once with --nproc 2, once with the ranks
# started by hand, the two ways the studies of docs/results.md train), writes the
# same metrics bit for bit, all but the wall times: losses, accuracies, floats
# sent, levels. Runs of another seed differ.
source "$(dirname "$0")/common.sh"
cd "$WORK"
base=(--model cnn --train-samples 1024 --test-samples 512 --batch-size 64 --epochs 2 --lr 0.01 --momentum 0.9
    --weight-decay 1e-4 --threads 1 -q)
for setting in "1 none" "2 powersgd:2"; do
    read -r ranks spec <<<"$setting"
    for run in a b; do
        name=$ranks-${spec/:/}-$run
        rm -rf ckpt
        if [ "$ranks" = 2 ] && [ "$run" = b ]; then
            # The second run's ranks started by hand (--rank, as on two machines or in
            # the shaped-link studies' network namespaces), the first's by --nproc.
            port=$(free_port)
            train-dist "${base[@]}" --seed 3 --rank 1 --world-size 2 --master-port "$port" --compress "$spec" \
                --metrics "$name.h5" --checkpoint-dir ckpt 2>"$name.rank1.err" &
            rank1=$!
            train-dist "${base[@]}" --seed 3 --rank 0 --world-size 2 --master-port "$port" --compress "$spec" \
                --metrics "$name.h5" --checkpoint-dir ckpt 2>"$name.err" || fail "rank 0 by hand: $(tail -3 "$name.err")"
            wait "$rank1" || fail "rank 1 by hand: $(tail -3 "$name.rank1.err")"
            continue
        fi
        train-dist "${base[@]}" --seed 3 --nproc "$ranks" --compress "$spec" --metrics "$name.h5" --checkpoint-dir ckpt \
            2>"$name.err" || fail "train-dist --nproc $ranks --compress $spec ($run): $(tail -3 "$name.err")"
    done
    "$ACC_PYTHON" - "$ranks-${spec/:/}-a.h5" "$ranks-${spec/:/}-b.h5" <<'PY' ||
import sys

import h5py
import numpy as np

a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
compared = []


def visit(name, item):
    if not isinstance(item, h5py.Dataset) or "seconds" in name.split("/")[-1]:
        return
    other = b.get(name)
    assert other is not None, f"{name}: only in the first run"
    x, y = item[()], other[()]
    same = np.array_equal(x, y, equal_nan=True) if np.asarray(x).dtype.kind == "f" else np.array_equal(x, y)
    assert same, f"{name}: {x!r} against {y!r}"
    compared.append(name)


a.visititems(visit)
for column in ("epochs/loss", "epochs/test_accuracy", "epochs/floats_sent_total"):
    assert column in compared, (column, compared)
PY
        fail "--nproc $ranks --compress $spec: two runs of the same seed differ"
done
# The comparison can fail: a run of another seed differs from them.
rm -rf ckpt
train-dist "${base[@]}" --seed 4 --nproc 1 --compress none --metrics other.h5 --checkpoint-dir ckpt 2>other.err ||
    fail "train-dist --seed 4: $(tail -3 other.err)"
"$ACC_PYTHON" -c 'import h5py, numpy as np, sys
a, b = (h5py.File(p, "r")["epochs/loss"][()] for p in sys.argv[1:3])
sys.exit(0 if not np.array_equal(a, b) else "seeds 3 and 4 gave the same losses")' 1-none-a.h5 other.h5 ||
    fail "another seed's run did not differ"
finish
