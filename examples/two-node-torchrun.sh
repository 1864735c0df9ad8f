#!/usr/bin/env bash
# Replaying a schedule on two machines with torchrun, G processes each (one per
# GPU, or a few CPU ranks). Run the same command on both machines, with
# NODE_RANK=0 on the one whose address is MASTER_ADDR and NODE_RANK=1 on the
# other; both need the toolkit installed, the data, and sched.h5 (written by
# regime-detect, for example by examples/pipeline.sh):
#
#   MASTER_ADDR=node1 NODE_RANK=0 examples/two-node-torchrun.sh sched.h5 -- --model resnet18 \
#       --dataset cifar10 --data-dir cifar-10-batches-bin --epochs 300 --lr-decay-epochs 150,250
#   MASTER_ADDR=node1 NODE_RANK=1 examples/two-node-torchrun.sh sched.h5 -- (the same options)
#
# G is GPUS_PER_NODE (default 1); MASTER_PORT defaults to 29500; DEVICE
# (cuda, or cpu for Gloo) defaults to cuda; PROFILE_MAX, the largest message
# comm-profile sends, 64M. Rank 0 (on node 0) writes the
# metrics and checkpoints to the current directory. The same with
# comm-profile measures the link between the machines first. Export the same
# ACC_RUN_TOKEN on both machines (e.g. from `openssl rand -hex 16`) so that
# no other process can join the run (see SECURITY in the man pages).
set -euo pipefail
schedule=${1:?usage: MASTER_ADDR=HOST NODE_RANK=0|1 examples/two-node-torchrun.sh SCHED.h5 -- TRAIN-DIST OPTIONS}
shift
[ "${1:-}" != -- ] || shift
: "${MASTER_ADDR:?set MASTER_ADDR to the address of node 0}" "${NODE_RANK:?set NODE_RANK to 0 or 1}"
gpus=${GPUS_PER_NODE:-1} port=${MASTER_PORT:-29500} device=${DEVICE:-cuda}
# Options spelled so that torchrun 1.13 (Debian's) and 2.x both accept them.
# --redirects 2 --tee 2 copies each rank's standard error to the terminal (and a
# log file) and leaves standard output alone; torchrun 1.13's defaults (0) fail
# under Python 3.11.
if command -v torchrun >/dev/null; then launch=(torchrun); else launch=(python3 -m torch.distributed.run); fi
run() {
    "${launch[@]}" --nnodes 2 --node_rank "$NODE_RANK" --nproc_per_node "$gpus" --redirects 2 --tee 2 \
        --master_addr "$MASTER_ADDR" --master_port "$port" --no_python "$@"
}
run comm-profile --collectives allreduce,allgather -b 64K -e "${PROFILE_MAX:-64M}" -o comm.h5
run train-dist --device "$device" --schedule "$schedule" --metrics metrics.h5 "$@"
