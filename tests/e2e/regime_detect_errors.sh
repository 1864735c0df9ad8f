#!/usr/bin/env bash
# Every kind of bad input gets one clear error line and the documented exit code.
source "$(dirname "$0")/common.sh"
synth="$ACC_PYTHON $ACC_SOURCE/examples/synth_grads.py"
cd "$WORK"
$synth -o good.h5 --model tiny --epochs 30

# Usage errors: exit 2.
expect_exit 2 "GRADS.h5 is required" -- regime-detect
expect_exit 2 "^regime-detect: error: --eta: must be a number in \(0, 1e\+06\], not '0'" -- regime-detect good.h5 --eta 0
expect_exit 2 "--eta: must be a number in \(0, 1e\+06\]" -- regime-detect good.h5 --eta -0.5
expect_exit 2 "--interval" -- regime-detect good.h5 --interval 0
expect_exit 2 "'topk:2': FRACTION must be in \(0, 1\]" -- regime-detect good.h5 --low topk:2
expect_exit 2 "'zip' is not a compressor spec; valid levels are:" -- regime-detect good.h5 --high zip
expect_exit 2 "powersgd needs RANK" -- regime-detect good.h5 --low powersgd
expect_exit 2 "^regime-detect: error: --mode: must be compression or batch, not 'sometimes'" -- regime-detect good.h5 --mode sometimes
expect_exit 2 "--monotone: applies only to --mode batch" -- regime-detect good.h5 --monotone
expect_exit 2 "batch size, a whole number in \[1, 1048576\], not 'powersgd:2'" -- regime-detect good.h5 --mode batch --low powersgd:2
expect_exit 2 "--high 256 is smaller than --low 512" -- regime-detect good.h5 --mode batch --high 256
expect_exit 2 "batch mode decides on the whole model" -- regime-detect good.h5 --mode batch --granularity layer
expect_exit 2 "^regime-detect: error: --frobnicate: unknown option \(see 'regime-detect --help'\)$" -- \
    regime-detect good.h5 --frobnicate
expect_exit 2 "^regime-detect: error: --intervall: unknown option; did you mean --interval\?" -- \
    regime-detect good.h5 --intervall 3
# The unknown option is the problem even when the required input is missing too.
expect_exit 2 "^regime-detect: error: --etta: unknown option; did you mean --eta\?" -- regime-detect --etta 0.5

# Every numeric option refuses what cannot be meant, giving the valid range.
while read -r option value range; do
    expect_exit 2 "^regime-detect: error: $option: must be a (whole )?number in $range, not '$value'" -- \
        regime-detect good.h5 "$option" "$value"
done <<'TABLE'
--eta 1e400 \(0, 1e\+06\]
--eta nan \(0, 1e\+06\]
--eta 2e6 \(0, 1e\+06\]
--eta 0.5x \(0, 1e\+06\]
--interval 99999999999999999999 \[1, 1000000\]
--interval -1 \[1, 1000000\]
--interval 1.5 \[1, 1000000\]
--interval 2000000 \[1, 1000000\]
TABLE
expect_exit 2 "^regime-detect: error: --interval: must be a whole number in \[1, 1000000\], not ''" -- \
    regime-detect good.h5 --interval ''
expect_exit 2 "--low: in batch mode this is a batch size, a whole number in \[1, 1048576\], not '99999999999999999999'" -- \
    regime-detect good.h5 --mode batch --low 99999999999999999999 --high 99999999999999999999

# The schedule never replaces its input, however the two are spelt.
cp good.h5 keep.h5
expect_exit 2 "^regime-detect: error: --output keep.h5: is the same file as GRADS.h5 keep.h5" -- regime-detect keep.h5 -o keep.h5
expect_exit 2 "^regime-detect: error: --output ./keep.h5: is the same file as GRADS.h5 keep.h5" -- regime-detect keep.h5 -o ./keep.h5
ln keep.h5 hard.h5
ln -s keep.h5 soft.h5
expect_exit 2 "is the same file as GRADS.h5 keep.h5" -- regime-detect keep.h5 -o hard.h5
expect_exit 2 "is the same file as GRADS.h5 soft.h5" -- regime-detect soft.h5 -o "$WORK/keep.h5"
cmp -s good.h5 keep.h5 || fail "regime-detect replaced its input"

# Runtime errors: exit 1, naming the file.
expect_exit 1 "^regime-detect: error: missing.h5: no such file$" -- regime-detect missing.h5
echo "not hdf5" >notes.txt
expect_exit 1 "notes.txt: not an HDF5 file" -- regime-detect notes.txt
head -c 2000 good.h5 >truncated.h5
expect_exit 1 "truncated.h5: .*truncated" -- regime-detect truncated.h5
$synth -o nan.h5 --model tiny --epochs 30 --nan-at 12:2
expect_exit 1 "nan.h5: gradient norm is NaN at epoch 12, parameter 'fc2.weight'" -- regime-detect nan.h5
$synth -o future.h5 --model tiny --epochs 30 --format-version 2.0
expect_exit 1 "future.h5: format version 2.0 is newer than this program reads" -- regime-detect future.h5
regime-detect good.h5 -o sched.h5 -q
expect_exit 1 "sched.h5: is an accordion.schedule file, expected an accordion.grads file" -- regime-detect sched.h5 -o s2.h5
# The default output, sched.h5, is the input here: refused before anything is read.
expect_exit 2 "^regime-detect: error: --output sched.h5: is the same file as GRADS.h5 sched.h5" -- regime-detect sched.h5
# A missing output directory is created; one that cannot be is a runtime error.
regime-detect good.h5 -o new/sub/dir/out.h5 -q || fail "regime-detect did not create the output's directory"
[ -f new/sub/dir/out.h5 ] || fail "no new/sub/dir/out.h5"
expect_exit 1 "^regime-detect: error: notes.txt/out.h5: cannot create the directory notes.txt" -- regime-detect good.h5 -o notes.txt/out.h5

# Warnings, not errors.
$synth -o short.h5 --model tiny --epochs 8
expect_exit 0 "warning: short.h5 holds 8 epochs, no more than one interval \(10\) after epoch 0: every epoch is critical" -- regime-detect short.h5 -o short-sched.h5
$synth -o partial.h5 --model tiny --epochs 30 --incomplete
expect_exit 0 "warning: partial.h5 is marked incomplete" -- regime-detect partial.h5 -o partial-sched.h5
expect_exit 0 "sends less than --high" -- regime-detect good.h5 --low powersgd:1 --high powersgd:4 -o swapped.h5

# Shapes whose element count overflows (read as numel 0) or passes 2^48 are refused,
# naming the file, the parameter and the shape; no schedule is written.
$ACC_PYTHON - <<'PY'
import h5py, numpy as np
def grads(path, shape, numel):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "accordion.grads"
        f.attrs["format_version"] = "1.0"
        f["parameters/name"] = np.array(["fc.weight", "fc.bias"], dtype=h5py.string_dtype())
        f["parameters/ndim"] = np.array([2, 1], dtype=np.int32)
        f["parameters/shape"] = np.array([shape, [3, 0]], dtype=np.int64)
        f["parameters/numel"] = np.array([numel, 3], dtype=np.int64)
        f["epochs/norm"] = np.ones((30, 2))
        f["epochs/lr"] = np.full(30, 0.1)
        f["epochs/steps"] = np.ones(30, dtype=np.int64)
grads("wrap.h5", [2**62, 4], 0)
grads("square.h5", [2**32, 2**32], 0)
grads("over48.h5", [2**40, 2**9], 2**49)
PY
while read -r file shape; do
    rm -f huge-sched.h5
    expect_exit 1 "^regime-detect: error: $file: parameter 'fc.weight' has shape $shape, more than 2\\^48 values" -- \
        regime-detect "$file" -o huge-sched.h5
    [ ! -e huge-sched.h5 ] || fail "regime-detect wrote a schedule for $file"
done <<'TABLE'
wrap.h5 4611686018427387904x4
square.h5 4294967296x4294967296
over48.h5 1099511627776x512
TABLE

# Broken gradient snapshots are refused as compress-bench refuses them, naming the
# dataset: NaN, another shape, a parameter missing, an epoch the file does not have.
$ACC_PYTHON - <<'PY'
import h5py, numpy as np
def snapshot(path, edit):
    with h5py.File("good.h5", "r") as src, h5py.File(path, "w") as f:
        for k, v in src.attrs.items():
            f.attrs[k] = v
        for name in ("parameters", "epochs"):
            src.copy(name, f)
        names = [n.decode() if isinstance(n, bytes) else n for n in src["parameters/name"][()]]
        shapes = src["parameters/shape"][()]
        g = f.create_group("snapshots/epoch_1")
        g.attrs["epoch"] = 1
        for n, s, d in zip(names, shapes, src["parameters/ndim"][()]):
            g[n] = np.ones(tuple(int(x) for x in s[:d]), dtype=np.float32)
        edit(g, names[0])
snapshot("snap-ok.h5", lambda g, n: None)
def nan(g, n):
    v = g[n][()]
    v.flat[2] = np.nan
    del g[n]
    g[n] = v
snapshot("snap-nan.h5", nan)
def transposed(g, n):
    v = g[n][()]
    del g[n]
    g[n] = np.ones(v.shape[::-1], dtype=np.float32) if v.ndim == 2 else np.ones(v.size + 1, dtype=np.float32)
snapshot("snap-shape.h5", transposed)
snapshot("snap-missing.h5", lambda g, n: g.__delitem__(n))
snapshot("snap-epoch.h5", lambda g, n: g.attrs.__setitem__("epoch", 99))
PY
regime-detect snap-ok.h5 -q -o snap-sched.h5 || fail "regime-detect refused good snapshots"
while read -r file message; do
    expect_exit 1 "^regime-detect: error: $file: (dataset )?/snapshots/epoch_1.*$message" -- \
        regime-detect "$file" -q -o snap-sched.h5
done <<'TABLE'
snap-nan.h5 holds nan at value 2; a gradient snapshot is finite
snap-shape.h5 has shape .*, expected
snap-missing.h5 is missing \(every parameter has a snapshot\)
snap-epoch.h5 has epoch 99; a snapshot is named /snapshots/epoch_E for one of the file's epochs, 0-29
TABLE

# A failed run leaves no output file and no temporary file behind.
rm -f sched.h5
regime-detect nan.h5 -o sched.h5 2>/dev/null && fail "NaN input accepted"
[ ! -e sched.h5 ] || fail "a failed run left sched.h5"
ls -a | grep -q '\.tmp-' && fail "a temporary file was left behind"
# SOURCE_DATE_EPOCH fixes the files' time: the same command twice writes the same bytes
# (no HDF5 object times either); a value that is not seconds is refused, the output kept.
SOURCE_DATE_EPOCH=1767225600 regime-detect good.h5 --interval 2 -q -o same.h5 && cp same.h5 first.h5
sleep 1
SOURCE_DATE_EPOCH=1767225600 regime-detect good.h5 --interval 2 -q -o same.h5
cmp -s first.h5 same.h5 || fail "the same command with the same SOURCE_DATE_EPOCH wrote different bytes"
[ "$(h5dump -a /created same.h5 | sed -n 's/.*(0): "\(.*\)".*/\1/p')" = "2026-01-01T00:00:00Z" ] ||
    fail "created is not SOURCE_DATE_EPOCH's time: $(h5dump -a /created same.h5)"
SOURCE_DATE_EPOCH=tomorrow expect_exit 2 \
    "^regime-detect: error: SOURCE_DATE_EPOCH: must be a whole number of seconds since 1970, not 'tomorrow'" -- \
    regime-detect good.h5 --interval 2 -q -o same.h5
cmp -s first.h5 same.h5 || fail "a refused SOURCE_DATE_EPOCH changed the output"

finish
