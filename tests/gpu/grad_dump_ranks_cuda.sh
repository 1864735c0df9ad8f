# grad-dump with two ranks and --device cuda: over NCCL (the default) each rank
# needs its own GPU, so on a one-GPU machine rank 1 stops the run naming the GPU
# it needs, and on two GPUs the run learns and ends without PyTorch's teardown
# warning; over Gloo both ranks share one GPU and learn (skipped where the build
# has no Gloo).
source "$(dirname "$0")/common.sh"
require_cuda

# lr 0.01: at 0.05 this CNN (global batch 64) diverges on the CPU and may on a GPU.
args=(--model cnn --dataset synthetic --train-samples 2048 --test-samples 512 --batch-size 32 --epochs 3 --lr 0.01
    --seed 7 --device cuda --nproc 2 --threads 1 --json)

learned() {  # learned JSON WHAT
    json_check "$1" '
accuracy = d["trained"][-1]["test_accuracy"]
assert accuracy > 0.5, f"test accuracy {accuracy} (chance: 0.1)"
assert d["world_size"] == 2' || fail "$2 did not learn"
}

got=0
grad-dump "${args[@]}" -o "$WORK/nccl.h5" --checkpoint "$WORK/nccl.ckpt" >"$WORK/nccl.json" 2>"$WORK/nccl.err" || got=$?
if [ "$got" = 0 ]; then
    grep -q "data-parallel on 2 ranks (nccl)" "$WORK/nccl.err" || fail "the run did not average over NCCL"
    learned "$WORK/nccl.json" "grad-dump --nproc 2 over NCCL"
    no_teardown_warning "$WORK/nccl.err"
    no_device_guess "$WORK/nccl.err"
elif [ "$got" = 1 ] && grep -q "rank 1 needs GPU 1 (LOCAL_RANK), but this machine has 1 GPU" "$WORK/nccl.err"; then
    echo "one GPU: rank 1 of the NCCL run was refused as expected"
    grep -q "Traceback\|frame #" "$WORK/nccl.err" && fail "the refusal comes with a stack trace"
else
    fail "grad-dump --nproc 2 --device cuda (NCCL) failed (exit $got):"
    sed 's/^/    /' "$WORK/nccl.err" >&2
fi

got=0
grad-dump "${args[@]}" --backend gloo -o "$WORK/gloo.h5" --checkpoint "$WORK/gloo.ckpt" >"$WORK/gloo.json" \
    2>"$WORK/gloo.err" || got=$?
if [ "$got" = 2 ] && grep -q "gloo backend .* is not in this build" "$WORK/gloo.err"; then
    echo "skip: this build has no Gloo backend ($(tail -1 "$WORK/gloo.err"))"
elif [ "$got" != 0 ]; then
    fail "grad-dump --nproc 2 --device cuda --backend gloo failed (exit $got):"
    sed 's/^/    /' "$WORK/gloo.err" >&2
else
    learned "$WORK/gloo.json" "grad-dump --nproc 2 over Gloo on one GPU"
fi
finish
