#!/usr/bin/env bash
# Every kind of bad input to compress-bench gets one clear error line and the documented exit code.
source "$(dirname "$0")/common.sh"
cd "$WORK"
printf 'fc.weight 10x20\nfc.bias 10\n' >model.txt
quick=(--world 1 --reps 1 --compressors none)

# Usage errors: exit 2.
expect_exit 2 "--shapes: 'alexnet' is neither a model \(resnet18, resnet50, vgg19, bert-base, lstm, gpt2-medium\) nor an existing shapes file" -- \
    compress-bench --shapes alexnet
expect_exit 2 "^compress-bench: error: --compressors: 'topk:2': FRACTION must be in \(0, 1\]" -- \
    compress-bench --shapes model.txt --compressors none,topk:2
expect_exit 2 "--compressors: 'zip' is not a compressor spec; valid levels are:" -- compress-bench --compressors zip
expect_exit 2 "--world: must be a whole number in \[1, 1000000\], not '0'" -- compress-bench --shapes model.txt --world 4,0
# A list is numbers between commas: an empty item or another notation is refused.
expect_exit 2 "^compress-bench: error: --world: an empty item in '4,,8'; give whole numbers in \[1, 1000000\] separated by commas" -- \
    compress-bench --shapes model.txt --world 4,,8
expect_exit 2 "^compress-bench: error: --world: must be a whole number in \[1, 1000000\], not '0x10'" -- \
    compress-bench --shapes model.txt --world 0x10
expect_exit 2 "^compress-bench: error: --snapshots: an empty item in '0,'" -- compress-bench --shapes model.txt --snapshots 0,
expect_exit 2 "--reps: must be a whole number in \[1, 1000000\], not '0'" -- compress-bench --shapes model.txt --reps 0
expect_exit 2 "--alpha needs --bandwidth" -- compress-bench --shapes model.txt --alpha 1e-5
expect_exit 2 "--bandwidth needs --alpha" -- compress-bench --shapes model.txt --bandwidth 1e9
expect_exit 2 "--bandwidth: must be a number in \(0, 1e\+15\], not '0'" -- \
    compress-bench --shapes model.txt --alpha 0 --bandwidth 0
expect_exit 2 "--alpha: must be a number in \[0, 60\], not '-1'" -- \
    compress-bench --shapes model.txt --alpha -1 --bandwidth 1e9
expect_exit 2 "--comm and --alpha/--bandwidth exclude each other" -- \
    compress-bench --shapes model.txt --comm comm.h5 --alpha 1e-5 --bandwidth 1e9
expect_exit 2 "--compute-ms: must be a number in \[0, 3.6e\+06\], not '-3'" -- compress-bench --shapes model.txt --compute-ms -3
expect_exit 2 "--csv and --json exclude each other" -- compress-bench --shapes model.txt --csv --json
expect_exit 2 "--shapes and --from exclude each other" -- compress-bench --shapes model.txt --from grads.h5
expect_exit 2 "--snapshots: applies only with --from" -- compress-bench --shapes model.txt --snapshots 3
expect_exit 2 "--vectors" -- compress-bench --shapes model.txt --vectors sometimes
expect_exit 2 "--threads: must be a whole number in \[1, 256\], not '0'" -- compress-bench --shapes model.txt --threads 0
expect_exit 2 "--device" -- compress-bench --shapes model.txt --device tpu
expect_exit 2 "--path" -- compress-bench --shapes model.txt --path gpu
expect_exit 2 "^compress-bench: error: --path host: the host path runs on CPU tensors" -- \
    compress-bench --shapes model.txt "${quick[@]}" --device cuda --path host
if gpu_present; then
    echo "skipped: --device cuda is refused only without a GPU, and this machine has one" >&2
else
    expect_exit 2 "^compress-bench: error: --device cuda: no CUDA device" -- \
        compress-bench --shapes model.txt "${quick[@]}" --device cuda
fi
expect_exit 2 "^compress-bench: error: --frobnicate: unknown option \(see 'compress-bench --help'\)$" -- compress-bench --frobnicate
expect_exit 2 "^compress-bench: error: --compresors: unknown option; did you mean --compressors\?" -- \
    compress-bench --shapes model.txt --compresors none

# Every numeric option refuses what cannot be meant, giving the valid range.
while read -r option value range; do
    expect_exit 2 "^compress-bench: error: $option: must be a (whole )?number in $range, not '$value'" -- \
        compress-bench --shapes model.txt "$option" "$value"
done <<'TABLE'
--reps 99999999999999999999 \[1, 1000000\]
--reps -5 \[1, 1000000\]
--reps 2.5 \[1, 1000000\]
--world 99999999999999999999 \[1, 1000000\]
--world 4x \[1, 1000000\]
--threads 2000 \[1, 256\]
--threads 1e3 \[1, 256\]
--compute-ms 1e400 \[0, 3.6e\+06\]
--compute-ms nan \[0, 3.6e\+06\]
--compute-ms inf \[0, 3.6e\+06\]
TABLE
expect_exit 2 "^compress-bench: error: --alpha: must be a number in \[0, 60\], not 'nan'" -- \
    compress-bench --shapes model.txt --alpha nan --bandwidth 1e9
expect_exit 2 "^compress-bench: error: --bandwidth: must be a number in \(0, 1e\+15\], not '1e300'" -- \
    compress-bench --shapes model.txt --alpha 0 --bandwidth 1e300
expect_exit 2 "^compress-bench: error: --reps: must be a whole number in \[1, 1000000\], not ''" -- \
    compress-bench --shapes model.txt --reps ''
expect_exit 2 "^compress-bench: error: --snapshots: must be a whole number in \[0, 1000000\], not '-1'" -- \
    compress-bench --from good.h5 --snapshots -1

# List options show no empty default in --help.
compress-bench --help >help.txt
grep -q '=\[\]' help.txt && fail "--help shows an empty default: $(grep '=\[\]' help.txt)"

# Runtime errors: exit 1, naming the file.
expect_exit 1 "^compress-bench: error: missing.h5: no such file$" -- compress-bench --from missing.h5 "${quick[@]}"
printf 'fc.weight 10x20\nfc.bias\n' >broken.txt
expect_exit 1 "broken.txt: line 2: 'fc.bias' has no shape" -- compress-bench --shapes broken.txt "${quick[@]}"
$ACC_PYTHON - <<'PY'
import h5py, numpy as np
def grads(path, snapshot=None):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "accordion.grads"
        f.attrs["format_version"] = "1.0"
        f["parameters/name"] = np.array(["fc.weight"], dtype=h5py.string_dtype())
        f["parameters/ndim"] = np.array([2], dtype=np.int32)
        f["parameters/shape"] = np.array([[4, 3]], dtype=np.int64)
        f["parameters/numel"] = np.array([12], dtype=np.int64)
        f["epochs/norm"] = np.ones((1, 1))
        f["epochs/lr"] = np.array([0.1])
        f["epochs/steps"] = np.array([1], dtype=np.int64)
        if snapshot is not None:
            g = f.create_group("snapshots/epoch_0")
            g.attrs["epoch"] = 0
            g.attrs["steps"] = 1
            g["fc.weight"] = snapshot
grads("plain.h5")
bad = np.ones((4, 3), dtype=np.float32)
bad[1, 2] = np.nan
grads("nan.h5", bad)
grads("good.h5", np.ones((4, 3), dtype=np.float32))
grads("transposed.h5", np.ones((3, 4), dtype=np.float32))
PY
# A snapshot with its parameter's number of values in another shape is not that matrix.
expect_exit 1 "^compress-bench: error: transposed.h5: /snapshots/epoch_0/fc.weight has shape 3x4, expected 4x3 \\(the shape of parameter 'fc.weight'\\)$" -- \
    compress-bench --from transposed.h5 "${quick[@]}"
expect_exit 1 "plain.h5: holds no gradient snapshots; run grad-dump with --snapshot-epochs" -- \
    compress-bench --from plain.h5 "${quick[@]}"
expect_exit 1 "nan.h5: /snapshots/epoch_0/fc.weight holds nan at value 5; a gradient snapshot is finite" -- \
    compress-bench --from nan.h5 "${quick[@]}"
expect_exit 1 "good.h5: has no gradient snapshot of epoch 9 \(it has epochs 0\)" -- \
    compress-bench --from good.h5 --snapshots 9 "${quick[@]}"
expect_exit 1 "nocomm.h5: no such file" -- compress-bench --shapes model.txt --comm nocomm.h5 "${quick[@]}"
expect_exit 1 "good.h5: is an accordion.grads file, expected an accordion.comm-profile file" -- \
    compress-bench --shapes model.txt --comm good.h5 "${quick[@]}"
$ACC_PYTHON - <<'PY'
import h5py, numpy as np
def profile(path, world, names):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "accordion.comm-profile"
        f.attrs["format_version"] = "1.0"
        f.attrs["world_size"] = world
        for name in names:
            g = f.create_group(f"collectives/{name}")
            size = np.array([1024, 2048], dtype=np.int64)
            t = np.array([1e-4, 2e-4])
            g["size"], g["count"] = size, size // 4
            g["time_min"], g["time_median"], g["time_max"] = t, t, t
            g["algbw"] = size / t
            g["busbw"] = size / t
            g["wrong"] = np.full(2, -1, dtype=np.int64)
            g.attrs["bus_factor"] = 1.0 if world > 1 else 0.0
            g.attrs["alpha"] = 0.0
            g.attrs["bandwidth"] = 1e7
            g.attrs["bus_bandwidth"] = 1e7
profile("one-rank.h5", 1, ["allreduce"])
profile("no-allreduce.h5", 2, ["broadcast"])
PY
expect_exit 1 "one-rank.h5: was measured on 1 rank, which says nothing about the network" -- \
    compress-bench --shapes model.txt --comm one-rank.h5 "${quick[@]}"
expect_exit 1 "no-allreduce.h5: has no allreduce profile" -- compress-bench --shapes model.txt --comm no-allreduce.h5 "${quick[@]}"
echo "not hdf5" >notes.h5
expect_exit 1 "notes.h5: not an HDF5 file" -- compress-bench --from notes.h5 "${quick[@]}"
# Missing output directories are created.
compress-bench -q --shapes model.txt "${quick[@]}" -o new/dir/out.h5 || fail "compress-bench did not create new/dir"
[ -s new/dir/out.h5 ] || fail "no new/dir/out.h5"

# A shapes file that never ends, or asks for more than memory holds, is refused.
expect_exit 1 "^compress-bench: error: /dev/zero: line 1: longer than 4096 bytes" -- compress-bench --shapes /dev/zero "${quick[@]}"
printf 'a 100000x100000\nb 100000x100000\n' >huge.txt
expect_exit 1 "huge.txt: line 1: the tensors hold more than 4,000,000,000 values" -- compress-bench --shapes huge.txt "${quick[@]}"
printf 'a 99999999999999999999x2\n' >overflow.txt
expect_exit 1 "overflow.txt: line 1: the tensors hold more than" -- compress-bench --shapes overflow.txt "${quick[@]}"

# A failed run leaves no output file and no temporary file behind.
compress-bench --from nan.h5 "${quick[@]}" -o bench.h5 2>/dev/null && fail "NaN input accepted"
[ ! -e bench.h5 ] || fail "a failed run left bench.h5"
ls -a | grep -q '\.tmp-' && fail "a temporary file was left behind"
compress-bench -q --from good.h5 "${quick[@]}" -o bench.h5 || fail "a good run failed"
[ -s bench.h5 ] || fail "no bench.h5 written"

# The results never replace an input, however the paths are spelt.
cp good.h5 keep.h5
expect_exit 2 "^compress-bench: error: --output ./keep.h5: is the same file as --from keep.h5" -- \
    compress-bench --from keep.h5 "${quick[@]}" -o ./keep.h5
expect_exit 2 "^compress-bench: error: --output model.txt: is the same file as --shapes $WORK/model.txt" -- \
    compress-bench --shapes "$WORK/model.txt" "${quick[@]}" -o model.txt
ln keep.h5 linked.h5
expect_exit 2 "is the same file as --from keep.h5" -- compress-bench --from keep.h5 "${quick[@]}" -o linked.h5
cmp -s good.h5 keep.h5 || fail "compress-bench replaced its input"
expect_exit 2 "^compress-bench: error: --trace ./keep.h5: is the same file as --from keep.h5" -- \
    compress-bench --from keep.h5 "${quick[@]}" --trace ./keep.h5
expect_exit 2 "^compress-bench: error: --trace out.h5: is the same file as --output out.h5" -- \
    compress-bench --shapes model.txt "${quick[@]}" -o out.h5 --trace out.h5
# A trace that cannot be written is refused before any measurement.
expect_exit 1 "^compress-bench: error: notes.h5/trace.json: " -- \
    compress-bench --shapes model.txt "${quick[@]}" --trace notes.h5/trace.json
grep -q "compressor .* W .* sent" "$WORK/err" && fail "compress-bench measured before refusing the trace's path"
cmp -s good.h5 keep.h5 || fail "compress-bench replaced its input"
expect_exit 1 "^trace-summary.py: error: notes.h5: not a trace written by --trace" -- \
    "$ACC_PYTHON" "$ACC_SOURCE/scripts/trace-summary.py" notes.h5
finish
