#!/usr/bin/env bash
# Step time of train-dist against PyTorch DDP, both measured in this run:
# 2 ranks with one thread each, the CIFAR ResNet-18 (the same definition on both
# sides), batch 32 per rank, synthetic data, Gloo over loopback.
#   uncompressed train-dist / DDP                              goal <= 1.0
#   train-dist --compress powersgd:2 / DDP with powerSGD_hook (rank 2)   goal <= 1.0
# Then, as root, on a 100 Mbit/s link (tc tbf on a veth pair between two network
# namespaces this script creates and removes; no traffic leaves them):
#   uncompressed step / powersgd:2 step                        goal >= 3
#   compress-bench's model, given the measured compute time and the link's alpha
#   and bandwidth from comm-profile in the same namespaces, predicts both step
#   times within 25%.
# Each side runs REPS times (default 3), alternating; the script prints the fastest
# and the median. train-dist's step time is its epoch time over the steps of the
# second of two epochs (the first warms up); DDP's is the mean over STEPS timed
# steps after 3 untimed ones. SHAPED=0 skips the shaped link, LOOPBACK=0 the comparison with DDP.
# BENCH_RAW=DIR keeps the raw data: every run's step time (loopback.csv:
# rep,side,level,seconds_per_step), the shaped link's profile (comm.h5), both runs'
# metrics there (shaped-none.h5, shaped-powersgd-2.h5), the model's prediction
# (model.json), the load average before and after the loopback runs (load.txt), and
# the reports (report.txt, shaped-report.txt); BENCH_FROM=DIR makes them again from these.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${ACC_BUILD_DIR:-build}/bin
source scripts/bench-common.sh
reps=${REPS:-3}
steps=${STEPS:-8}
shaped_steps=${SHAPED_STEPS:-3}
work=$tmp
source scripts/shaped-link.sh
# On every exit: no rank left running, the namespaces (and their veth pair) gone.
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; shaped_link_down; bench_cleanup' EXIT

model=(--model resnet18 --dataset synthetic --test-samples 64 --eval-every 0 --batch-size 32 --epochs 2 --threads 1 -q)

# step_seconds METRICS: the second epoch's seconds per step (and its compute per step).
step_seconds() {
    "$python" - "$1" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    e = f["epochs"]
    print(e["seconds"][1] / e["steps"][1], e["compute_seconds"][1] / e["steps"][1],
          e["compression_seconds"][1] / e["steps"][1], e["communication_seconds"][1] / e["steps"][1])
PY
}

ours() {  # ours SPEC: seconds per step
    "$bin/train-dist" "${model[@]}" --train-samples $((steps * 64)) --nproc 2 --compress "$1" \
        --metrics "$work/ours.h5" --checkpoint-dir "$work"
    step_seconds "$work/ours.h5" | cut -d' ' -f1
}

ddp() {  # ddp HOOK: seconds per step (one retry: a port picked free can be taken meanwhile)
    local try
    for try in 1 2; do
        if "$python" scripts/bench_train_dist_ddp.py --hook "$1" --steps "$steps" --warmup 3 \
            --port "$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')" \
            >"$work/ddp.json" 2>"$work/ddp.err"; then
            "$python" -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["mean"])' "$work/ddp.json"
            return
        fi
    done
    echo "DDP ($1) failed twice: $(tail -3 "$work/ddp.err")" >&2
    return 1
}

if [ "${LOOPBACK:-1}" != 0 ] && bench_measuring; then
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores" >"$raw/load.txt"
    echo "rep,side,level,seconds_per_step" >"$raw/loopback.csv"
    for ((r = 0; r < reps; r++)); do
        ours_none=$(ours none)
        ddp_none=$(ddp none)
        ours_psgd=$(ours powersgd:2)
        ddp_psgd=$(ddp powersgd)
        printf '%s\n' "$r,train-dist,none,$ours_none" "$r,ddp,none,$ddp_none" \
            "$r,train-dist,powersgd:2,$ours_psgd" "$r,ddp,powersgd:2,$ddp_psgd" >>"$raw/loopback.csv"
    done
    echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)" >>"$raw/load.txt"
fi
if [ "${LOOPBACK:-1}" != 0 ] && { bench_measuring || [ -e "$raw/loopback.csv" ]; }; then
    bench_need load.txt
    "$python" - "$raw/loopback.csv" "$raw/load.txt" <<'PY' | bench_report
import csv, sys
runs = {}  # (side, level) -> {repetition: seconds per step}
for row in csv.DictReader(open(sys.argv[1])):
    runs.setdefault((row["side"], row["level"]), {})[int(row["rep"])] = float(row["seconds_per_step"])
def fastest_and_median(values):  # each to the 3 decimals printed, which the ratios are of
    v, n = sorted(values), len(values)
    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return float(f"{v[0]:.3f}"), float(f"{median:.3f}")
print(open(sys.argv[2]).read(), end="")
reps = len(runs[("train-dist", "none")])
print(f"2 ranks, 1 thread each, resnet18, batch 32 per rank, loopback; fastest of {reps} runs (median in brackets)")
for label, level in (("uncompressed vs DDP", "none"), ("powersgd:2 vs DDP powerSGD_hook", "powersgd:2")):
    ours, theirs = runs[("train-dist", level)], runs[("ddp", level)]
    a, am = fastest_and_median(ours.values())
    b, bm = fastest_and_median(theirs.values())
    print(f"  {label}: train-dist {a:.3f} s ({am:.3f} s), DDP {b:.3f} s ({bm:.3f} s) per step; "
          f"ratio {a / b:.3f} ({am / bm:.3f}), goal <= 1.0: {'ok' if a / b <= 1.0 else 'MISSED'}")
    # Each repetition ran both sides one after the other: their ratios, paired.
    print("    per repetition: " + ", ".join(f"{ours[r] / theirs[r]:.3f}" for r in sorted(ours)))
PY
fi

# ---------------------------------------------------------------- shaped link
if [ "${SHAPED:-1}" = 0 ]; then exit 0; fi
if bench_measuring; then
    if ! shaped_link_up 100mbit; then
        echo "shaped link: skipped ($SHAPED_WHY)"
        exit 0
    fi

    # pair PROGRAM ARGS...: rank 1 in the second namespace, rank 0 in the first.
    pair() {
        local program=$1
        shift
        shaped_ranks "$bin/$program" --timeout 120 "$@" -q
    }

    pair comm-profile --collectives allreduce,allgather -b 256K -e 8M -n 3 -w 1 -o "$raw/comm.h5" -q
    for spec in none powersgd:2; do
        pair train-dist "${model[@]}" --train-samples $((shaped_steps * 64)) --compress "$spec" \
            --metrics "$raw/shaped-${spec//:/-}.h5" --checkpoint-dir "$work"
    done
elif [ ! -e "$raw/comm.h5" ]; then
    exit 0  # a run without the shaped link
fi
bench_need shaped-none.h5 shaped-powersgd-2.h5
read -r none_step _ _ _ <<<"$(step_seconds "$raw/shaped-none.h5")"
read -r psgd_step psgd_compute psgd_compression psgd_comm <<<"$(step_seconds "$raw/shaped-powersgd-2.h5")"
if bench_measuring; then
    "$bin/compress-bench" --shapes resnet18 --world 2 --comm "$raw/comm.h5" --compressors none,powersgd:2 --reps 3 \
        --compute-ms "$(awk -v t="$psgd_compute" 'BEGIN {print t * 1000}')" --json -q >"$raw/model.json"
fi
bench_need model.json
"$python" - "$raw/comm.h5" "$raw/model.json" "$none_step" "$psgd_step" "$psgd_compute" "$psgd_compression" "$psgd_comm" <<'PY' | bench_report shaped-report.txt
import json, sys, h5py
comm, model = h5py.File(sys.argv[1], "r"), json.load(open(sys.argv[2]))
none_step, psgd_step, compute, compression, communication = map(float, sys.argv[3:8])
ar = comm["collectives/allreduce"].attrs
rows = {r["compressor"]: r for r in model["results"]}
predicted_none = rows["none"]["baseline_iteration_seconds"]
predicted_psgd = rows["powersgd:2"]["iteration_seconds"]
print("100 Mbit/s link (tc tbf) between two network namespaces, one rank in each:")
print(f"  comm-profile allreduce fit: alpha {ar['alpha'] * 1e6:.0f} us, bandwidth {ar['bandwidth'] / 1e6:.2f} MB/s "
      f"(bus {ar['bus_bandwidth'] / 1e6:.2f} MB/s)")
print(f"  measured compute {compute:.3f} s, compression {compression:.3f} s, communication {communication:.3f} s per powersgd:2 step")
speedup = none_step / psgd_step
print(f"  uncompressed {none_step:.3f} s, powersgd:2 {psgd_step:.3f} s per step: {speedup:.2f}x, goal >= 3: "
      + ("ok" if speedup >= 3 else "MISSED"))
for name, measured, predicted in (("uncompressed", none_step, predicted_none), ("powersgd:2", psgd_step, predicted_psgd)):
    error = predicted / measured - 1
    print(f"  model for {name}: {predicted:.3f} s predicted, {measured:.3f} s measured, {100 * error:+.1f}%, "
          f"goal within 25%: " + ("ok" if abs(error) <= 0.25 else "MISSED"))
PY
