# Shared by the GPU tests (label gpu): the end-to-end helpers, plus a check that
# skips the test (exit 77, which CTest reports as skipped) with a message when
# this build or machine cannot train on a GPU.
source "$ACC_SOURCE/tests/e2e/common.sh"

# require_cuda: asks the programs themselves, so that a CPU build on a GPU machine
# and a CUDA build without a GPU both skip, each saying why.
require_cuda() {
    local got=0
    grad-dump --model mlp --hidden-size 8 --dataset synthetic --train-samples 16 --test-samples 8 --batch-size 8 \
        --epochs 1 --device cuda -q -o "$WORK/probe.h5" --checkpoint "$WORK/probe.ckpt" \
        >"$WORK/probe.out" 2>"$WORK/probe.err" || got=$?
    if [ "$got" = 2 ] && grep -q "no CUDA device is available" "$WORK/probe.err"; then
        echo "SKIPPED: no CUDA device here ($(cat "$WORK/probe.err")); this test runs on a GPU machine"
        exit 77
    fi
    if [ "$got" != 0 ]; then
        echo "FAIL: grad-dump --device cuda could not train a tiny model:" >&2
        sed 's/^/    /' "$WORK/probe.err" >&2
        exit 1
    fi
    rm -f "$WORK/probe.h5" "$WORK/probe.ckpt"
}

# json_check JSON PYTHON: runs the Python assertions with `d` the JSON summary.
json_check() {
    "$ACC_PYTHON" -c "import json, sys
d = json.load(open(sys.argv[1]))
$2" "$1"
}

# no_teardown_warning LOG: the NCCL process group was destroyed before exit.
no_teardown_warning() {
    if grep -q "destroy_process_group() was not called" "$1"; then
        fail "$1: the process group was not destroyed before exit:"
        grep -m3 "destroy_process_group" "$1" | sed 's/^/    /' >&2
    fi
}

# no_device_guess LOG: the NCCL group was bound to the rank's GPU, so PyTorch did
# not guess the device from the rank (its warning names device_id or says the devices
# used by this process are unknown).
no_device_guess() {
    if grep -Eq "Guessing device ID|devices used by this process are currently unknown|specify device_id" "$1"; then
        fail "$1: the NCCL process group was not bound to a device:"
        grep -Em3 "Guessing device ID|currently unknown|device_id" "$1" | sed 's/^/    /' >&2
    fi
}

# same_first_epoch GPU_JSON CPU_JSON: the two runs' first epochs agree (loss within
# 2%, the same samples and steps): the device computes what the CPU does.
same_first_epoch() {
    "$ACC_PYTHON" - "$1" "$2" <<'PY'
import json, sys
gpu, cpu = (json.load(open(p))["trained"][0] for p in sys.argv[1:3])
assert abs(gpu["loss"] - cpu["loss"]) <= 0.02 * cpu["loss"], (gpu["loss"], cpu["loss"])
assert gpu["samples"] == cpu["samples"] and gpu["steps"] == cpu["steps"]
PY
}
