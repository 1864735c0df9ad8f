#!/usr/bin/env bash
# Damaged files never crash or hang a reader: a few hundred copies of each kind of
# file the toolkit reads, each with one or two bytes changed at random (fixed
# seeds), go through the readers (tests/helpers/read_files, one child process per
# file under a time limit). Each must be read or refused with an error; a signal
# or a timeout fails the test. Then schedules and comm profiles whose values (not
# bytes) are changed, as h5py writes them: NaN, infinities, huge and negative
# numbers, odd strings, shortened or missing datasets and attributes; a schedule
# that reads must also plan as train-dist plans it, and a comm profile give
# compress-bench a usable network model. Last, checkpoints, through the program
# that reads them (train-dist --resume): each damaged copy must be refused or
# resume exactly as the undamaged one. FUZZ_COUNT sets the number of damaged
# copies per kind (300), FUZZ_VALUE_COUNT that of changed ones (400),
# FUZZ_CHECKPOINT_COUNT those of a checkpoint (60 damaged, two thirds as many
# changed), FUZZ_READER another reader program (e.g. one built from an older tree).
source "$(dirname "$0")/common.sh"
cd "$WORK"
count=${FUZZ_COUNT:-300}
value_count=${FUZZ_VALUE_COUNT:-400}
reader="${FUZZ_READER:-$ACC_BUILD_DIR/bin/read_files}"

# One valid file of each kind, written by the programs themselves.
write_sample_grads grads.h5 || fail "write_sample_grads"
regime-detect grads.h5 --interval 1 -o schedule.h5 -q || fail "regime-detect"
train-dist --model mlp --hidden-size 8 --dataset synthetic --train-samples 32 --test-samples 8 --batch-size 16 \
    --threads 1 --epochs 2 --accordion --interval 1 --low topk:0.5 --high powersgd:1 --metrics metrics.h5 \
    --checkpoint-dir . -q 2>train.log || fail "train-dist: $(tail -3 train.log)"
comm-profile --nproc 2 -b 1K -e 4K -n 2 -w 0 --collectives allreduce,allgather -o comm-profile.h5 -q 2>comm.log ||
    fail "comm-profile: $(tail -3 comm.log)"
printf 'fc.weight 4x6\nfc.bias 4\n' >model.txt
compress-bench --shapes model.txt --compressors none,topk:0.5 --world 1,2 --reps 1 --alpha 1e-5 --bandwidth 1e9 \
    --compute-ms 5 -o compress-bench.h5 -q 2>bench.log || fail "compress-bench: $(tail -3 bench.log)"
checkpoint_count=${FUZZ_CHECKPOINT_COUNT:-60}

for kind in grads schedule metrics comm-profile compress-bench; do
    [ -s "$kind.h5" ] || { fail "no $kind.h5 to damage"; continue; }
    "$reader" "$kind" 10 "$kind.h5" | grep -q " 1 read," || fail "the undamaged $kind.h5 does not read"
    mkdir "bad-$kind"
    "$ACC_PYTHON" - "$kind.h5" "bad-$kind" "$count" <<'PY'
import random, sys, zlib
source, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(source, "rb").read()
rng = random.Random(zlib.crc32(source.encode()))
for i in range(count):
    bad = bytearray(data)
    for _ in range(rng.choice((1, 2))):
        at = rng.randrange(len(bad))
        bad[at] = (bad[at] + rng.randrange(1, 256)) % 256
    open(f"{out}/{i:04d}.h5", "wb").write(bad)
PY
    "$reader" "$kind" 10 "bad-$kind"/*.h5 >"$kind.result" ||
        fail "$kind: $(grep -E 'crash|hang|exit|garbage' "$kind.result" | head -5)"
    tail -1 "$kind.result"
done

# A batch-mode schedule too: its batch sizes and lr_scale are values to change;
# and a grads file with a compressibility profile (/profile) and a world_size.
regime-detect grads.h5 --interval 1 --mode batch --low 32 --high 128 -o batch-schedule.h5 -q ||
    fail "regime-detect --mode batch"
grad-dump --model mlp --hidden-size 8 --dataset synthetic --train-samples 32 --test-samples 8 --batch-size 16 \
    --threads 1 --epochs 2 --profile -o profiled-grads.h5 -q 2>dump.log || fail "grad-dump --profile: $(tail -3 dump.log)"
grad-dump --model mlp --hidden-size 8 --dataset synthetic --train-samples 32 --test-samples 8 --batch-size 16 \
    --threads 1 --epochs 2 --snapshot-epochs 0,1 -o snapshot-grads.h5 -q 2>dump.log ||
    fail "grad-dump --snapshot-epochs: $(tail -3 dump.log)"
# Half the changes go to these, the fields the readers learned last ("@NAME": an attribute).
declare -A focus=(
    [schedule]="epochs/epoch,levels"
    [batch-schedule]="epochs/epoch,levels"
    [comm-profile]="@world_size"
    [profiled-grads]="@world_size,@format_version,profile/topk_tail,profile/topk_fraction,profile/singular_values,profile/singular_values/fc1.weight"
    [snapshot-grads]="snapshots,snapshots/epoch_0,snapshots/epoch_1/fc1.weight,snapshots/epoch_0/fc2.weight,snapshots/epoch_1/fc3.bias"
    [metrics]="levels,epochs/level"
)
for kind in schedule batch-schedule comm-profile profiled-grads snapshot-grads metrics; do
    reader_kind=${kind#batch-}
    reader_kind=${reader_kind#profiled-}
    reader_kind=${reader_kind#snapshot-}
    "$reader" "$reader_kind" 10 "$kind.h5" | grep -q " 1 read," || fail "the unchanged $kind.h5 does not read"
    mkdir "values-$kind"
    "$ACC_PYTHON" - "$kind.h5" "values-$kind" "$value_count" "${focus[$kind]}" <<'PY' || fail "changing the values of $kind.h5"
import random, shutil, sys, zlib
import h5py, numpy as np
source, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
focus = [target.partition("@") for target in sys.argv[4].split(",")] if sys.argv[4] else []
rng = random.Random(zlib.crc32(source.encode()) + 1)
numbers = [np.nan, np.inf, -np.inf, -3, -1, 0, 1, 1e-300, 1e300, -1e300, 2**31, 2**53 + 1, 2**62, 2**63 - 1, -2**63]
texts = ["", "x" * 300, "none", "powersgd:0", "powersgd:-1", "topk:nan", "topk:2", "batch", "compression",
         "allreduce", "nccl", "\u00ff\u00fe", "1e999", "-5", "1.0", "1.1", "2.0"]

def items(f):
    found = []
    f.visititems(lambda name, obj: found.append(name))
    return [""] + found

def change(f):
    name, _, key = rng.choice(focus) if focus and rng.random() < 0.5 else (rng.choice(items(f)), "", "")
    if name and name not in f:
        return
    obj = f[name] if name else f
    attrs = [key] if key else list(obj.attrs)
    is_data = isinstance(obj, h5py.Dataset)
    what = "attr" if key else rng.choice(["attr", "attr", "value", "value", "shrink", "delete", "extra"])
    if what == "extra":
        # A dataset that names nothing the file lists: a copy of one, beside it or in the group.
        group = obj.parent if is_data else obj
        sources = [v for v in group.values() if isinstance(v, h5py.Dataset)]
        if sources:
            group.create_dataset("extra_%d" % rng.randrange(1000), data=rng.choice(sources)[()])
    elif what == "attr" and attrs:
        key = rng.choice(attrs)
        old = obj.attrs[key] if key in obj.attrs else 0
        if isinstance(old, (bytes, str)) or getattr(old, "dtype", None) is not None and old.dtype.kind in "SUO":
            obj.attrs[key] = rng.choice(texts)
        else:
            value = rng.choice(numbers)
            try:
                obj.attrs[key] = np.array(value).astype(np.asarray(old).dtype)
            except (OverflowError, ValueError):
                obj.attrs[key] = value
    elif what == "value" and is_data and obj.size > 0:
        data = obj[()]
        flat = data.reshape(-1)
        at = rng.randrange(flat.size)
        if data.dtype.kind in "SUO":
            flat[at] = rng.choice(texts).encode() if data.dtype.kind != "U" else rng.choice(texts)
        else:
            with np.errstate(all="ignore"):
                value = np.array(rng.choice(numbers)).astype(data.dtype)
            flat[at] = value
        try:
            obj[()] = data
        except (TypeError, ValueError):
            pass
    elif what == "shrink" and is_data and obj.ndim >= 1 and obj.shape[0] > 0:
        data = obj[()][: rng.randrange(obj.shape[0])]
        parent, leaf = name.rsplit("/", 1) if "/" in name else ("", name)
        saved = dict(obj.attrs)
        del f[name]
        f.create_dataset(name, data=data)
        for key, value in saved.items():
            f[name].attrs[key] = value
    elif what == "delete":
        if attrs and (not is_data or rng.random() < 0.5):
            del obj.attrs[rng.choice(attrs)]
        elif name:
            del f[name]

for i in range(count):
    path = f"{out}/{i:04d}.h5"
    shutil.copyfile(source, path)
    with h5py.File(path, "r+") as f:
        for _ in range(rng.choice((1, 1, 2))):
            change(f)
PY
    "$reader" "$reader_kind" 10 "values-$kind"/*.h5 >"values-$kind.result" ||
        fail "$kind with changed values: $(grep -E 'crash|hang|exit|garbage' "values-$kind.result" | head -5)"
    echo "values changed in $kind.h5: $(tail -1 "values-$kind.result")"
done

# Checkpoints: copies with bytes damaged at random, and with values changed as
# above, each resumed by train-dist (one rank) from the checkpoint of epoch 0 to
# the end of epoch 1. A damaged copy must be refused (exit 1 or 2, one line) or
# resume to the very weights the undamaged one gives (its damage fell where
# nothing is read); a changed one must be refused or end with finite weights.
ck=(--model mlp --hidden-size 8 --dataset synthetic --train-samples 32 --test-samples 8 --batch-size 16 --threads 1
    --momentum 0.9 --compress powersgd:1 --seed 2 -q)
mkdir ck clean
(cd ck && train-dist "${ck[@]}" --epochs 1 --metrics m.h5) || fail "train-dist for a checkpoint"
cp ck/m.h5 ck/m.ckpt.h5 clean/
(cd clean && train-dist "${ck[@]}" --epochs 2 --metrics m.h5 --resume) || fail "resuming the undamaged checkpoint"
mkdir bad-checkpoint values-checkpoint
"$ACC_PYTHON" - ck/m.ckpt.h5 bad-checkpoint "$checkpoint_count" <<'PY'
import random, sys
source, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(source, "rb").read()
rng = random.Random(62)
for i in range(count):
    bad = bytearray(data)
    at = rng.randrange(len(bad))
    bad[at] = (bad[at] + rng.randrange(1, 256)) % 256
    open(f"{out}/{i:04d}.h5", "wb").write(bad)
PY
# The value changes reuse the changes above, on the checkpoint's own fields.
"$ACC_PYTHON" - ck/m.ckpt.h5 values-checkpoint $((checkpoint_count * 2 / 3)) \
    "@epoch,@global_step,@seed,extra/run/epoch_steps,model/fc1.weight,extra/ranks/0/fc1.weight/powersgd_q,optimizer/momentum/fc2.weight" \
    < <(sed -n '/^import random, shutil, sys, zlib$/,/^            change(f)$/p' "$ACC_SOURCE/tests/e2e/io_fuzz.sh") || fail "changing a checkpoint's values"
# outcome DIR: how the resume of DIR/m.ckpt.h5 ended: refused, read, garbage, crash or hang.
outcome() {
    local status=0
    (cd "$1" && timeout 60 train-dist "${ck[@]}" --epochs 2 --metrics m.h5 --resume 2>err) || status=$?
    case $status in
    0) "$ACC_PYTHON" - "$1/m.ckpt.h5" clean/m.ckpt.h5 "$2" <<'PY' && echo read || echo garbage ;;
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as mine, h5py.File(sys.argv[2], "r") as clean:
    for name in clean["model"]:
        a, b = mine["model"][name][()], clean["model"][name][()]
        if not np.all(np.isfinite(a)) or (sys.argv[3] == "damaged" and not np.array_equal(a, b)):
            sys.exit(1)
PY
    1 | 2) [ "$(grep -c . "$1/err")" = 1 ] && echo refused || echo "garbage (more than one line)" ;;
    124) echo hang ;;
    *) echo "crash (exit $status)" ;;
    esac
}
[ "$(ls values-checkpoint | wc -l)" -gt 0 ] || fail "no checkpoint with changed values"
for kind in bad values; do
    declare -A seen=()
    for copy in "$kind-checkpoint"/*.h5; do
        case_dir="$copy.d"
        mkdir "$case_dir"
        cp ck/m.h5 "$case_dir/m.h5"
        cp "$copy" "$case_dir/m.ckpt.h5"
        result=$(outcome "$case_dir" "$([ "$kind" = bad ] && echo damaged || echo changed)")
        seen[$result]=$((${seen[$result]:-0} + 1))
        case $result in read | refused) ;; *) fail "checkpoint $copy: $result: $(head -2 "$case_dir/err")" ;; esac
    done
    summary=""
    for key in "${!seen[@]}"; do summary+="${seen[$key]} $key, "; done
    echo "checkpoints ($([ "$kind" = bad ] && echo "bytes damaged" || echo "values changed")): ${summary%, }"
    unset seen
done
finish
