#!/usr/bin/env bash
# Overhead of comm-profile's measurement: allreduce busbw on 2 ranks over
# loopback, 4 MiB to 64 MiB, from comm-profile and from a plain loop of
# torch.distributed.all_reduce (Debian's python3-torch, Gloo) on the same sizes.
# Both run twice, alternating; each side keeps its best busbw per size. Prints
# the ratio comm-profile / PyTorch per size and its geometric mean (goal: >= 0.9).
# comm-profile reports the median of per-call times, the loop a mean over
# back-to-back calls; on a busy machine the two differ by more than the
# overhead, so run it on an otherwise idle one. BENCH_RAW=DIR keeps the raw data:
# each run's busbw per size (comm-profile.csv, torch.csv: round,size,busbw) and the report;
# BENCH_FROM=DIR makes the report again from them.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${ACC_BUILD_DIR:-build}/bin/comm-profile
source scripts/bench-common.sh
iters=${ITERS:-20}
work=$tmp
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; bench_cleanup' EXIT

cat >"$work/loop.py" <<'PY'
# A plain timing loop: per size, warm up, then time ITERS back-to-back
# all_reduce calls; the time of a call is the slowest rank's mean.
import os, sys, time
import torch
import torch.distributed as dist

torch.set_num_threads(1)
dist.init_process_group("gloo")
iters = int(sys.argv[1])
size = 4 << 20
while size <= 64 << 20:
    t = torch.zeros(size // 4)
    for _ in range(5):
        dist.all_reduce(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        # 2 ranks: busbw = algbw * 2(n-1)/n = size / time.
        print(f"{size},{size / elapsed.item()}")
    size *= 2
dist.destroy_process_group()
PY

run_torch() {
    local port
    port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    for rank in 1 0; do
        RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
            "$python" "$work/loop.py" "$iters" >"$work/torch-$rank.csv" &
    done
    wait
    cat "$work/torch-0.csv"
}

run_comm_profile() {
    "$bin" --nproc 2 --collectives allreduce -b 4M -e 64M -n "$iters" -w 5 --csv -q |
        awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) column[$i] = i; next }
                 { print $column["size_bytes"] "," $column["busbw_Bps"] }'
}

if bench_measuring; then
    echo "round,size,busbw" | tee "$raw/comm-profile.csv" >"$raw/torch.csv"
    for round in 1 2; do
        run_comm_profile | sed "s/^/$round,/" >>"$raw/comm-profile.csv"
        run_torch | sed "s/^/$round,/" >>"$raw/torch.csv"
    done
fi
bench_need comm-profile.csv torch.csv

"$python" - "$raw/comm-profile.csv" "$raw/torch.csv" <<'PY' | bench_report
import csv, math, sys
def best(path):
    out = {}
    for row in csv.DictReader(open(path)):
        size, busbw = int(row["size"]), float(row["busbw"])
        out[size] = max(out.get(size, 0.0), busbw)
    return out
ours, theirs = best(sys.argv[1]), best(sys.argv[2])
print("allreduce, 2 ranks on loopback (Gloo), busbw in GB/s, best of 2 runs each")
print(f"{'size':>10} {'comm-profile':>13} {'torch loop':>11} {'ratio':>7}")
ratios = []
for size in sorted(theirs):
    r = ours[size] / theirs[size]
    ratios.append(r)
    print(f"{size >> 20:>7} MiB {ours[size] / 1e9:>13.3f} {theirs[size] / 1e9:>11.3f} {r:>7.3f}")
mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
verdict = "met" if mean >= 0.9 else "NOT met"
print(f"geometric mean ratio comm-profile / torch: {mean:.3f} "
      f"(goal >= 0.90: comm-profile's own overhead costs at most 10% of busbw): {verdict}")
PY
