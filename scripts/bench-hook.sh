#!/usr/bin/env bash
# Step time of the Python package's compression_hook against PyTorch's own, both
# measured in this run: 2 ranks with one thread each, the CIFAR ResNet-18, batch
# 32 per rank, synthetic data, Gloo over loopback (scripts/bench_train_dist_ddp.py).
#   compression_hook at none / DDP as it comes                         goal <= 1.02
#   compression_hook at powersgd:2 / DDP with powerSGD_hook (rank 2)  goal <= 1.0
# Each of the four runs REPS times (default 3), alternating; a run times STEPS steps
# (default 8) after 3 untimed ones, each step the slowest rank's. The ratios are of
# the medians over the runs of each run's median step.
# Then, as root, on a 100 Mbit/s link between two network namespaces
# (scripts/shaped-link.sh), one rank in each: the speed-up of powersgd:2 over
# uncompressed training, through the hook (DDP as it comes / the hook at
# powersgd:2, SHAPED_STEPS timed steps, default 3) and through train-dist (its
# second epoch's step time, SHAPED_STEPS steps an epoch, uncompressed / powersgd:2).
# The four runs alternate, SHAPED_REPS times (default 3): a compressed step on the
# link varies by 10-15% from run to run, so the speed-ups are of the medians.
#   goal: the hook's speed-up within 10% of train-dist's
# SHAPED=0 skips the link, LOOPBACK=0 the runs over loopback.
#
#   scripts/bench-hook.sh
# Runs with pip's torch (scripts/setup-pip-torch.sh's environment; the hook needs
# PyTorch 2.x) and the package as `scripts/test-python.sh --torch pip` installs it
# in $ACC_BUILD_DIR (default build-pip)/python-site: run that first; train-dist is
# that build's bin/train-dist. BENCH_RAW=DIR keeps the raw data: every run's steps
# (<hook>.jsonl; on the link shaped-<hook>-<run>.0 and train-dist's td-<level>-<run>.h5)
# and the reports (report.txt, shaped-report.txt); BENCH_FROM=DIR makes the reports
# again from them.
set -euo pipefail
cd "$(dirname "$0")/.."
site=${ACC_BUILD_DIR:-build-pip}/python-site
source scripts/bench-common.sh
if bench_measuring; then
    python=$(scripts/setup-pip-torch.sh)
    export PYTHONPATH="$(cd "$(dirname "$site")" && pwd)/python-site${PYTHONPATH:+:$PYTHONPATH}"
    "$python" -c 'import accordion' 2>/dev/null ||
        { echo "bench-hook.sh: error: $site: no accordion package there (scripts/test-python.sh --torch pip installs it)" >&2; exit 1; }
fi
reps=${REPS:-3}
steps=${STEPS:-8}
work=$raw
shaped_steps=${SHAPED_STEPS:-3}
shaped_reps=${SHAPED_REPS:-3}
source scripts/shaped-link.sh
# On every exit: no rank left running, the namespaces (and their veth pair) gone.
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; shaped_link_down; bench_cleanup' EXIT

hooks=(none accordion-none powersgd accordion-powersgd)
if [ "${LOOPBACK:-1}" != 0 ] && bench_measuring; then
for hook in "${hooks[@]}"; do : >"$work/$hook.jsonl"; done  # a kept directory's earlier runs go
for ((r = 1; r <= reps; r++)); do
    for hook in "${hooks[@]}"; do
        echo "bench-hook.sh: run $r/$reps: $hook" >&2
        OMP_NUM_THREADS=1 "$python" scripts/bench_train_dist_ddp.py --hook "$hook" --steps "$steps" --warmup 3 \
            --rank-k 2 --port $((29600 + r)) >>"$work/$hook.jsonl" 2>"$tmp/err" || {
            echo "bench-hook.sh: error: run $r of $hook failed:" >&2
            grep -v '^ ' "$tmp/err" | tail -5 >&2
            exit 1
        }
    done
done
fi
if [ "${LOOPBACK:-1}" != 0 ] && { bench_measuring || [ -e "$raw/none.jsonl" ]; }; then
bench_need "${hooks[@]/%/.jsonl}"
"$python" - "$work" "${hooks[@]}" <<'PY' | bench_report
import json, statistics, sys
work, hooks = sys.argv[1], sys.argv[2:]
median, fastest = {}, {}
for hook in hooks:
    runs = [json.loads(line) for line in open(f"{work}/{hook}.jsonl")]
    median[hook] = statistics.median(r["median"] for r in runs)
    fastest[hook] = min(r["median"] for r in runs)
    print(f"{hook:20s} median step {median[hook] * 1000:8.1f} ms over {len(runs)} runs "
          f"(fastest run {fastest[hook] * 1000:.1f} ms)")
for ours, theirs, goal in (("accordion-none", "none", 1.02), ("accordion-powersgd", "powersgd", 1.0)):
    ratio = median[ours] / median[theirs]
    print(f"{ours} / {theirs}: {ratio:.3f}, fastest runs {fastest[ours] / fastest[theirs]:.3f} "
          f"(goal <= {goal}: {'met' if ratio <= goal else 'not met'})")
PY
fi

# ---------------------------------------------------------------- shaped link
if [ "${SHAPED:-1}" = 0 ]; then exit 0; fi
if ! bench_measuring; then
    shaped_reps=$(find "$raw" -maxdepth 1 -name 'td-none-*.h5' | wc -l)
    [ "$shaped_reps" -gt 0 ] || exit 0  # a run without the shaped link
else
bin=${ACC_BUILD_DIR:-build-pip}/bin
[ -x "$bin/train-dist" ] || { echo "shaped link: skipped (no $bin/train-dist; SHAPED=0 skips it)"; exit 0; }
if ! shaped_link_up 100mbit; then
    echo "shaped link: skipped ($SHAPED_WHY)"
    exit 0
fi

# ddp_shaped HOOK REP: rank 0's JSON line, a rank in each namespace (Gloo on the veth ends).
ddp_shaped() {
    local side pids=()
    for side in 1 0; do
        ip netns exec "${SHAPED_NS[$side]}" env OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME="${SHAPED_TAG}$side" \
            "$python" scripts/bench_train_dist_ddp.py --hook "$1" --rank "$side" --master-addr "${SHAPED_ADDR[0]}" \
            --port 29541 --steps "$shaped_steps" --warmup 3 --rank-k 2 >"$work/shaped-$1-$2.$side" 2>"$tmp/err.$side" &
        pids+=($!)
    done
    for side in 0 1; do
        wait "${pids[$side]}" || {
            echo "bench-hook.sh: error: $1 on the shaped link failed:" >&2
            grep -hv '^ ' "$tmp/err.0" "$tmp/err.1" | tail -5 >&2
            exit 1
        }
    done
}
model=(--model resnet18 --dataset synthetic --train-samples $((shaped_steps * 64)) --test-samples 64 --eval-every 0
       --batch-size 32 --epochs 2 --threads 1 --timeout 120 -q)
for ((r = 1; r <= shaped_reps; r++)); do
    for hook in none accordion-powersgd; do
        echo "bench-hook.sh: shaped link, run $r of $shaped_reps: $hook" >&2
        ddp_shaped "$hook" "$r"
    done
    for spec in none powersgd:2; do
        echo "bench-hook.sh: shaped link, run $r of $shaped_reps: train-dist $spec" >&2
        shaped_ranks "$bin/train-dist" "${model[@]}" --compress "$spec" --metrics "$work/td-${spec//:/-}-$r.h5" \
            --checkpoint-dir "$tmp"
    done
done
fi
"$python" - "$work" "$shaped_reps" <<'PY' | bench_report shaped-report.txt
import json, statistics, sys, h5py
work, reps = sys.argv[1], int(sys.argv[2])
def ddp(hook, r):
    return json.loads(open(f"{work}/shaped-{hook}-{r}.0").readline())["median"]
def train_dist(spec, r):
    with h5py.File(f"{work}/td-{spec.replace(':', '-')}-{r}.h5", "r") as f:
        return f["epochs/seconds"][1] / f["epochs/steps"][1]
runs = range(1, reps + 1)
sides = {"ddp": [ddp("none", r) for r in runs], "hook": [ddp("accordion-powersgd", r) for r in runs],
         "dense": [train_dist("none", r) for r in runs], "ours": [train_dist("powersgd:2", r) for r in runs]}
m = {k: statistics.median(v) for k, v in sides.items()}
hook, ours = m["ddp"] / m["hook"], m["dense"] / m["ours"]
print(f"100 Mbit/s link (tc tbf) between two network namespaces, one rank in each; medians of {reps} runs:")
print(f"  DDP as it comes {m['ddp']:.3f} s, the hook at powersgd:2 {m['hook']:.3f} s per step: {hook:.2f}x")
print(f"  train-dist uncompressed {m['dense']:.3f} s, powersgd:2 {m['ours']:.3f} s per step: {ours:.2f}x")
for r in runs:
    i = r - 1
    h, o = sides["ddp"][i] / sides["hook"][i], sides["dense"][i] / sides["ours"][i]
    print(f"  run {r}: the hook {h:.2f}x, train-dist {o:.2f}x")
print(f"  the hook's speed-up / train-dist's: {hook / ours:.3f} (goal within 10%: "
      f"{'met' if abs(hook / ours - 1) <= 0.10 else 'not met'})")
PY
