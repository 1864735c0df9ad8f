#!/usr/bin/env bash
# examples/pipeline.sh end to end on a slice of Fashion-MNIST: grad-dump,
# regime-detect and four train-dist runs on 2 ranks (low, high, the schedule
# replayed, Accordion online), the comparison table and the plots; then batch
# mode; then compare_runs.py's and plot_runs.py's errors.
source "$(dirname "$0")/common.sh"
cd "$WORK"
slice=(--train-samples 2000 --test-samples 500)
bash "$ACC_SOURCE/examples/pipeline.sh" --out comp --epochs 3 --interval 1 --online --plots -- "${slice[@]}" \
    >out 2>err || { fail "pipeline (compression)"; cat err >&2; }
for f in grads.h5 sched.h5 low.h5 high.h5 accordion.h5 online.h5 table.txt regimes.png runs.png; do
    [ -s "comp/$f" ] || fail "comp/$f was not written"
done
grep -q "pipeline took" err || fail "no closing line on stderr"
$ACC_PYTHON - <<'PY' || fail "the compression runs do not compare as they should"
import h5py
sent = {n: h5py.File(f"comp/{n}.h5", "r")["epochs/floats_sent_total"][-1] for n in ("low", "high", "accordion", "online")}
levels = {n: [l.decode() for l in h5py.File(f"comp/{n}.h5", "r")["levels"][()]] for n in ("low", "high")}
assert levels == {"low": ["none", "powersgd:2"], "high": ["none", "powersgd:1"]}, levels
# The first interval is critical: replay and online start at the low level, so
# they send more than the high level and at most what the low level sends.
for n in ("accordion", "online"):
    assert sent["high"] < sent[n] <= sent["low"], sent
table = open("comp/table.txt").read().splitlines()
assert table[0].split()[:3] == ["run", "test", "accuracy"], table
rows = {line.split()[0]: line for line in table[1:]}
assert set(rows) == {"low", "high", "accordion", "online"}, table
assert "(1.00x)" in rows["low"], rows["low"]
factor = sent["low"] / sent["high"]
assert f"({factor:.2f}x)" in rows["high"], (factor, rows["high"])
assert "%" in rows["accordion"].split()[-1], rows["accordion"]  # share of critical parameter-epochs
print(table)
PY

bash "$ACC_SOURCE/examples/pipeline.sh" --out batch --mode batch --low 64 --high 256 --epochs 3 --interval 1 --monotone \
    -- "${slice[@]}" >out 2>err || { fail "pipeline (batch)"; cat err >&2; }
$ACC_PYTHON - <<'PY' || fail "the batch runs do not use the batch sizes they should"
import h5py
batch = {n: list(h5py.File(f"batch/{n}.h5", "r")["epochs/batch_size"][()]) for n in ("low", "high", "accordion")}
assert batch["low"] == [64] * 3 and batch["high"] == [256] * 3, batch
assert batch["accordion"][0] == 64, batch  # the first interval is critical
lr = {n: h5py.File(f"batch/{n}.h5", "r")["epochs/lr"][0] for n in ("low", "high")}
assert abs(lr["high"] - 4 * lr["low"]) < 1e-12, lr  # the learning rate scales with the batch
PY

expect_exit 2 "--mode: expected compression or batch" -- bash "$ACC_SOURCE/examples/pipeline.sh" --mode fast
expect_exit 2 "^pipeline.sh: error: $WORK/missing/python3 cannot import h5py, numpy, matplotlib, which the comparison needs: set ACC_PYTHON to a Python that can$" -- \
    env ACC_PYTHON="$WORK/missing/python3" bash "$ACC_SOURCE/examples/pipeline.sh" --out x --plots
[ ! -e x ] || fail "pipeline.sh made its output directory before refusing"
expect_exit 2 "batch sizes must split over 2 ranks" -- bash "$ACC_SOURCE/examples/pipeline.sh" --out x --mode batch --low 65 --high 256
expect_exit 2 "--online: train-dist decides compression levels online" -- bash "$ACC_SOURCE/examples/pipeline.sh" --mode batch --online
expect_exit 1 "comp/grads.h5: not an accordion.metrics file" -- $ACC_PYTHON "$ACC_SOURCE/scripts/compare_runs.py" a=comp/grads.h5
expect_exit 1 "nothing.h5" -- $ACC_PYTHON "$ACC_SOURCE/scripts/compare_runs.py" a=nothing.h5
expect_exit 1 "low.h5: expected LABEL=FILE" -- $ACC_PYTHON "$ACC_SOURCE/scripts/plot_runs.py" comp/low.h5
expect_exit 1 "--baseline: no run is labelled 'x'" -- $ACC_PYTHON "$ACC_SOURCE/scripts/compare_runs.py" --baseline x a=comp/low.h5
finish
