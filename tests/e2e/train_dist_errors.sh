#!/usr/bin/env bash
# train-dist refuses bad options and files with one sentence naming the option
# or file, exit 2 for usage errors and 1 for runtime errors.
source "$(dirname "$0")/common.sh"
cd "$WORK"
check="$ACC_PYTHON $ACC_SOURCE/tests/e2e/train_dist_check.py"
small=(--model mlp --hidden-size 16 --dataset synthetic --train-samples 64 --test-samples 16 --batch-size 16 --threads 1)

expect_exit 2 "^train-dist: error: --compress: 'powersgd:0': RANK must be a whole number" -- \
    train-dist "${small[@]}" --epochs 1 --compress powersgd:0
expect_exit 2 "^train-dist: error: --compress excludes --schedule" -- \
    train-dist "${small[@]}" --epochs 1 --compress topk:0.1 --schedule s.h5
expect_exit 2 "^train-dist: error: --low: needs --accordion or --auto" -- train-dist "${small[@]}" --epochs 1 --low topk:0.1
expect_exit 2 "^train-dist: error: --high: 'fastsgd' is not a compressor" -- \
    train-dist "${small[@]}" --epochs 1 --accordion --high fastsgd
expect_exit 2 "^train-dist: error: --eta: must be a number in \(0, 1e\+06\], not '0'" -- \
    train-dist "${small[@]}" --epochs 1 --accordion --eta 0
expect_exit 2 "^train-dist: error: --epoch: unknown option; did you mean --epochs\?" -- train-dist "${small[@]}" --epoch 3
expect_exit 2 "^train-dist: error: --acordion: unknown option; did you mean --accordion\?" -- \
    train-dist "${small[@]}" --epochs 1 --acordion

# Every numeric option of train-dist's own refuses what cannot be meant, giving the valid range.
while read -r option value range; do
    expect_exit 2 "^train-dist: error: $option: must be a (whole )?number in $range, not '$value'" -- \
        train-dist --model mlp --epochs 1 --accordion "$option" "$value"
done <<'TABLE'
--eta 1e400 \(0, 1e\+06\]
--eta nan \(0, 1e\+06\]
--interval 99999999999999999999 \[1, 1000000\]
--interval 0 \[1, 1000000\]
--bucket-mb 0 \(0, 65536\]
--bucket-mb 1e12 \(0, 65536\]
--first-bucket-mb inf \(0, 65536\]
--dgc-warmup-epochs -1 \[0, 1000000\]
--seed 18446744073709551616 \[0, 9223372036854775807\]
--threads 2000 \[0, 256\]
--lr 1e300 \[0, 1e\+30\]
--hidden-size 1000000000 \[0, 16384\]
TABLE
expect_exit 2 "^train-dist: error: --schedule-extend: needs --schedule" -- \
    train-dist "${small[@]}" --epochs 1 --schedule-extend last
expect_exit 2 "^train-dist: error: --backend nccl: needs --device cuda" -- train-dist "${small[@]}" --epochs 1 --backend nccl
if gpu_present; then
    echo "skip: --device cuda without a CUDA device (this machine has a GPU)"
else
    expect_exit 2 "^train-dist: error: --device cuda: no CUDA device is available" -- train-dist "${small[@]}" --epochs 1 --device cuda
fi
expect_exit 2 "^train-dist: error: --micro-batch-size: must be between 0 and --batch-size \(16\)" -- \
    train-dist "${small[@]}" --epochs 1 --micro-batch-size 32
expect_exit 1 "^train-dist: error: nope.h5: no such file$" -- train-dist "${small[@]}" --epochs 1 --schedule nope.h5
# Missing output directories are created; one that cannot be is a runtime error.
train-dist "${small[@]}" --epochs 1 --metrics new/dir/m.h5 --checkpoint-dir ck/dir -q || fail "new output directories"
[ -f new/dir/m.h5 ] && [ -f ck/dir/m.ckpt.h5 ] || fail "no new/dir/m.h5 and ck/dir/m.ckpt.h5: $(find new ck)"
echo x >plain-file
expect_exit 1 "^train-dist: error: plain-file/m.h5: cannot create the directory plain-file" -- \
    train-dist "${small[@]}" --epochs 1 --metrics plain-file/m.h5
expect_exit 1 "^train-dist: error: metrics.ckpt.h5: no checkpoint to resume from" -- \
    train-dist "${small[@]}" --epochs 1 --resume
expect_exit 1 "^train-dist: error: training diverged: the loss is (NaN|infinite) at epoch 0" -- \
    train-dist "${small[@]}" --epochs 1 --lr 1e30

# A run to take the model's shapes from, and to resume.
train-dist "${small[@]}" --epochs 1 --compress topk:0.5 --metrics m.h5 -q || fail "a small run"
expect_exit 1 "^train-dist: error: m.h5: is an accordion.metrics file, expected an accordion.schedule file" -- \
    train-dist "${small[@]}" --epochs 1 --schedule m.h5
$check schedule short.h5 --model-from m.h5 --levels topk:0.1 --epochs 2
expect_exit 2 "^train-dist: error: short.h5 does not fit this run: \(1\) it covers 2 epochs, --epochs is 3 \(--schedule-extend last repeats its last epoch\)$" -- \
    train-dist "${small[@]}" --epochs 3 --schedule short.h5
$check batch-schedule batch.h5 --model-from m.h5 --batch 32,64 --scale 1,2
expect_exit 2 "^train-dist: error: batch.h5 does not fit this run: \(1\) it is a batch schedule, which sets the batch size of every epoch: leave out --batch-size$" -- \
    train-dist "${small[@]}" --epochs 2 --schedule batch.h5
$check batch-schedule odd.h5 --model-from m.h5 --batch 33,64 --scale 1,2
expect_exit 2 "^train-dist\[0\]: error: odd.h5 does not fit this run: \(1\) its global batch size does not split evenly over 2 ranks in 1 epoch \(epoch 0: 33\)$" -- \
    train-dist --model mlp --hidden-size 16 --dataset synthetic --train-samples 64 --epochs 2 --schedule odd.h5 --nproc 2

# A training split too small for the ranks: every rank checks every rank's shard, and
# the launcher prints the one message once.
expect_exit 2 "^train-dist\[[0-3]\]: error: --batch-size: the training split \(5 [a-z]+\) gives each of the 4 ranks no batch of at least 2 samples at batch size [0-9]+$" -- \
    train-dist --model mlp --hidden-size 8 --dataset synthetic --train-samples 5 --test-samples 8 --threads 1 --epochs 1 --nproc 4
[ "$(grep -c "error:" "$WORK/err")" = 1 ] || fail "--nproc 4: a usage error is not printed once: $(cat "$WORK/err")"
# So is a runtime error every rank meets in the same words (a missing --data-dir).
expect_exit 1 "^train-dist\[[0-2]\]: error: $WORK/missing: no such directory" -- \
    train-dist --model mlp --hidden-size 8 --dataset fashion-mnist --data-dir "$WORK/missing" --threads 1 --epochs 1 --nproc 3
[ "$(grep -c "error:" "$WORK/err")" = 1 ] || fail "--nproc 3: a runtime error is not printed once: $(cat "$WORK/err")"

# Resuming with other options than the stopped run's.
expect_exit 2 "^train-dist: error: --resume: m.ckpt.h5 is from a run with --seed 42, not 7; resume with the options of the original run$" -- \
    train-dist "${small[@]}" --epochs 2 --compress topk:0.5 --metrics m.h5 --resume --seed 7
expect_exit 2 "^train-dist: error: --resume: m.ckpt.h5 is from a run with --lr 0.1, not 0.5; --momentum 0.9, not 0; resume with the options of the original run$" -- \
    train-dist "${small[@]}" --epochs 2 --compress topk:0.5 --metrics m.h5 --resume --lr 0.5 --momentum 0
expect_exit 2 "^train-dist: error: --resume: m.ckpt.h5 is from a run with --hidden-size 16, not 32; resume with" -- \
    train-dist --model mlp --hidden-size 32 --dataset synthetic --train-samples 64 --test-samples 16 --batch-size 16 \
    --threads 1 --epochs 2 --compress topk:0.5 --metrics m.h5 --resume
expect_exit 2 "^train-dist: error: --resume: m.ckpt.h5 is from a run with --dgc-warmup-epochs 0, not 3;" -- \
    train-dist "${small[@]}" --epochs 2 --compress topk:0.5 --metrics m.h5 --resume --dgc-warmup-epochs 3
expect_exit 2 "^train-dist: error: --resume: m.ckpt.h5 is from a run with levels \[none, topk:0.5\], not \[none, topk:0.25\]; resume with" -- \
    train-dist "${small[@]}" --epochs 2 --compress topk:0.25 --metrics m.h5 --resume
# Every changed option at once, the levels among them.
expect_exit 2 "^train-dist: error: --resume: m.ckpt.h5 is from a run with --lr 0.1, not 0.5; levels \[none, topk:0.5\], not \[none, powersgd:2\]; resume with" -- \
    train-dist "${small[@]}" --epochs 2 --compress powersgd:2 --metrics m.h5 --resume --lr 0.5
# A GraVAC run resumed without --gravac: the option is named, as a changed --gravac-window is.
train-dist "${small[@]}" --epochs 1 --gravac topk --metrics gv.h5 -q 2>"$WORK/err" || fail "--gravac topk: $(cat "$WORK/err")"
expect_exit 2 "^train-dist: error: --resume: gv.ckpt.h5 is from a run with --gravac topk, not \(not given\); resume with the options of the original run$" -- \
    train-dist "${small[@]}" --epochs 2 --metrics gv.h5 --resume
cp m.ckpt.h5 gone.ckpt.h5
expect_exit 1 "^train-dist: error: gone.h5: no such file; --resume continues the metrics file of the stopped run$" -- \
    train-dist "${small[@]}" --epochs 2 --compress topk:0.5 --metrics gone.h5 --resume
mkdir bad.ckpt
echo garbage >bad.ckpt/m.ckpt.h5
expect_exit 1 "^train-dist: error: bad.ckpt/m.ckpt.h5: cannot open the HDF5 file" -- \
    train-dist "${small[@]}" --epochs 2 --compress topk:0.5 --metrics m.h5 --checkpoint-dir bad.ckpt --resume
train-dist "${small[@]}" --epochs 2 --compress topk:0.5 --metrics m.h5 --resume -q || fail "a proper resume"
# A finished run: fewer epochs than it completed is an error; as many, a warning that nothing is left.
expect_exit 2 "^train-dist: error: --epochs 1: m.ckpt.h5 is from a run that has completed 2 epochs; give --epochs 2 or more to continue it$" -- \
    train-dist "${small[@]}" --epochs 1 --compress topk:0.5 --metrics m.h5 --resume
expect_exit 0 "^train-dist: warning: nothing to train: m.ckpt.h5 is from a run that has completed all 2 epochs; give --epochs above 2" -- \
    train-dist "${small[@]}" --epochs 2 --compress topk:0.5 --metrics m.h5 --resume -q

# Outputs never replace an input or each other; runs in one directory keep their own checkpoints.
cp short.h5 keep.h5
expect_exit 2 "^train-dist: error: --metrics ./keep.h5: is the same file as --schedule keep.h5" -- \
    train-dist "${small[@]}" --epochs 2 --schedule keep.h5 --metrics ./keep.h5
cmp -s short.h5 keep.h5 || fail "train-dist replaced its schedule"
mkdir d
train-dist "${small[@]}" --epochs 1 --metrics d/a.h5 -q || fail "run a"
train-dist "${small[@]}" --epochs 1 --seed 3 --metrics d/b.h5 -q || fail "run b"
[ -f d/a.ckpt.h5 ] && [ -f d/b.ckpt.h5 ] || fail "two runs in one directory do not keep two checkpoints: $(ls d)"
train-dist "${small[@]}" --epochs 2 --metrics d/a.h5 --resume -q || fail "run a's checkpoint was overwritten by run b's"
finish
