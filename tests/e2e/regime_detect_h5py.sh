#!/usr/bin/env bash
# regime-detect reads a gradient-statistics file written with h5py from
# docs/formats.md alone, and its schedules agree with an independent Python
# implementation of the rule, read back with h5py; h5dump reads them too.
source "$(dirname "$0")/common.sh"

synth="$ACC_PYTHON $ACC_SOURCE/examples/synth_grads.py"
check="$ACC_PYTHON $ACC_SOURCE/tests/e2e/check_schedule.py"

$synth -o "$WORK/grads.h5" --epochs 300
cd "$WORK"
for args in "" "--eta 0.3 --interval 5" "--granularity model" "--low topk:0.99 --high topk:0.1" \
            "--mode batch" "--mode batch --monotone --low 256 --high 2048" "--eta 1e-9" "--eta 1e6"; do
    # shellcheck disable=SC2086
    regime-detect grads.h5 -o sched.h5 $args -q || fail "regime-detect $args"
    $check grads.h5 sched.h5 || fail "schedule of '$args' disagrees with the rule"
done

# The forced critical epochs of the synthetic run: the first interval and the decays after 150 and 250.
regime-detect grads.h5 -o sched.h5 --eta 1e6 --json >summary.json 2>/dev/null
$ACC_PYTHON - <<'PY' || fail "JSON summary with a huge eta"
import json
s = json.load(open("summary.json"))
regimes = [(r["first"], r["last"]) for r in s["critical_regimes"]]
assert regimes == [(0, 10), (151, 160), (251, 260)], regimes
assert s["epochs"] == 300 and s["parameters"] == 62 and s["values"] == 11173962, s
assert s["counted_parameters"] == 21
c = s["communication"]
assert c["low"] > c["schedule"] > c["high"] > 0, c
PY

# A file with a tiny model, whose schedule h5dump prints.
$synth -o tiny.h5 --model tiny --epochs 25
regime-detect tiny.h5 -o tiny-sched.h5 -q
h5dump -A tiny-sched.h5 >dump.txt || fail "h5dump cannot read the schedule"
grep -q '"accordion.schedule"' dump.txt || fail "h5dump does not show the format attribute"
h5dump -d /levels tiny-sched.h5 | grep -q '"powersgd:2"' || fail "h5dump does not show the levels"
h5dump -d /epochs/level tiny-sched.h5 | grep -q 'DATASPACE  SIMPLE { ( 25, 4 )' || fail "h5dump: /epochs/level is not 25x4"
finish
