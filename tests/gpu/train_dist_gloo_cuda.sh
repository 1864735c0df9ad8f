# Two ranks on one GPU over Gloo with CUDA tensors: train-dist --nproc 2 --device
# cuda --backend gloo learns and both ranks end with the same weights (train-dist
# checks that after every epoch). Skipped where the build has no Gloo.
source "$(dirname "$0")/common.sh"
require_cuda

# lr 0.01: at 0.05 this CNN (global batch 64) diverges on the CPU and may on a GPU.
args=(--model cnn --dataset synthetic --train-samples 2048 --test-samples 512 --batch-size 32 --epochs 3 --lr 0.01
    --seed 7 --device cuda --backend gloo --nproc 2 --threads 1 --json)
got=0
train-dist "${args[@]}" --compress none --metrics "$WORK/m.h5" --checkpoint-dir "$WORK/ckpt" >"$WORK/out.json" \
    2>"$WORK/err" || got=$?
if [ "$got" = 2 ] && grep -q "gloo backend .* is not in this build" "$WORK/err"; then
    echo "SKIPPED: this build has no Gloo backend ($(tail -1 "$WORK/err"))"
    exit 77
fi
if [ "$got" != 0 ]; then
    fail "train-dist --nproc 2 --device cuda --backend gloo failed (exit $got):"
    sed 's/^/    /' "$WORK/err" >&2
else
    json_check "$WORK/out.json" '
last = d["trained"][-1]
accuracy = last["test_accuracy"]
assert accuracy > 0.5, f"test accuracy {accuracy} (chance: 0.1)"' || fail "two ranks over Gloo did not learn"
    no_teardown_warning "$WORK/err"
fi
finish
