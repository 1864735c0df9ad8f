#!/usr/bin/env bash
# Compressor speed on one GPU, both sides measured in this run over ResNet-18's
# gradients (11,173,962 float32 values):
#   powersgd:2 encode + decode, ResNet-18's shapes   goal <= 0.5x PyTorch's batched PowerSGD (same math)
#   topk:0.01 encode                                 goal <= 1.0x torch.topk (1% of the values)
#   signsgd, fp16, qsgd:127 encode                   goal >= 50% of the GPU's copy bandwidth
#   topk:0.01, dgc:0.01 encode + decode, ResNet-18's shapes (their batches of tensors; no goal)
#   topk:0.01 encode again, and PowerSGD, top-k and DGC over ResNet-18's shapes again,
#   with the CUDA kernels not yet measured (ACC_CUDA_KERNELS=all: top-k's radix selection
#   instead of torch.topk, PowerSGD's rounds in one kernel each instead of batched ATen)
#   where each step's time goes: compress-bench --trace over 3 steps of each, traces in
#   OUTDIR/trace-*.json and scripts/trace-summary.py's tables in OUTDIR/traces-compress.md
# The toolkit's side is `compress-bench --device cuda` with the options and JSON
# output it has on the CPU; PyTorch's side and the copy bandwidth (a device-to-device
# copy of the same bytes) come from scripts/gpu/bench_compress_torch.py. Each
# measurement appends JSON lines to OUTDIR/compress.jsonl (an "error" line when a
# side fails; the others go on) and keeps its output in OUTDIR/logs/.
#   scripts/gpu/bench-compress.sh [OUTDIR]       REPS=20 by default
# DEVICE=cpu (with VALUES and SHAPES=tiny) checks the script without a GPU; then
# compress-bench runs without --device, as on any CPU build.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-gpu-results}}
bin=${ACC_BUILD_DIR:-build-gpu}/bin/compress-bench
device=${DEVICE:-cuda}
reps=${REPS:-20}
values=${VALUES:-11173962}
shapes=${SHAPES:-resnet18}
threads=${THREADS:-0}
source scripts/python.sh
python=$(acc_python)
mkdir -p "$out/logs"
jsonl=$out/compress.jsonl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {  # fail SIDE LOG: an error line for the table
    echo "bench-compress: $1 FAILED (log: logs/$2)" >&2
    tail -5 "$out/logs/$2" >&2 || true
    "$python" -c 'import json, sys; print(json.dumps({"bench": "compress", "side": sys.argv[1],
        "error": "failed, see logs/" + sys.argv[2]}))' "$1" "$2" >>"$jsonl"
}

echo "bench-compress: writing $values normal values as one gradient snapshot" >&2
"$python" scripts/write_flat_grads.py "$work/flat.h5" "$values"

ours=(-q --world 1 --reps "$reps" --json --vectors compress)
[ "$device" = cpu ] || ours+=(--device "$device")
[ "$threads" -gt 0 ] && ours+=(--threads "$threads")
thread_args=()
[ "$threads" -gt 0 ] && thread_args=(--threads "$threads")

# compress-bench's JSON gets a side and goes in as one line.
ours_line() {
    "$python" -c 'import json, sys; d = json.load(open(sys.argv[1])); d["bench"] = "compress"; d["side"] = sys.argv[2]
print(json.dumps(d))' "$1" "$2" >>"$jsonl"
}

# measure SIDE KERNELS COMPRESS-BENCH-OPTIONS...: one compress-bench run into compress.jsonl
# as SIDE, its output in logs/compress-bench-SIDE.log; KERNELS: ACC_CUDA_KERNELS's value
# for the run, or - for the caller's environment.
measure() {
    local side=$1 kernels=$2 shown
    shift 2
    shown=$*
    shown=${shown//$work\/flat.h5/FLAT.h5}
    shown=${shown//$work\//}
    local run=("$bin" "${ours[@]}" "$@") prefix=
    [ "$kernels" = - ] || { run=(env "ACC_CUDA_KERNELS=$kernels" "${run[@]}"); prefix="ACC_CUDA_KERNELS=$kernels "; }
    echo "bench-compress: ${prefix}compress-bench ${ours[*]} $shown" >&2
    if "${run[@]}" >"$work/$side.json" 2>"$out/logs/compress-bench-$side.log" && ours_line "$work/$side.json" "$side"; then
        :
    else
        fail "$side" "compress-bench-$side.log"
    fi
}

# SHAPES=tiny: the three small tensors that bench_compress_torch.py --shapes tiny uses.
preset=$shapes
if [ "$preset" = tiny ]; then
    printf 'a 16x8x3x3\nb 16x8x3x3\nc 16\n' >"$work/tiny.shapes"
    preset=$work/tiny.shapes
fi
measure flat - --from "$work/flat.h5" --compressors topk:0.01,signsgd,fp16,qsgd:127
# The same encoders with ATen operations instead of the CUDA kernels (a build without
# the kernels measures the same path twice).
measure aten 0 --from "$work/flat.h5" --compressors signsgd,fp16,qsgd:127
measure shapes - --shapes "$preset" --compressors powersgd:2,topk:0.01,dgc:0.01
# Top-k's selection and PowerSGD's rounds by the toolkit's CUDA kernels, which run only
# where ACC_CUDA_KERNELS=all until they are measured (on the CPU the same path as above).
measure kernels all --from "$work/flat.h5" --compressors topk:0.01
measure kernels-shapes all --shapes "$preset" --compressors powersgd:2,topk:0.01,dgc:0.01
# Where the time goes: traces of a few steps, summarised (no figure of their own; the
# profiler slows the host, so these runs time nothing).
traced=(-q --world 1 --reps 3 --vectors compress --path device)
[ "$device" = cpu ] || traced+=(--device "$device")
[ "$threads" -gt 0 ] && traced+=(--threads "$threads")
# trace NAME KERNELS COMPRESS-BENCH-OPTIONS...: OUTDIR/trace-NAME.json and its summary
# (KERNELS: ACC_CUDA_KERNELS's value, 1 for the default kernels).
trace() {
    local name=$1 kernels=$2 shown
    shift 2
    shown=$*
    shown=${shown//$work\//} # the snapshot's temporary directory left out
    echo "bench-compress: ACC_CUDA_KERNELS=$kernels compress-bench --trace $out/trace-$name.json $shown" >&2
    if ACC_CUDA_KERNELS=$kernels "$bin" "${traced[@]}" --trace "$out/trace-$name.json" "$@" \
        >/dev/null 2>"$out/logs/compress-bench-trace-$name.log" &&
        "$python" scripts/trace-summary.py "$out/trace-$name.json" >"$work/trace-$name.md"; then
        { echo "## $name: ACC_CUDA_KERNELS=$kernels compress-bench $shown"; echo; cat "$work/trace-$name.md"; } \
            >>"$out/traces-compress.md"
    else
        fail "trace-$name" "compress-bench-trace-$name.log"
    fi
}
rm -f "$out/traces-compress.md"
trace flat 1 --from "$work/flat.h5" --compressors topk:0.01,signsgd,fp16,qsgd:127
trace shapes 1 --shapes "$preset" --compressors powersgd:2,topk:0.01,dgc:0.01
trace kernels all --from "$work/flat.h5" --compressors topk:0.01
trace kernels-shapes all --shapes "$preset" --compressors powersgd:2
echo "bench-compress: PyTorch side (scripts/gpu/bench_compress_torch.py --device $device)" >&2
if "$python" scripts/gpu/bench_compress_torch.py --device "$device" --reps "$reps" --values "$values" \
    --shapes "$shapes" "${thread_args[@]}" >"$work/torch.json" 2>"$out/logs/compress-torch.log" &&
    "$python" -c 'import json, sys; d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
d["bench"] = "compress"; d["side"] = "pytorch"; print(json.dumps(d))' "$work/torch.json" >>"$jsonl"; then
    :
else
    fail pytorch compress-torch.log
fi
