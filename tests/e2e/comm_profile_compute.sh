#!/usr/bin/env bash
# comm-profile --model M --batch-size B: each rank times the model's forward and
# backward pass per step, the file stores them (/compute, format 1.1 on) and
# compress-bench takes its compute time from there unless --compute-ms is given.
source "$(dirname "$0")/common.sh"
cd "$WORK"
sweep=(--collectives allreduce -b 4K -e 64K -f 4 -n 5 -w 1)

comm-profile --nproc 2 "${sweep[@]}" --model mlp --batch-size 8 -o small.h5 2>small.log || fail "--model mlp --batch-size 8"
comm-profile --nproc 2 "${sweep[@]}" --model mlp --batch-size 2048 -o large.h5 --json >large.json 2>large.log ||
    fail "--model mlp --batch-size 2048"
grep -q "^\[0\] # compute: mlp, batch 8 of 1x28x28 in 10 classes per rank (Fashion-MNIST's shape, random values), 1 thread per rank$" small.log ||
    fail "no compute header: $(grep compute small.log)"
grep -q "^\[0\] # 5 timed steps after 1 warm-up, each the slowest rank's$" small.log || fail "no step count line"
for part in forward backward step; do
    grep -qE "^\[0\]    $part +[0-9.]+ +[0-9.]+ +[0-9.]+$" small.log || fail "no $part row: $(cat small.log)"
done

$ACC_PYTHON - <<'PY' || fail "the compute profile is wrong"
import json
import h5py
import numpy as np

def compute(path):
    f = h5py.File(path, "r")
    assert f.attrs["format_version"] == "1.3", dict(f.attrs)
    c = f["compute"]
    a = c.attrs
    assert a["model"] == "mlp" and a["classes"] == 10 and a["input"] == "Fashion-MNIST", dict(a)
    assert list(c["input_shape"][:]) == [1, 28, 28]
    assert a["warmup_steps"] == 1 and a["threads"] == 1
    forward, backward = c["forward"][:], c["backward"][:]
    assert forward.shape == (5,) and backward.shape == (5,)
    assert np.all(forward > 0) and np.all(backward > 0)
    assert a["forward_seconds"] == np.median(forward) and a["backward_seconds"] == np.median(backward)
    return a["batch_size"], a["forward_seconds"] + a["backward_seconds"]

small, large = compute("small.h5"), compute("large.h5")
assert small[0] == 8 and large[0] == 2048
# 256 times the samples: the step must take clearly longer.
assert large[1] > 5 * small[1], (small, large)
j = json.load(open("large.json"))["compute"]
assert j["model"] == "mlp" and j["batch_size"] == 2048 and j["steps"] == 5 and j["input_shape"] == [1, 28, 28]
with h5py.File("large.h5", "r") as f:
    assert j["forward_s"] == f["compute"].attrs["forward_seconds"]
PY

# The language model is timed on WikiText-2's shape: sequences of 35 tokens of its 33,278 words.
comm-profile -q --collectives allreduce -e 64 -n 2 -w 0 --model lstm --batch-size 1 -o lstm.h5 || fail "--model lstm"
$ACC_PYTHON -c '
import h5py
c = h5py.File("lstm.h5", "r")["compute"]
assert list(c["input_shape"][:]) == [35] and c.attrs["classes"] == 33278 and c.attrs["input"] == "WikiText-2"
' || fail "lstm's compute profile"

# compress-bench: the profile's compute time and its backward share, unless --compute-ms says otherwise.
printf 'fc1.weight 256x784\nfc1.bias 256\n' >shapes.txt
compress-bench -q --shapes shapes.txt --comm large.h5 --compressors none --world 2 --reps 1 --json >stored.json ||
    fail "compress-bench --comm with a compute profile"
compress-bench -q --shapes shapes.txt --comm large.h5 --compute-ms 250 --compressors none --world 2 --reps 1 \
    --json >given.json || fail "compress-bench --comm --compute-ms"
$ACC_PYTHON - <<'PY' || fail "compress-bench does not use the stored compute time"
import json, math, h5py
a = h5py.File("large.h5", "r")["compute"].attrs
f, b = a["forward_seconds"], a["backward_seconds"]
s, g = json.load(open("stored.json")), json.load(open("given.json"))
assert s["compute_source"] == "comm" and math.isclose(s["compute_seconds"], f + b, rel_tol=1e-12), s["compute_seconds"]
assert math.isclose(s["backward_share"], b / (f + b), rel_tol=1e-12)
assert s["baseline"][0]["iteration_seconds"] >= f + b
assert g["compute_source"] == "flag" and g["compute_seconds"] == 0.25 and math.isclose(g["backward_share"], 2 / 3)
PY
expect_exit 0 "warning: large.h5 holds the compute time of mlp, but the gradients are resnet18's" -- \
    compress-bench --comm large.h5 --compressors none --world 2 --reps 1

# Usage errors, and ranks that disagree on the model.
expect_exit 2 "^comm-profile: error: --batch-size: sets the batch of the timed model; it needs --model$" -- \
    comm-profile --batch-size 8 -e 64
expect_exit 2 "--model: .*resnet50" -- comm-profile --model resnet50 -e 64
port=$(free_port)
expect_exit 2 "^comm-profile\[0\]: error: rank 1 was started with other model options than rank 0 \(--model and --batch-size must be the same on every rank\)$" -- \
    bash -c "comm-profile --rank 1 --world-size 2 --master-port $port -e 64 -q 2>/dev/null & comm-profile --rank 0 --world-size 2 --master-port $port -e 64 --model mlp -q; status=\$?; wait; exit \$status"
finish
