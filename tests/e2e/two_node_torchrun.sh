#!/usr/bin/env bash
# examples/two-node-torchrun.sh with both "nodes" on this machine: torchrun
# (Debian's python3-torch) starts one rank per node, comm-profile measures the
# link, and train-dist replays a schedule on the two ranks. Skipped (77)
# without torch.distributed.run.
source "$(dirname "$0")/common.sh"
cd "$WORK"
$ACC_PYTHON -c "import torch.distributed.run" 2>/dev/null || { echo "no torch.distributed.run: skipped"; exit 77; }
grad-dump --model mlp --hidden-size 32 --train-samples 600 --test-samples 200 --epochs 3 --threads 1 -q -o grads.h5
regime-detect grads.h5 --interval 1 -q -o sched.h5
port=$(free_port)
options=(--model mlp --hidden-size 32 --train-samples 600 --test-samples 200 --epochs 3 --threads 1 -q)
for node in 0 1; do
    mkdir -p "node$node"
    (cd "node$node" && PATH=$(dirname "$ACC_PYTHON"):$PATH MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NODE_RANK=$node \
        DEVICE=cpu PROFILE_MAX=256K timeout 240 bash "$ACC_SOURCE/examples/two-node-torchrun.sh" ../sched.h5 -- "${options[@]}" \
        >out 2>err) &
done
wait %1 || fail "node 0: $(tail -5 node0/err)"
wait %2 || fail "node 1: $(tail -5 node1/err)"
[ -f node0/comm.h5 ] || fail "node 0 (rank 0) wrote no comm.h5"
[ ! -f node1/metrics.h5 ] || fail "node 1 wrote a metrics file: only rank 0 writes"
$ACC_PYTHON - <<'PY' || fail "the metrics of the two-node run are not what the schedule says"
import h5py
m, s = h5py.File("node0/metrics.h5", "r"), h5py.File("sched.h5", "r")
assert m.attrs["world_size"] == 2 and m.attrs["mode"] in ("schedule", b"schedule"), dict(m.attrs)
levels = [l.decode() for l in m["levels"][()]]
schedule_levels = [l.decode() for l in s["levels"][()]]
used = [[levels[i] for i in row] for row in m["epochs/level"][()]]
planned = [[schedule_levels[i] for i in row] for row in s["epochs/level"][()]]
assert used == planned, (used, planned)
PY
finish
