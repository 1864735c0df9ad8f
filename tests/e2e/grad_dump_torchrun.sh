#!/usr/bin/env bash
# grad-dump under Debian's torchrun (--no_python): the ranks take their
# rendezvous from torchrun's environment, join the store its agent hosts, and
# train data-parallel exactly as with --nproc (the same weights and statistics).
source "$(dirname "$0")/common.sh"
cd "$WORK"
"$ACC_PYTHON" -c 'import torch.distributed.run' 2>/dev/null || { echo "SKIP: no torch.distributed.run in $ACC_PYTHON"; exit 77; }
args=(--model mlp --hidden-size 32 --train-samples 800 --test-samples 100 --batch-size 40 --epochs 2 --lr 0.1 --seed 9)
port=$(free_port)
got=0
# The form the manual gives, which torchrun 1.13 and 2.x both accept.
"$ACC_PYTHON" -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2 --master_port "$port" \
    --log_dir "$WORK/logs" --no_python "$ACC_BIN/grad-dump" "${args[@]}" -v -o torchrun.h5 >out.txt 2>err.txt || got=$?
[ "$got" = 0 ] || fail "torchrun exited with $got: $(tail -5 err.txt)"
cat out.txt err.txt >all.txt
for r in 0 1; do
    grep -qE "grad-dump\[$r\]: debug: joining as rank $r of 2 \(gloo\), store at 127.0.0.1:$port hosted by torchrun's agent" all.txt ||
        fail "rank $r did not join torchrun's agent store: $(grep -m2 joining all.txt)"
done
grad-dump "${args[@]}" --nproc 2 -q -o nproc.h5 || fail "grad-dump --nproc 2"

"$ACC_PYTHON" - <<'PY' || fail "torchrun's run differs from the --nproc run"
import h5py
import numpy as np
a, b = h5py.File("torchrun.h5", "r"), h5py.File("nproc.h5", "r")
assert a.attrs["world_size"] == 2 and a.attrs["complete"] == 1, dict(a.attrs)
assert np.array_equal(a["epochs/norm"][:], b["epochs/norm"][:])
assert np.array_equal(a["epochs/loss"][:], b["epochs/loss"][:])
ca, cb = h5py.File("torchrun.ckpt.h5", "r"), h5py.File("nproc.ckpt.h5", "r")
for name in ca["model"]:
    assert np.array_equal(ca["model"][name][()], cb["model"][name][()]), name
PY
finish
