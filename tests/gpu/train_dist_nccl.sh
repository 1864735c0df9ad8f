# train-dist --device cuda on one rank (NCCL): uncompressed and powersgd:2 runs
# learn, the uncompressed run's first epoch agrees with the same seeded run on the
# CPU, and each ends with its process group destroyed (no PyTorch warning that
# destroy_process_group() was not called) and bound to its GPU (no warning that
# PyTorch guesses the device).
source "$(dirname "$0")/common.sh"
require_cuda

# lr 0.01: at 0.05 this CNN diverges without compression, on the CPU as on the GPU.
args=(--model cnn --dataset synthetic --train-samples 2048 --test-samples 512 --batch-size 64 --epochs 3 --lr 0.01
    --seed 7 --json)
for spec in none powersgd:2; do
    rm -rf "$WORK/ckpt"
    if train-dist "${args[@]}" --device cuda --compress "$spec" --metrics "$WORK/m.h5" --checkpoint-dir "$WORK/ckpt" \
        >"$WORK/$spec.json" 2>"$WORK/err"; then
        grep -q "on 1 rank (nccl)" "$WORK/err" || fail "--compress $spec: the log does not name the NCCL backend"
        json_check "$WORK/$spec.json" '
last = d["trained"][-1]
accuracy = last["test_accuracy"]
assert accuracy > 0.5, f"test accuracy {accuracy} (chance: 0.1)"' || fail "--compress $spec did not learn"
        no_teardown_warning "$WORK/err"
        no_device_guess "$WORK/err"
    else
        fail "train-dist --device cuda --compress $spec failed:"
        sed 's/^/    /' "$WORK/err" >&2
    fi
done

rm -rf "$WORK/ckpt"
if train-dist "${args[@]}" --device cpu --threads 1 --compress none --metrics "$WORK/cpu.h5" \
    --checkpoint-dir "$WORK/ckpt" >"$WORK/cpu.json" 2>"$WORK/err"; then
    same_first_epoch "$WORK/none.json" "$WORK/cpu.json" || fail "the GPU's first epoch differs from the CPU's"
else
    fail "train-dist --device cpu failed:"
    sed 's/^/    /' "$WORK/err" >&2
fi
finish
