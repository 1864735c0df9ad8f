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
expect_exit 2 "--tied: applies only to --model lstm" -- grad-dump "${tiny[@]}" --epochs 1 --tied
expect_exit 2 "--batch-size: the training split \(1 images\) gives rank 0 of 1 no batch of at least 2 samples" -- \
    grad-dump --model mlp --train-samples 1 --test-samples 20 --epochs 1
expect_exit 2 "--lr-decay-epochs: must be a whole number >= 1, not .0." -- grad-dump "${tiny[@]}" --epochs 1 --lr-decay-epochs 0
expect_exit 1 "nosuchdir/grads.h5: .*director" -- grad-dump "${tiny[@]}" --epochs 1 -o nosuchdir/grads.h5

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
expect_exit 1 "run.ckpt.h5: does not belong to this model" -- \
    grad-dump "${tiny[@]}" --hidden-size 32 --epochs 2 -o run.h5 --resume
expect_exit 1 "run.h5: is an accordion.grads file, expected an accordion.checkpoint file" -- \
    grad-dump "${tiny[@]}" --epochs 2 -o other.h5 --checkpoint run.h5 --resume
cp run.ckpt.h5 lost.ckpt.h5
expect_exit 1 "lost.h5: no such file; --resume continues the gradient-statistics file of the stopped run" -- \
    grad-dump "${tiny[@]}" --epochs 2 -o lost.h5 --resume
expect_exit 2 "--checkpoint: must differ from the output file" -- grad-dump "${tiny[@]}" --epochs 1 --checkpoint grads.h5
finish
