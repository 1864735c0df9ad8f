#!/usr/bin/env bash
# Accordion's pipeline under FSDP2's hybrid sharding: train_fsdp.py records rank 0's
# local gradients under torchrun (4 ranks as 2 replicas x 2 shards, Gloo), with
# FSDP's own hybrid sharding; regime-detect finds the critical regimes in them; a
# second run replays the compression schedule in the replicas' exchange
# (accordion.compress_fsdp), recording again. PyTorch 2.x (fully_shard).
#
#   examples/pytorch/record-and-detect-fsdp.sh [OUT]   (files go to OUT, default build/pytorch-fsdp-example)
#
# EPOCHS (default 8) and SAMPLES (training images, default 12000) shorten it.
# PYTHON names the Python of the environment the toolkit was installed into
# (pip install ./python; default python3), whose bin/ has regime-detect; where it
# has none, the toolkit's build's (${ACC_BUILD_DIR:-build}/bin) or PATH's is used.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-build/pytorch-fsdp-example}
python=${PYTHON:-python3}
epochs=${EPOCHS:-8} samples=${SAMPLES:-12000}
bin="$here/${ACC_BUILD_DIR:-build}/bin"
[ -x "$bin/regime-detect" ] && export PATH="$bin:$PATH"
envbin=$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null) || envbin=
if [ -n "$envbin" ] && [ -x "$envbin/regime-detect" ]; then export PATH="$envbin:$PATH"; fi
command -v regime-detect >/dev/null ||
    { echo "record-and-detect-fsdp.sh: error: regime-detect: not in $python's environment (pip install ./python)," \
        "not built (scripts/build.sh) and not on PATH" >&2; exit 1; }
"$python" -c 'from torch.distributed.fsdp import fully_shard; import accordion' ||
    { echo "record-and-detect-fsdp.sh: error: $python: needs PyTorch 2.x (fully_shard) and accordion" \
        "(pip install ./python)" >&2; exit 1; }
mkdir -p "$out"
cd "$out"
script="$here/examples/pytorch/train_fsdp.py"
torchrun=("$python" -m torch.distributed.run --nproc_per_node 4 --master_port "${ACC_PORT:-29518}")
common=(--epochs "$epochs" --train-samples "$samples")

echo "== 1. record: FSDP's own hybrid sharding (2 replicas x 2 shards), $epochs epochs -> grads.h5" >&2
"${torchrun[@]}" "$script" "${common[@]}" --record grads.h5

echo "== 2. regime-detect: critical regimes -> sched.h5" >&2
# PowerSGD ranks 8 and 4, as record-and-detect.sh takes them for this MLP: ranks 2
# and 1 lose accuracy at its learning rate 0.1 (docs/python.md).
regime-detect grads.h5 --interval 2 --low powersgd:8 --high powersgd:4 -o sched.h5
"$python" - <<'PY'
import accordion
s = accordion.load_schedule("sched.h5")
print(f"critical epochs: {s.critical_epochs()} of {s.epochs}")
for epoch in range(s.epochs):
    print(f"  epoch {epoch}: " + ", ".join(f"{name} {level}" for name, level in s.levels(epoch).items()
                                          if level != "none"))
PY

echo "== 3. replay: the schedule in the replicas' exchange (compress_fsdp) -> compressed.h5" >&2
"${torchrun[@]}" "$script" "${common[@]}" --schedule sched.h5 --record compressed.h5
echo "record-and-detect-fsdp.sh: done; files in $out" >&2
