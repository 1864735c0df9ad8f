#!/usr/bin/env bash
# train-dist under Debian's torchrun (--no_python): the ranks take their
# rendezvous from torchrun's environment, rank 0 alone writes the metrics file,
# and h5py reads it.
source "$(dirname "$0")/common.sh"
cd "$WORK"
"$ACC_PYTHON" -c 'import torch.distributed.run' 2>/dev/null || { echo "SKIP: no torch.distributed.run in $ACC_PYTHON"; exit 77; }
port=$(free_port)
mkdir run
got=0
# The form the manual gives, which torchrun 1.13 and 2.x both accept.
"$ACC_PYTHON" -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2 --master_port "$port" \
    --log_dir "$WORK/logs" --no_python "$ACC_BIN/train-dist" --model cnn --dataset synthetic --train-samples 400 \
    --test-samples 100 --batch-size 20 --epochs 2 --threads 1 --compress topk:0.05 --metrics run/metrics.h5 -v \
    >out.txt 2>err.txt || got=$?
[ "$got" = 0 ] || fail "torchrun exited with $got: $(tail -5 err.txt)"
cat out.txt err.txt >all.txt
for r in 0 1; do
    grep -qE "train-dist\[$r\]: debug: joining as rank $r of 2 \(gloo\), store at 127.0.0.1:$port hosted by torchrun's agent" all.txt ||
        fail "rank $r did not join torchrun's agent store: $(grep -m2 joining all.txt)"
done
[ "$(ls run)" = "metrics.ckpt.h5
metrics.h5" ] || fail "rank 0 should write exactly the metrics file and the checkpoint: $(ls run)"
"$ACC_PYTHON" - <<'PY' || fail "run/metrics.h5 is not a 2-rank metrics file"
import h5py
with h5py.File("run/metrics.h5", "r") as f:
    assert f.attrs["format"] == "accordion.metrics" and f.attrs["complete"] == 1
    assert f.attrs["world_size"] == 2 and f.attrs["compress"] == "topk:0.05", dict(f.attrs)
    assert list(f["epochs/samples"][()]) == [400, 400]
    assert list(f["epochs/steps"][()]) == [10, 10]
    names = [n.decode() if isinstance(n, bytes) else n for n in f["parameters/name"][()]]
    assert names[0] == "conv1.weight" and len(names) == 8, names
    assert (f["epochs/bytes_sent"][()] > 0).all()
PY
"$ACC_PYTHON" "$ACC_SOURCE/tests/e2e/train_dist_check.py" data-sent run/metrics.h5 >/dev/null || fail "data sent"
finish
