#!/usr/bin/env bash
# grad-dump refuses bad options and bad data with one clear message and the
# right exit code: 2 for usage errors, 1 for runtime errors.
source "$(dirname "$0")/common.sh"
cd "$WORK"
tiny=(--model mlp --train-samples 100 --test-samples 20 --batch-size 20 --threads 1)

expect_exit 2 "--epochs is required" -- grad-dump --model mlp
expect_exit 2 "--model: resnet50 not in \{mlp,cnn,resnet18,vgg19_bn,lstm\}" -- grad-dump --model resnet50 --epochs 1
expect_exit 2 "--model lstm cannot train on --dataset fashion-mnist: the language model needs a text dataset" -- \
    grad-dump --model lstm --epochs 1
expect_exit 2 "--nesterov: needs a --momentum greater than 0" -- grad-dump "${tiny[@]}" --epochs 1 --momentum 0 --nesterov
expect_exit 2 "--snapshot-epochs: epoch 5 is not among the 2 epochs trained \(they count from 0\)" -- \
    grad-dump "${tiny[@]}" --epochs 2 --snapshot-epochs 1,5
expect_exit 2 "--data-dir: dataset cifar10 has no default location; give the directory that holds data_batch_1.bin" -- \
    grad-dump --model resnet18 --dataset cifar10 --epochs 1
if gpu_present; then
    echo "skip: --device cuda without a CUDA device (this machine has a GPU)"
else
    expect_exit 2 "--device cuda: no CUDA device" -- grad-dump "${tiny[@]}" --epochs 1 --device cuda
fi
expect_exit 2 "^grad-dump: error: --backend nccl: needs --device cuda" -- grad-dump "${tiny[@]}" --epochs 1 --backend nccl
expect_exit 2 "^grad-dump: error: --backend: must be gloo or nccl, not 'mpi'" -- grad-dump "${tiny[@]}" --epochs 1 --backend mpi
expect_exit 2 "--tied: applies only to --model lstm" -- grad-dump "${tiny[@]}" --epochs 1 --tied
expect_exit 2 "--batch-size: the training split \(1 images\) gives no batch of at least 2 samples" -- \
    grad-dump --model mlp --train-samples 1 --test-samples 20 --epochs 1
expect_exit 2 "--lr-decay-epochs: must be a whole number in \[1, 1000000\], not .0." -- \
    grad-dump "${tiny[@]}" --epochs 1 --lr-decay-epochs 0
expect_exit 2 "^grad-dump: error: --lr-decay-epochs: an empty item in '1,,2'; give whole numbers in \[1, 1000000\] separated by commas" -- \
    grad-dump "${tiny[@]}" --epochs 3 --lr-decay-epochs 1,,2
expect_exit 2 "^grad-dump: error: --snapshot-epochs: an empty item in '0,1,'" -- \
    grad-dump "${tiny[@]}" --epochs 3 --snapshot-epochs 0,1,
expect_exit 2 "^grad-dump: error: --lr: must be a number in .*, not '0x10'" -- grad-dump "${tiny[@]}" --epochs 1 --lr 0x10

# A misspelt option is named first, with the option meant, even when a required one is missing too.
expect_exit 2 "^grad-dump: error: --epoch: unknown option; did you mean --epochs\? \(see 'grad-dump --help'\)$" -- \
    grad-dump "${tiny[@]}" --epoch 3
expect_exit 2 "^grad-dump: error: --modle: unknown option; did you mean --model\?" -- grad-dump --modle mlp --epochs 1
expect_exit 2 "^grad-dump: error: --learning-rate: unknown option \(see" -- grad-dump "${tiny[@]}" --epochs 1 --learning-rate 0.1

# Every numeric option refuses what cannot be meant, giving the valid range (exit 2, before any work).
while read -r option value range; do
    expect_exit 2 "^grad-dump: error: $option: must be a (whole )?number in $range, not '$value'" -- \
        grad-dump --model mlp --epochs 1 "$option" "$value"
done <<'TABLE'
--seed -1 \[0, 9223372036854775807\]
--seed 18446744073709551616 \[0, 9223372036854775807\]
--seed 1e20 \[0, 9223372036854775807\]
--seed 0x10 \[0, 9223372036854775807\]
--threads 2000 \[0, 256\]
--threads -1 \[0, 256\]
--batch-size 0 \[1, 1048576\]
--batch-size 1e9 \[1, 1048576\]
--micro-batch-size 2000000 \[0, 1048576\]
--train-samples -1 \[0, 1000000000000\]
--test-samples 1e15 \[0, 1000000000000\]
--bptt 0 \[1, 100000\]
--hidden-size 1000000000 \[0, 16384\]
--embedding-size 99999 \[0, 16384\]
--dropout 1 \[0, 0.99\]
--lr 1e300 \[0, 1e\+30\]
--lr nan \[0, 1e\+30\]
--lr -0.1 \[0, 1e\+30\]
--warmup-epochs 2000000 \[0, 1000000\]
--warmup-lr inf \[0, 1e\+30\]
--lr-decay-factor 0.5 \[1, 1e\+12\]
--momentum 1 \[0, 0.999999\]
--weight-decay 1e7 \[0, 1e\+06\]
--clip-norm -1 \[0, 1e\+30\]
--eval-every -1 \[0, 1000000\]
--snapshot-epochs 99999999999 \[0, 1000000\]
--rank 1048576 \[0, 1048575\]
--world-size 0 \[1, 1048576\]
--master-port 70000 \[1, 65535\]
--timeout nan \[0.1, 86400\]
--nproc 2000 \[1, 1024\]
TABLE
expect_exit 2 "^grad-dump: error: --seed: must be a whole number in \[0, 9223372036854775807\], not ''" -- \
    grad-dump "${tiny[@]}" --epochs 1 --seed ''
expect_exit 2 "^grad-dump: error: --epochs: must be a whole number in \[1, 1000000\], not '99999999999999999999'" -- \
    grad-dump "${tiny[@]}" --epochs 99999999999999999999
expect_exit 2 "^grad-dump: error: --lr-decay-epochs: must be a whole number in \[1, 1000000\], not '99999999999'" -- \
    grad-dump "${tiny[@]}" --epochs 1 --lr-decay-epochs 5,99999999999

# LibTorch's failures are one line naming what was being done, never a stack trace.
limit=$(memory_limit_kib 500000)  # 0.5 GB beyond the libraries: too little for the request
expect_exit 1 "^grad-dump: error: building the model \(--model mlp\): LibTorch failed: .*can't allocate memory" -- \
    bash -c 'ulimit -v "$0"; exec grad-dump "$@"' "$limit" "${tiny[@]}" --epochs 1 --hidden-size 16384 -o oom.h5
grep -q "frame #" "$WORK/err" && fail "a stack trace reached the user: $(cat "$WORK/err")"
[ "$(wc -l <"$WORK/err")" -le 2 ] || fail "more than the dataset line and the error: $(cat "$WORK/err")"

# A missing output directory is created; one that cannot be is a runtime error.
grad-dump "${tiny[@]}" --epochs 1 -o new/dir/grads.h5 -q || fail "grad-dump did not create the output's directory"
[ -f new/dir/grads.h5 ] && [ -f new/dir/grads.ckpt.h5 ] || fail "no new/dir/grads.h5 and its checkpoint"
grad-dump "${tiny[@]}" --epochs 1 -o g.h5 --checkpoint ck/sub/g.ckpt.h5 -q || fail "a checkpoint in a new directory"
[ -f ck/sub/g.ckpt.h5 ] || fail "no ck/sub/g.ckpt.h5"
echo x >plain-file
expect_exit 1 "^grad-dump: error: plain-file/grads.h5: cannot create the directory plain-file" -- \
    grad-dump "${tiny[@]}" --epochs 1 -o plain-file/grads.h5

# Dataset files: missing, truncated, malformed.
expect_exit 1 "^grad-dump: error: $WORK/none: no such directory \(expected Fashion-MNIST's IDX files here; see --data-dir\)" -- \
    grad-dump "${tiny[@]}" --epochs 1 --data-dir "$WORK/none"
mkdir fm
cp /usr/share/datasets/fashion-mnist/*.gz fm/
rm fm/t10k-labels-idx1-ubyte.gz
expect_exit 1 "fm/t10k-labels-idx1-ubyte: no such file, nor t10k-labels-idx1-ubyte.gz \(expected Fashion-MNIST's IDX files\)" -- \
    grad-dump "${tiny[@]}" --epochs 1 --data-dir fm
cp /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz fm/
head -c 20000 /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz >fm/train-images-idx3-ubyte.gz
expect_exit 1 "fm/train-images-idx3-ubyte.gz: truncated" -- grad-dump --model mlp --epochs 1 --data-dir fm
echo "not an idx file at all" | gzip >fm/train-images-idx3-ubyte.gz
expect_exit 1 "fm/train-images-idx3-ubyte.gz: is not an IDX image file: expected magic bytes 00 00 08 03" -- \
    grad-dump "${tiny[@]}" --epochs 1 --data-dir fm
mkdir cifar
head -c 5000 /dev/zero >cifar/data_batch_1.bin
expect_exit 1 "cifar/data_batch_1.bin: size 5,000 bytes is not a whole number of 3073-byte CIFAR records" -- \
    grad-dump --model resnet18 --dataset cifar10 --data-dir cifar --epochs 1
mkdir text
printf 'a b c\n' >text/wiki.train.tokens
expect_exit 1 "text/wiki.test.tokens: cannot open" -- grad-dump --model lstm --dataset wikitext2 --data-dir text --epochs 1

# Training that diverges stops with an error instead of writing NaN.
expect_exit 1 "training diverged: the loss is (NaN|infinite) at epoch 0" -- grad-dump "${tiny[@]}" --epochs 1 --lr 1e30 \
    -o diverged.h5
[ ! -e diverged.h5 ] || fail "a diverged run left a statistics file"

# Resuming: no checkpoint, a checkpoint of another run, another model.
expect_exit 1 "fresh.ckpt.h5: no checkpoint to resume from" -- grad-dump "${tiny[@]}" --epochs 2 -o fresh.h5 --resume
grad-dump "${tiny[@]}" --epochs 1 -o run.h5 -q || fail "a short run"
expect_exit 2 "--resume: run.ckpt.h5 is from a run with --seed 42, not 7; resume with the options of the original run" -- \
    grad-dump "${tiny[@]}" --epochs 2 -o run.h5 --resume --seed 7
expect_exit 2 "^grad-dump: error: --resume: run.ckpt.h5 is from a run with --hidden-size 0, not 32; resume with" -- \
    grad-dump "${tiny[@]}" --hidden-size 32 --epochs 2 -o run.h5 --resume
# Every option that changes the numbers must match; each one that differs is named.
expect_exit 2 "^grad-dump: error: --resume: run.ckpt.h5 is from a run with --train-samples 100, not 512; --lr 0.1, not 0.5; --momentum 0.9, not 0; resume with the options of the original run$" -- \
    grad-dump --model mlp --test-samples 20 --batch-size 20 --threads 1 --epochs 2 -o run.h5 --resume --lr 0.5 \
    --momentum 0 --train-samples 512
expect_exit 2 "from a run with --weight-decay 0.0001, not 0.001;" -- \
    grad-dump "${tiny[@]}" --epochs 2 -o run.h5 --resume --weight-decay 1e-3
expect_exit 2 "from a run with --lr-decay-epochs none, not 1;" -- \
    grad-dump "${tiny[@]}" --epochs 2 -o run.h5 --resume --lr-decay-epochs 1
cp run.h5 run-kept.h5
cp run.ckpt.h5 run-kept.ckpt.h5
expect_exit 1 "run.h5: is an accordion.grads file, expected an accordion.checkpoint file" -- \
    grad-dump "${tiny[@]}" --epochs 2 -o other.h5 --checkpoint run.h5 --resume
cp run.ckpt.h5 lost.ckpt.h5
expect_exit 1 "lost.h5: no such file; --resume continues the gradient-statistics file of the stopped run" -- \
    grad-dump "${tiny[@]}" --epochs 2 -o lost.h5 --resume
# The checkpoint never replaces the statistics, however the paths are spelt.
expect_exit 2 "^grad-dump: error: --checkpoint grads.h5: is the same file as --output grads.h5" -- \
    grad-dump "${tiny[@]}" --epochs 1 --checkpoint grads.h5
mkdir -p res
expect_exit 2 "^grad-dump: error: --checkpoint ./res/g.h5: is the same file as --output res/g.h5" -- \
    grad-dump "${tiny[@]}" --epochs 1 -o res/g.h5 --checkpoint ./res/g.h5
expect_exit 2 "is the same file as --output res/../g2.h5" -- \
    grad-dump "${tiny[@]}" --epochs 1 -o res/../g2.h5 --checkpoint "$WORK/g2.h5"
ln -s run-kept.h5 alias.h5
expect_exit 2 "^grad-dump: error: --checkpoint alias.h5: is the same file as --output run-kept.h5" -- \
    grad-dump "${tiny[@]}" --epochs 2 -o run-kept.h5 --checkpoint alias.h5 --resume

# --epochs may change on resume: a finished run is extended.
grad-dump "${tiny[@]}" --epochs 2 -o run-kept.h5 --resume --eval-every 2 -q ||
    fail "extending a run with --resume --epochs 2"
# ... but never shortened: fewer epochs than it completed is a usage error, and the file stays whole.
expect_exit 2 "^grad-dump: error: --epochs 1: run-kept.ckpt.h5 is from a run that has completed 2 epochs; give --epochs 2 or more to continue it$" -- \
    grad-dump "${tiny[@]}" --epochs 1 -o run-kept.h5 --resume
expect_exit 0 "^grad-dump: warning: nothing to train: run-kept.ckpt.h5 is from a run that has completed all 2 epochs" -- \
    grad-dump "${tiny[@]}" --epochs 2 -o run-kept.h5 --resume -q
$ACC_PYTHON - <<'PY' || fail "a refused resume changed the file"
import h5py
with h5py.File("run-kept.h5", "r") as f:
    assert f.attrs["complete"] == 1 and f["epochs/norm"].shape[0] == 2, (dict(f.attrs), f["epochs/norm"].shape)
PY
finish
