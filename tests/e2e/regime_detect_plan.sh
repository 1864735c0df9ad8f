#!/usr/bin/env bash
# regime-detect --plan on a profile grad-dump recorded on two ranks: every epoch
# stays within the error of Accordion's levels, recomputed with numpy from the
# profile; the floats per step it predicts follow from the levels and shapes,
# never exceed Accordion's and are less in some epoch; train-dist replays the
# schedule and sends exactly what was predicted; with --comm the modelled time
# is never above Accordion's; and each bad input gets one clear error.
source "$(dirname "$0")/common.sh"
cd "$WORK"
train=(--model mlp --hidden-size 64 --train-samples 1200 --test-samples 200 --batch-size 24 --threads 1
       --lr 0.05 --momentum 0.9 --lr-decay-epochs 3 --seed 3 --nproc 2)
candidates=powersgd:1,powersgd:2,powersgd:4,powersgd:8,none

grad-dump "${train[@]}" --epochs 5 --profile -o grads.h5 2>dump.log || { fail "grad-dump"; cat dump.log >&2; }
regime-detect grads.h5 --interval 1 --eta 0.3 -o accordion.h5 -q || fail "regime-detect without --plan"
regime-detect grads.h5 --interval 1 --eta 0.3 --plan "$candidates" -o plan.h5 --json >plan.json 2>plan.log ||
    { fail "regime-detect --plan"; cat plan.log >&2; }
grep -Eq "planned in total: .* floats per worker vs Accordion's .* \(([0-9.]+)x less\)" plan.log ||
    fail "no totals in the summary: $(cat plan.log)"
grep -Eq "^ +epochs? [0-9-]+: .* floats/step vs .* \(1\.[0-9]+x less\)$" plan.log || fail "no per-epoch lines: $(cat plan.log)"

ACC_E2E_DIR="$ACC_SOURCE/tests/e2e" $ACC_PYTHON - <<'PY' || fail "the plan breaks its budget or mispredicts what it sends"
import json, math, os, sys
import h5py
import numpy as np
sys.path.insert(0, os.environ["ACC_E2E_DIR"])
from train_dist_check import bytes_per_step

report = json.load(open("plan.json"))
plan = report["plan"]
g, s, a = h5py.File("grads.h5", "r"), h5py.File("plan.h5", "r"), h5py.File("accordion.h5", "r")
names = list(g["parameters/name"].asstr()[()])
shapes = [tuple(int(d) for d in row[:n]) for row, n in zip(g["parameters/shape"][()], g["parameters/ndim"][()])]
levels, table = list(s["levels"].asstr()[()]), s["epochs/level"][()]
accordion = [[list(a["levels"].asstr()[()])[i] for i in row] for row in a["epochs/level"][()]]
assert levels[0] == "none" and set(levels) <= {"none", "powersgd:1", "powersgd:2", "powersgd:4", "powersgd:8"}, levels
assert plan["candidates"] == ["powersgd:1", "powersgd:2", "powersgd:4", "powersgd:8", "none"], plan["candidates"]
assert plan["error"] == "summed_norms" and plan["budget_factor"] == 1 and plan["cost"] == "floats", plan
np.testing.assert_array_equal(s["epochs/critical"][()], a["epochs/critical"][()])

def residual(level, p, q):
    """The residual norm of a level on parameter p's summed gradient of epoch q, from the spectrum."""
    if level == "none":
        return 0.0
    rank = int(level.split(":")[1])
    rows = shapes[p][0]
    cols = int(np.prod(shapes[p])) // rows
    r = min(rank, rows, cols)
    if not (rows + cols) * r * 2 < rows * cols:  # PowerSGD sends it whole
        return 0.0
    sv = g[f"profile/singular_values/{names[p]}"][q]
    return math.sqrt(float(np.sum(sv[rank:] ** 2)))

cheaper = 0
for e, row in enumerate(plan["epochs"]):
    q = max(e - 1, 0)
    assert row["epoch"] == e and row["profile_epoch"] == q, row
    chosen = [levels[i] for i in table[e]]
    matrices = [p for p in range(len(names)) if len(shapes[p]) > 1]
    assert all(chosen[p] == "none" for p in range(len(names)) if p not in matrices), chosen
    budget = sum(residual(accordion[e][p], p, q) for p in matrices)
    error = sum(residual(chosen[p], p, q) for p in matrices)
    assert math.isclose(row["budget"], budget, rel_tol=1e-9), (e, row["budget"], budget)
    assert math.isclose(row["error"], error, rel_tol=1e-9, abs_tol=1e-12), (e, row["error"], error)
    assert error <= budget * (1 + 1e-12), (e, error, budget)
    floats = sum(bytes_per_step(chosen[p], shapes[p]) for p in range(len(names))) / 4
    uniform = sum(bytes_per_step(accordion[e][p], shapes[p]) for p in range(len(names))) / 4
    assert row["floats_per_step"] == floats and row["uniform_floats_per_step"] == uniform, (e, row, floats, uniform)
    assert floats <= uniform, (e, floats, uniform)
    if row["kept_uniform"]:
        assert chosen == accordion[e], (e, chosen, accordion[e])
    else:
        assert floats < uniform, (e, floats, uniform)
        cheaper += 1
assert cheaper >= 1, plan["epochs"]
steps = g["epochs/steps"][()]
total = sum(r["floats_per_step"] * n for r, n in zip(plan["epochs"], steps))
assert plan["total"]["floats"] == total and report["communication"]["schedule"] == total, (plan["total"], total)
PY

# train-dist replays the schedule unchanged and sends exactly what was predicted.
mkdir ck
train-dist "${train[@]}" --epochs 5 --schedule plan.h5 --metrics metrics.h5 --checkpoint-dir ck >replay.log 2>&1 ||
    { fail "train-dist --schedule plan.h5"; tail -5 replay.log >&2; }
$ACC_PYTHON "$ACC_SOURCE/tests/e2e/train_dist_check.py" levels metrics.h5 plan.h5 || fail "the replay did not follow the plan"
$ACC_PYTHON - <<'PY' || fail "the replay sent other than the planner predicted"
import json
import h5py
plan = json.load(open("plan.json"))["plan"]
m = h5py.File("metrics.h5", "r")
sent, steps = m["epochs/floats_sent"][()], m["epochs/steps"][()]
assert len(sent) == len(plan["epochs"]), (sent, plan["epochs"])
for e, row in enumerate(plan["epochs"]):
    assert sent[e] == row["floats_per_step"] * steps[e], (e, sent[e], row["floats_per_step"], steps[e])
assert m["epochs/floats_sent_total"][-1] == plan["total"]["floats"], (m["epochs/floats_sent_total"][-1], plan["total"])
PY

# Costed on a measured network: the modelled exchange is never slower than Accordion's.
comm-profile -q --nproc 2 --collectives allreduce,allgather -b 4K -e 1M -n 3 -w 1 -o comm.h5 || fail "comm-profile"
comm-profile -q --nproc 2 --collectives allreduce -b 4K -e 1M -n 3 -w 1 -o comm-allreduce.h5 || fail "comm-profile"
regime-detect grads.h5 --interval 1 --eta 0.3 --plan powersgd:1,powersgd:2,powersgd:4,topk:0.01,topk:0.1 --comm comm.h5 \
    --plan-error summed_squares --plan-budget-factor 2 -o timed.h5 --json >timed.json 2>timed.log ||
    { fail "regime-detect --plan --comm"; cat timed.log >&2; }
grep -q "planned in total: modelled exchange .* s vs .* s (.*x faster)" timed.log || fail "no modelled totals: $(cat timed.log)"
$ACC_PYTHON - <<'PY' || fail "the timed plan is slower than Accordion's levels"
import json
plan = json.load(open("timed.json"))["plan"]
assert plan["cost"] == "seconds" and plan["error"] == "summed_squares" and plan["budget_factor"] == 2, plan
for row in plan["epochs"]:
    assert 0 < row["cost_per_step"] <= row["uniform_cost_per_step"], row
    assert row["error"] <= row["budget"] * (1 + 1e-12), row
assert plan["total"]["cost"] <= plan["total"]["uniform_cost"], plan["total"]
PY

# Bad input, one clear error each.
plan=(--plan "$candidates" -o bad.h5)
strip() {  # strip NAME PYTHON: a copy of grads.h5 as NAME, changed by PYTHON (f is the file)
    cp grads.h5 "$1"
    $ACC_PYTHON -c "import h5py
f = h5py.File('$1', 'r+')
$2" || fail "cannot write $1"
}
strip noprofile.h5 'del f["profile"]'
expect_exit 1 "^regime-detect: error: noprofile.h5: holds no compressibility profile \(/profile\), which --plan needs; record one with grad-dump --profile$" -- \
    regime-detect noprofile.h5 "${plan[@]}"
strip noparameter.h5 'del f["profile/singular_values/fc2.weight"]'
expect_exit 1 "^regime-detect: error: noparameter.h5: dataset /profile/singular_values/fc2.weight is missing" -- \
    regime-detect noparameter.h5 "${plan[@]}"
strip noepoch.h5 'v = f["profile/topk_tail"][:3]; del f["profile/topk_tail"]; f["profile/topk_tail"] = v'
expect_exit 1 "^regime-detect: error: noepoch.h5: /profile/topk_tail has shape 3x6x9, expected 5x6x9" -- \
    regime-detect noepoch.h5 "${plan[@]}"
strip fourranks.h5 'f.attrs["world_size"] = 4'
expect_exit 1 "^regime-detect: error: comm.h5: was measured on 2 ranks, but the gradients were recorded on 4" -- \
    regime-detect fourranks.h5 "${plan[@]}" --comm comm.h5
expect_exit 1 "^regime-detect: error: comm-allreduce.h5: has no allgather profile, which the Top-k levels need" -- \
    regime-detect grads.h5 --plan powersgd:1,topk:0.01 --comm comm-allreduce.h5 -o bad.h5
expect_exit 2 "^regime-detect: error: --plan: no candidate levels" -- regime-detect grads.h5 --plan "" -o bad.h5
expect_exit 2 "^regime-detect: error: --plan: an empty level in 'powersgd:1,,powersgd:2'" -- \
    regime-detect grads.h5 --plan powersgd:1,,powersgd:2 -o bad.h5
expect_exit 2 "^regime-detect: error: --plan: topk:0.02 cannot be planned: the profile holds Top-k tails only at the fractions 0.0001, .*, 1$" -- \
    regime-detect grads.h5 --plan powersgd:1,topk:0.02 -o bad.h5
expect_exit 2 "^regime-detect: error: --plan: qsgd:127 cannot be planned: no error model for it; plannable levels are none, powersgd:RANK and topk:F with F in 0.0001, .*, 1$" -- \
    regime-detect grads.h5 --plan powersgd:1,qsgd:127 -o bad.h5
expect_exit 2 "^regime-detect: error: --low: fp16 cannot be planned: no error model for it" -- \
    regime-detect grads.h5 --plan powersgd:1 --low fp16 -o bad.h5
expect_exit 2 "^regime-detect: error: --plan: plans compression levels; it does not apply to --mode batch" -- \
    regime-detect grads.h5 --plan powersgd:1 --mode batch -o bad.h5
expect_exit 2 "^regime-detect: error: --comm: applies only with --plan" -- regime-detect grads.h5 --comm comm.h5 -o bad.h5
[ ! -e bad.h5 ] || fail "a refused plan left bad.h5"

finish
