#!/usr/bin/env bash
# A damaged checkpoint, metrics or gradient-statistics file is refused with one
# line naming the file and the dataset or counter, and nothing is overwritten:
# - one byte flipped in the data of every tensor of a checkpoint (weights,
#   buffers, momentum, error memories, PowerSGD's Q, the run's counters), caught
#   by the Fletcher-32 checksum every numeric dataset carries;
# - the epoch or global_step attribute changed (no checksum on attributes):
#   cross-checked with /extra/run/epoch_steps;
# - a dataset's checksum removed from a checkpoint of format 1.1;
# - a GraVAC checkpoint without its controller's inputs;
# - a flipped byte in a metrics file resumed, and in a gradient-statistics file
#   that regime-detect reads.
source "$(dirname "$0")/common.sh"
cd "$WORK"
base=(--model mlp --hidden-size 32 --train-samples 480 --test-samples 100 --batch-size 24 --threads 1 --momentum 0.9
      --seed 3 --nproc 2 -q)
run=("${base[@]}" --compress powersgd:2)
train-dist "${run[@]}" --epochs 2 --metrics m.h5 2>first.log || fail "first part: $(cat first.log)"
cp m.ckpt.h5 clean.ckpt.h5
cp m.h5 clean.h5

# damage KIND NAME [VALUE]: rewrites m.ckpt.h5 (or FILE for flip-in) with one fault.
damage() {
    "$ACC_PYTHON" - "$@" <<'PY'
import sys, h5py
kind, name = sys.argv[1], sys.argv[2]
path = sys.argv[4] if kind == "flip-in" else "m.ckpt.h5"
if kind in ("flip", "flip-in"):
    with h5py.File(path, "r") as f:
        info = f[name].id.get_chunk_info(0)
        offset = info.byte_offset + info.size // 2
    with open(path, "r+b") as g:
        g.seek(offset)
        byte = g.read(1)[0]
        g.seek(offset)
        g.write(bytes([byte ^ 0x10]))
elif kind == "attr":
    with h5py.File(path, "r+") as f:
        f.attrs[name] = int(sys.argv[3])
elif kind == "unsum":  # the same values, written again without a checksum
    with h5py.File(path, "r+") as f:
        data, attrs = f[name][()], dict(f[name].attrs)
        del f[name]
        f.create_dataset(name, data=data)
        for key, value in attrs.items():
            f[name].attrs[key] = value
elif kind == "delete":
    with h5py.File(path, "r+") as f:
        del f[name]
PY
}

# refused MESSAGE OPTION...: the resume exits 1 with MESSAGE, and leaves both files as they were.
refused() {
    local message=$1
    shift
    cp m.ckpt.h5 before.ckpt.h5
    expect_exit 1 "$message" -- train-dist "$@" --epochs 3 --metrics m.h5 --resume
    cmp -s m.ckpt.h5 before.ckpt.h5 || fail "the damaged checkpoint was overwritten ($message)"
    cmp -s m.h5 clean.h5 || fail "the metrics file was changed by a refused resume ($message)"
    cp clean.ckpt.h5 m.ckpt.h5
}

tensors=$("$ACC_PYTHON" -c "
import h5py
with h5py.File('m.ckpt.h5', 'r') as f:
    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.size and 'dtype' in o.attrs else None)
    print(' '.join(names))")
count=0
for name in $tensors; do
    damage flip "$name"
    refused "m\.ckpt\.h5: dataset /$name fails its checksum \(Fletcher-32\): the file is damaged" "${run[@]}"
    count=$((count + 1))
done
[ "$count" -ge 30 ] || fail "only $count tensors in the checkpoint: $tensors"
echo "$count tensors with a flipped byte: each refused"

for epoch in 0 1 3; do
    damage attr epoch "$epoch"
    refused "m\.ckpt\.h5: epoch $epoch but /extra/run/epoch_steps holds 2 epochs; the file is damaged" "${run[@]}"
done
damage attr global_step 8
refused "m\.ckpt\.h5: global_step 8 but its 2 completed epochs took 20 steps \(/extra/run/epoch_steps\); the file is damaged" "${run[@]}"
damage unsum model/fc1.weight
refused "m\.ckpt\.h5: dataset /model/fc1\.weight has no checksum; every tensor of this checkpoint's format carries one, so the file was altered" "${run[@]}"
damage delete extra/run/epoch_steps
refused "m\.ckpt\.h5: /extra/run/epoch_steps is missing; every checkpoint of this format holds it" "${run[@]}"

# The metrics file the resume continues.
damage flip-in epochs/accuracy "" m.h5
expect_exit 1 "m\.h5: dataset /epochs/accuracy fails its checksum \(Fletcher-32\): the file is damaged" -- \
    train-dist "${run[@]}" --epochs 3 --metrics m.h5 --resume
cp clean.h5 m.h5

# GraVAC resumes from its controller's inputs.
mkdir gravac && cd gravac
gravac=("${base[@]}" --gravac topk --gravac-theta-min 4 --gravac-window 1000)
train-dist "${gravac[@]}" --epochs 2 --metrics m.h5 2>first.log || fail "GraVAC's first part: $(cat first.log)"
cp m.h5 clean.h5
cp m.ckpt.h5 clean.ckpt.h5
damage delete extra/ranks/0/gravac/inputs
refused "m\.ckpt\.h5: /extra/ranks/0/gravac/inputs is missing; a GraVAC run resumes from its controller's inputs" "${gravac[@]}"
cd ..

# A gradient-statistics file regime-detect reads.
grad-dump --model mlp --hidden-size 32 --train-samples 480 --test-samples 100 --batch-size 24 --epochs 3 \
    --threads 1 -o g.h5 -q || fail "grad-dump"
damage flip-in epochs/norm "" g.h5
expect_exit 1 "^regime-detect: error: g\.h5: dataset /epochs/norm fails its checksum \(Fletcher-32\): the file is damaged$" -- \
    regime-detect g.h5 -o s.h5
[ -e s.h5 ] && fail "regime-detect wrote a schedule from a damaged file"
finish
