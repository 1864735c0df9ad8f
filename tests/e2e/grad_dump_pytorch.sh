#!/usr/bin/env bash
# grad-dump's models, datasets and gradient sums against PyTorch models written
# independently in grad_dump_pytorch.py: parameter names, shapes and order; the
# summed gradients of mlp and cnn on Fashion-MNIST and of the LSTM language
# model on a small corpus; the test loss of resnet18 and vgg19_bn on CIFAR-10
# files written here, after loading grad-dump's checkpoint into PyTorch.
source "$(dirname "$0")/common.sh"
cd "$WORK"
check="$ACC_PYTHON $ACC_SOURCE/tests/e2e/grad_dump_pytorch.py"
fashion=/usr/share/datasets/fashion-mnist
# lr 0: the weights stay at their initial values, which the checkpoint holds.
fixed=(--lr 0 --momentum 0 --weight-decay 0 --epochs 1 --snapshot-epochs 0 --threads 1 -q)

for model in mlp cnn; do
    grad-dump --model "$model" --train-samples 600 --test-samples 100 --batch-size 50 "${fixed[@]}" -o "$model.h5" ||
        fail "grad-dump --model $model"
    $check gradients "$model.h5" "$model.ckpt.h5" --model "$model" --data-dir "$fashion" --train-samples 600 \
        --batch 50 || fail "$model: gradients differ from PyTorch's"
done

mkdir text
$ACC_PYTHON - <<'PY'
import random
random.seed(3)
words = [f"w{i}" for i in range(40)]
for split, lines in (("train", 60), ("test", 10)):
    with open(f"text/wiki.{split}.tokens", "w") as f:
        for _ in range(lines):
            f.write(" " + " ".join(random.choice(words) for _ in range(random.randint(0, 12))) + " \n")
PY
grad-dump --model lstm --dataset wikitext2 --data-dir text --embedding-size 16 --hidden-size 16 --tied --bptt 5 \
    --batch-size 4 "${fixed[@]}" -o lstm.h5 || fail "grad-dump --model lstm"
$check gradients lstm.h5 lstm.ckpt.h5 --model lstm --data-dir text --batch 4 --bptt 5 --size 16 --tied ||
    fail "lstm: gradients differ from PyTorch's"

mkdir cifar
$ACC_PYTHON - <<'PY'
import numpy as np
rng = np.random.default_rng(1)
def records(n):
    r = rng.integers(0, 256, (n, 3073), dtype=np.uint8)
    r[:, 0] = rng.integers(0, 10, n)
    return r
for i in range(1, 6):
    records(2).tofile(f"cifar/data_batch_{i}.bin")
records(12).tofile("cifar/test_batch.bin")
PY
for model in resnet18 vgg19_bn; do
    grad-dump --model "$model" --dataset cifar10 --data-dir cifar --batch-size 4 --epochs 1 --lr 0.01 --threads 1 -q \
        -o "$model.h5" || fail "grad-dump --model $model"
    $check evaluate "$model.h5" "$model.ckpt.h5" --model "$model" --data-dir cifar --test-samples 12 --batch 4 ||
        fail "$model: PyTorch's test loss with grad-dump's weights differs"
done
finish
