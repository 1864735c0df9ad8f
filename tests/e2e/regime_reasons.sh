#!/usr/bin/env bash
# Why an epoch is critical: regime-detect's summary (and --json) gives the
# rule's reason per run of critical epochs, and scripts/plot_regimes.py shades
# the epochs a learning-rate decay makes critical apart from the others.
source "$(dirname "$0")/common.sh"
cd "$WORK"
"$ACC_PYTHON" "$ACC_SOURCE/examples/synth_grads.py" -o grads.h5 --epochs 300 2>/dev/null
regime-detect grads.h5 -o sched.h5 --json >report.json 2>err || { fail "regime-detect"; cat err >&2; }
grep -q "^  why critical:" err || { fail "the summary does not say why epochs are critical"; cat err >&2; }
grep -Eq "^    epochs 0-10: first interval \(epochs 0-10 are always critical\)" err || fail "no first-interval line"
grep -Eq "^    epochs? [0-9-]+: .*the learning rate drops from [0-9.e-]+ to [0-9.e-]+ at epoch 151" err ||
    { fail "no line names the learning-rate decay at epoch 151 (synth_grads.py drops it after 150)"; cat err >&2; }
"$ACC_PYTHON" - <<'PY' || fail "--json's critical_reasons"
import json
r = json.load(open("report.json"))["critical_reasons"]
assert r[0]["first"] == 0 and r[0]["reasons"][0]["reason"] == "first interval", r[0]
decays = [x for x in r if x.get("decay_epoch") == 151]
assert decays and decays[0]["first"] == 151, decays
assert any(y["reason"] == "learning-rate decay" for y in decays[0]["reasons"]), decays
assert all(x["text"].startswith("epoch") for x in r), r
PY

"$ACC_PYTHON" "$ACC_SOURCE/scripts/plot_regimes.py" grads.h5 sched.h5 -o regimes.png 2>err || { fail "plot_regimes.py"; cat err >&2; }
[ -s regimes.png ] || fail "regimes.png was not written"
"$ACC_PYTHON" - "$ACC_SOURCE/scripts" <<'PY' || fail "plot_regimes.py does not shade learning-rate decays apart"
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import plot_regimes as pr
import matplotlib.pyplot as plt
# Reasons: epochs 0-2 first interval (2), 3 rate (1), 6 decay (4), for two counted columns.
reason = np.array([[2, 2], [2, 2], [2, 2], [1, 0], [0, 0], [0, 0], [4, 4], [0, 0]])
critical = reason > 0
decay = pr.decay_epochs(reason, [0, 1], None, 2)
assert list(decay) == [False] * 6 + [True, False], decay
# Without reasons, from the learning rates: a drop at epoch 6 makes 6 (up to the next decision) critical.
lr = np.array([0.1] * 6 + [0.01] * 2)
assert list(pr.decay_epochs(None, [0, 1], lr, 2)) == list(decay)
fig, ax = plt.subplots()
pr.shade(ax, critical.any(axis=1), decay, True)
labels = [p.get_label() for p in ax.patches]
assert labels == ["critical: rate of change or first interval", "critical: learning-rate decay"], labels
red, blue = ax.patches
assert red.get_hatch() is None and blue.get_hatch() == "//", (red.get_hatch(), blue.get_hatch())
assert red.get_facecolor()[:3] != blue.get_facecolor()[:3]
PY
finish
