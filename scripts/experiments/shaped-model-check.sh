#!/usr/bin/env bash
# The network model against measured exchange times on a shaped link: two network
# namespaces joined by a veth pair that tc's token bucket shapes to RATE (32 KB
# burst), one rank in each. comm-profile measures the link (allreduce and
# allgather, 8 B to 8 MiB, 20 timed iterations) and fits it past the burst
# (--fit-from 256K: the latency is the median of the smaller sizes' mean times),
# timing collectives 4 back to back (-m 4) as a step's exchange issues them; then, for
# the mlp and the cnn, train-dist trains with each level (dense, powersgd:2,
# topk:0.1) and compress-bench predicts the exchange's time per step from the fit
# (--comm, world 2, the models' parameter shapes, the compute time per step the
# run measured). The table compares the model's communication per step with the
# one train-dist measured (its second epoch's communication seconds over its
# 60 steps, of the rank that waited least for the other: for a compressed level every
# collective, for dense what the backward pass did not hide, which the model's DDP
# schedule predicts; rank 0's beside it), and writes both to OUT/model-check.csv,
# and every profile's times size by size to OUT/profiles.csv; then, per model and level,
# the medians over the repeats of the modelled and the measured exchange; both tables
# are printed and kept in OUT/tables.md.
# Beside it, the same model with a fit of calls timed one at a time after a barrier
# (-m 1, comm-isolated.h5): what the latency of a call alone predicts; and the model
# pricing a collective between two measured sizes by their times (compress-bench
# --comm-model measured, from comm.h5); and the fit of comm.h5 with the latency
# comm-profile fitted before its file's version 1.3, the median of the small sizes'
# median times (comm-median.h5, a copy with that alpha).
# The ranks wait for each other inside the collectives, and the rank that arrives
# first counts that wait: on a machine busy with other work it, not the link, can
# decide rank 0's figure.
# Needs root, ip and tc. About 10 minutes a repeat on an idle 2-core machine. The files of an
# earlier run in OUT are kept: remove OUT to measure anew.
#
# The whole measurement (the link's fit and every run) is repeated REPEATS times, into
# OUT/repeat<R>/, since the link's time for small messages varies from one
# measurement to the next; the table has a row per repeat, model and level.
#
#   scripts/experiments/shaped-model-check.sh [OUT] [RATE]    defaults: build/model-check 100mbit
# ACC_BUILD_DIR: the build whose programs run [build]; REPEATS: [3]; LEVELS: the
# levels trained [none powersgd:2 topk:0.1]; MAX_BYTES: the profile's largest size
# [8M] (PowerSGD's exchange alone needs no more than 1M).
set -euo pipefail
main() {
    here=$(cd "$(dirname "$0")/../.." && pwd)
    source "$here/scripts/python.sh"
    source "$here/scripts/shaped-link.sh"
    python=$(acc_python)
    out=${1:-$here/build/model-check}
    rate=${2:-100mbit}
    repeats=${REPEATS:-3}
    [[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "shaped-model-check.sh: error: REPEATS=$repeats: a number of repeats, 1 or more" >&2; exit 2; }
    bin=${ACC_BUILD_DIR:-$here/build}/bin  # the programs of that build, else those on PATH
    [ -x "$bin/train-dist" ] && PATH=$bin:$PATH
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    trap shaped_link_down EXIT
    shaped_link_up "$rate" || { echo "shaped-model-check.sh: no shaped link here: $SHAPED_WHY" >&2; exit 1; }
    read -r -a levels <<<"${LEVELS:-none powersgd:2 topk:0.1}"
    [ "${#levels[@]}" -gt 0 ] || { echo "shaped-model-check.sh: error: LEVELS is empty: name a level or more" >&2; exit 2; }
    max_bytes=${MAX_BYTES:-8M}
    for r in $(seq 1 "$repeats"); do
        dir=$out/repeat$r
        mkdir -p "$dir"
        echo "repeat $r of $repeats:" >&2
        measure
    done
    "$python" - "$out" "$repeats" "${levels[@]}" <<'PY'
import json, sys, h5py
out, repeats, levels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = ["repeat,model,level,compute_seconds,modelled_seconds,measured_seconds,rank0_seconds,error,"
        "allreduce_alpha_seconds,allreduce_bytes_per_second,allgather_alpha_seconds,allgather_bytes_per_second,"
        "isolated_modelled_seconds,isolated_error,isolated_allreduce_alpha_seconds,isolated_allgather_alpha_seconds,"
        "measured_times_modelled_seconds,measured_times_error,"
        "median_alpha_modelled_seconds,median_alpha_error,median_allreduce_alpha_seconds,median_allgather_alpha_seconds"]
def fitted(repeat, profile, attributes):
    """The CSV's text of a repeat's fit: each collective's `attributes`, in order."""
    with h5py.File(f"{out}/repeat{repeat}/{profile}.h5", "r") as f:
        return ",".join(repr(float(f["collectives/" + c].attrs[a])) for c in ("allreduce", "allgather")
                        for a in attributes)
for repeat in range(1, repeats + 1):
    # The repeat's fits of the link (comm-profile's, past the burst), which the model used:
    # calls back to back (comm.h5), alone (comm-isolated.h5), with the medians' latency.
    link = fitted(repeat, "comm", ("alpha", "bandwidth"))
    isolated_alphas = fitted(repeat, "comm-isolated", ("alpha",))
    median_alphas = fitted(repeat, "comm-median", ("alpha",))
    for model in ("mlp", "cnn"):
        for level in levels:
            run = f"{out}/repeat{repeat}/{model}-{level.replace(':', '-')}"
            e = h5py.File(run + ".h5", "r")["epochs"]
            steps = float(e["steps"][-1])
            # The rank that waited least for the other: its time is the closest to the link's.
            measured = float(min(e["rank_communication_seconds"][-1])) / steps
            rank0 = float(e["communication_seconds"][-1]) / steps
            compute = float(e["compute_seconds"][-1]) / steps
            def modelled_by(suffix):
                r = [r for r in json.load(open(f"{run}-model{suffix}.json"))["results"] if r["world_size"] == 2][0]
                # What the compute does not hide, less the compression's own time: the collectives
                # train-dist waits for (all of them, for a compressed level).
                coding = r["encode_seconds"]["median"] + r["decode_seconds"]["median"]
                return max(0.0, r["iteration_seconds"] - compute - coding) if level == "none" else r["comm_seconds"]
            modelled, isolated, tabled, by_median = (modelled_by(s) for s in ("", "-isolated", "-measured", "-median"))
            error, isolated_error, tabled_error, median_error = (m / measured - 1
                                                                 for m in (modelled, isolated, tabled, by_median))
            rows.append(f"{repeat},{model},{level},{compute!r},{modelled!r},{measured!r},{rank0!r},{error!r},{link},"
                        f"{isolated!r},{isolated_error!r},{isolated_alphas},{tabled!r},{tabled_error!r},"
                        f"{by_median!r},{median_error!r},{median_alphas}")
open(f"{out}/model-check.csv", "w").write("\n".join(rows) + "\n")
# Every repeat's profiles, size by size, from which a reader recomputes the fits' alphas.
sizes = ["repeat,profile,collective,size_bytes,time_min_s,time_median_s,time_max_s,time_mean_s"]
for repeat in range(1, repeats + 1):
    for profile in ("comm", "comm-isolated"):
        with h5py.File(f"{out}/repeat{repeat}/{profile}.h5", "r") as f:
            for name, g in f["collectives"].items():
                for row in zip(*(g[d][()] for d in ("size", "time_min", "time_median", "time_max", "time_mean"))):
                    sizes.append(f"{repeat},{profile},{name},{int(row[0])}," + ",".join(repr(float(t)) for t in row[1:]))
open(f"{out}/profiles.csv", "w").write("\n".join(sizes) + "\n")
PY
    # The tables, as docs/results.md gives them and made the same way (OUT/tables.md): a row per
    # repeat, model and level; then per model and level over the repeats, the medians of the
    # modelled and the measured exchange.
    printf '<!-- table: %s -->\n<!-- end of table -->\n\n' model-check model-check-medians >"$out/tables.md"
    "$python" "$here/scripts/results-tables.py" --doc "$out/tables.md" --data "$out" >/dev/null
    grep -v '^<!--' "$out/tables.md"
}
# One repeat into $dir: the link's fit, the runs and the model's predictions.
measure() {
    export SHAPED_RANK1_LOG=$dir/rank1.log
    # Files of an earlier run are kept (remove OUT to measure anew).
    local fit m variant suffix how
    for fit in comm:4 comm-isolated:1; do
        m=${fit#*:} fit=${fit%:*}
        [ -f "$dir/$fit.h5" ] && continue
        echo "comm-profile -m $m over the $rate link ..." >&2
        shaped_ranks comm-profile --collectives allreduce,allgather -b 8 -e "$max_bytes" -n 20 -w 2 -m "$m" --fit-from 256K \
            -o "$dir/$fit.h5" --force 2> "$dir/$fit-profile.log"
        grep "fit" "$dir/$fit-profile.log" >&2
    done
    # comm.h5 with the latency comm-profile fitted before its file's version 1.3: the median of the small
    # sizes' median times (its own alpha is the median of their mean times).
    [ -f "$dir/comm-median.h5" ] || "$python" - "$dir/comm.h5" "$dir/comm-median.h5" <<'PY'
import shutil, sys, h5py, numpy as np
shutil.copyfile(sys.argv[1], sys.argv[2] + ".tmp")
with h5py.File(sys.argv[2] + ".tmp", "r+") as f:
    for g in f["collectives"].values():
        small = g["size"][()] < g.attrs["fit_from"]
        g.attrs["alpha"] = float(np.median(g["time_median"][()][small]))
shutil.move(sys.argv[2] + ".tmp", sys.argv[2])
PY
    for model in mlp cnn; do
        for level in "${levels[@]}"; do
            [ -f "$dir/$model-${level//:/-}.h5" ] && continue
            echo "train-dist $model $level ..." >&2
            # 60 steps an epoch (batch 128 per rank); the second epoch is measured: 180 of
            # PowerSGD's small collectives, whose time varies from call to call.
            shaped_ranks train-dist --model "$model" --dataset fashion-mnist --epochs 2 --train-samples 15360 \
                --test-samples 500 --batch-size 128 --lr 0.05 --momentum 0.9 --threads 1 --seed 1 \
                --compress "$level" --metrics "$dir/$model-${level//:/-}.h5" --force -q \
                2> "$dir/$model-${level//:/-}.log"
        done
        # The model's parameter shapes, for compress-bench.
        "$python" - "$dir/$model-${levels[0]//:/-}.h5" > "$dir/$model.shapes" <<'PY'
import sys, h5py
p = h5py.File(sys.argv[1], "r")["parameters"]
for name, ndim, shape in zip(p["name"][()], p["ndim"][()], p["shape"][()]):
    print(name.decode(), "x".join(str(d) for d in shape[:ndim]) if ndim else "1")
PY
        # Each level's model with the compute time its run measured (second epoch, per step):
        # the uncompressed buckets' collectives overlap the backward pass there.
        for level in "${levels[@]}"; do
            run=$dir/$model-${level//:/-}
            compute_ms=$("$python" -c "import h5py, sys; e = h5py.File(sys.argv[1], 'r')['epochs']
print(1e3 * float(e['compute_seconds'][-1]) / float(e['steps'][-1]))" "$run.h5")
            # run-model.json: comm.h5's fit; -isolated: comm-isolated.h5's fit; -measured: comm.h5's
            # measured times between its sizes (--comm-model measured); -median: comm-median.h5's fit.
            for variant in :comm:fit -isolated:comm-isolated:fit -measured:comm:measured -median:comm-median:fit; do
                IFS=: read -r suffix fit how <<<"$variant"
                compress-bench --shapes "$dir/$model.shapes" --compressors "$level" --world 2 --comm "$dir/$fit.h5" \
                    --comm-model "$how" --compute-ms "$compute_ms" --reps 3 --json \
                    > "$run-model$suffix.json" 2> "$run-model$suffix.log"
            done
        done
    done
}

main "$@"
