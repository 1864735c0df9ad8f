# grad-dump --device cuda trains (test accuracy far above chance), and its first
# epoch's loss agrees with the same seeded run on the CPU: the device's data path
# and optimizer compute what the CPU's do.
source "$(dirname "$0")/common.sh"
require_cuda

# lr 0.01: at 0.05 this CNN (global batch 64) diverges on the CPU and may on a GPU.
args=(--model cnn --dataset synthetic --train-samples 2048 --test-samples 512 --batch-size 64 --epochs 3 --lr 0.01
    --seed 7 -q --json)
grad-dump "${args[@]}" --device cuda -o "$WORK/gpu.h5" --checkpoint "$WORK/gpu.ckpt" >"$WORK/gpu.json" 2>"$WORK/gpu.err" ||
    { fail "grad-dump --device cuda failed"; cat "$WORK/gpu.err" >&2; finish; }
grad-dump "${args[@]}" --device cpu --threads 1 -o "$WORK/cpu.h5" --checkpoint "$WORK/cpu.ckpt" >"$WORK/cpu.json" \
    2>"$WORK/cpu.err" || { fail "grad-dump --device cpu failed"; cat "$WORK/cpu.err" >&2; finish; }
json_check "$WORK/gpu.json" '
last = d["trained"][-1]
accuracy = last["test_accuracy"]
assert accuracy > 0.8, f"test accuracy {accuracy} after 3 epochs on the GPU"
assert all(e["loss"] == e["loss"] for e in d["trained"]), "a NaN loss"' || fail "grad-dump --device cuda did not learn"
same_first_epoch "$WORK/gpu.json" "$WORK/cpu.json" || fail "the GPU's first epoch differs from the CPU's"
# The gradients file is complete and readable.
"$ACC_PYTHON" -c 'import h5py, sys; f = h5py.File(sys.argv[1]); assert len(f["epochs/lr"]) == 3' "$WORK/gpu.h5" ||
    fail "the gradients file of the GPU run is incomplete"
finish
