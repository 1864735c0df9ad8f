#!/usr/bin/env bash
# compress-bench --what-if: a recorded run's plan (a metrics file written here with h5py) and
# a model's shapes priced on other links and world sizes. Every speedup and break-even
# bandwidth equals the alpha-beta formulas worked out here in Python from the levels' wire
# sizes (docs/metrics.md, "Data sent" and "What-if"); Top-k's allgather stops paying as the
# workers grow; bad input gets one error line and the documented exit code.
source "$(dirname "$0")/common.sh"
cd "$WORK"
"$ACC_PYTHON" -c 'import h5py, numpy' 2>/dev/null || { echo "skip: h5py and numpy are needed"; exit 0; }

# write_metrics FILE [LEVEL TEXT OF /levels[2]] [MODE] [STEPS...]: a run of a 4-parameter MLP on
# 2 ranks: epochs 0 and 1 with its matrices at powersgd:2, epoch 2 at topk:0.1 (or LEVEL); 10 ms
# of compute per step; encode and decode 1 and 0.5 ms per step at powersgd:2, 2 and 1 ms at topk.
write_metrics() {
    "$ACC_PYTHON" - "$@" <<'PY'
import sys, h5py, numpy as np
path = sys.argv[1]
third = sys.argv[2] if len(sys.argv) > 2 else "topk:0.1"
mode = sys.argv[3] if len(sys.argv) > 3 else "schedule"
steps = np.array([int(s) for s in sys.argv[4:]] or [100, 100, 50], dtype=np.int64)
names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
shapes = [(64, 32), (64,), (10, 64), (10,)]
with h5py.File(path, "w") as f:
    for k, v in {"format": "accordion.metrics", "format_version": "1.2", "model": "mlp", "dataset": "fashion-mnist",
                 "mode": mode, "backend": "gloo", "device": "cpu"}.items():
        f.attrs[k] = v
    f.attrs["world_size"] = np.int64(2)
    f.attrs["batch_size"] = np.int64(32)
    f.attrs["complete"] = np.int64(1)
    p = f.create_group("parameters")
    p["name"] = np.array(names, dtype=h5py.string_dtype())
    p["ndim"] = np.array([len(s) for s in shapes], dtype=np.int32)
    p["shape"] = np.array([list(s) + [0] * (2 - len(s)) for s in shapes], dtype=np.int64)
    p["numel"] = np.array([int(np.prod(s)) for s in shapes], dtype=np.int64)
    f["levels"] = np.array(["none", "powersgd:2", third], dtype=h5py.string_dtype())
    e = f.create_group("epochs")
    E = len(steps)
    e["epoch"] = np.arange(E, dtype=np.int64)
    e["level"] = np.array([[1, 0, 1, 0]] * (E - 1) + [[2, 0, 2, 0]], dtype=np.int32)
    e["steps"] = steps
    e["samples"] = steps * 64
    e["batch_size"] = np.full(E, 64, dtype=np.int64)
    # powersgd:2 sends 1656 bytes per step, topk:0.1 (and biases) 2440.
    per_step = np.array([1656] * (E - 1) + [2440], dtype=np.int64)
    e["bytes_sent"] = per_step * steps
    e["bytes_sent_total"] = np.cumsum(per_step * steps)
    e["floats_sent"] = e["bytes_sent"][:] / 4.0
    e["floats_sent_total"] = e["bytes_sent_total"][:] / 4.0
    for k in ["lr", "loss", "accuracy", "test_loss", "test_accuracy"]:
        e[k] = np.full(E, 0.1)
    e["compute_seconds"] = steps * 0.010
    e["encode_seconds"] = steps * np.array([0.001] * (E - 1) + [0.002])
    e["decode_seconds"] = steps * np.array([0.0005] * (E - 1) + [0.001])
    e["compression_seconds"] = e["encode_seconds"][:] + e["decode_seconds"][:]
    e["communication_seconds"] = steps * 0.002
    e["seconds"] = e["compute_seconds"][:] + e["compression_seconds"][:] + e["communication_seconds"][:]
PY
}
write_metrics run.h5 || fail "writing run.h5 with h5py"

compress-bench --what-if --metrics run.h5 --alpha 1e-4 --links 0.001,1 --world 2,8,64 --csv >run.csv 2>run.log ||
    fail "--what-if --metrics: $(cat run.log)"
grep -q "warn" run.log && fail "--what-if --metrics warned: $(cat run.log)"
compress-bench --what-if --metrics run.h5 --alpha 1e-4 --links 0.001,1 --world 2,8,64 >table.txt 2>/dev/null ||
    fail "--what-if's table"
compress-bench --what-if --metrics run.h5 --alpha 1e-4 --links 0.001,1 --world 2,8,64 --json >run.json 2>/dev/null ||
    fail "--what-if --json"

"$ACC_PYTHON" - <<'PY' || fail "the what-if of run.h5 does not follow the formulas"
import csv, json, math, sys
alpha, T = 1e-4, 0.010
ring_ar = lambda W, m, B: 2 * (W - 1) * alpha + 2 * (W - 1) / W * m / B
ring_ag = lambda W, m, B: (W - 1) * alpha + (W - 1) * m / B
dense = [64 * 32 * 4, 64 * 4, 10 * 64 * 4, 10 * 4]       # 11048 bytes: one DDP bucket, ready at the end
ddp = lambda W, B: T + ring_ar(W, sum(dense), B)
# powersgd:2: fc1 64x32 -> P 64x2, Q 32x2; fc2 10x64 -> P 10x2, Q 64x2; the biases as float32.
psgd = lambda W, B, e, d: T + e + d + ring_ar(W, 296, B) + ring_ar(W, 4 * (64 + 10) * 2, B) + ring_ar(W, 4 * (32 + 64) * 2, B)
# topk:0.1: k = floor(0.1 n): 204 and 64 entries, 8 bytes each, in one allgather.
topk = lambda W, B, e, d: T + e + d + ring_ar(W, 296, B) + ring_ag(W, 8 * (204 + 64), B)
expected = {
    "run": lambda W, B: (200 * psgd(W, B, 0.001, 0.0005) + 50 * topk(W, B, 0.002, 0.001)) / 250,
    "powersgd:2": lambda W, B: psgd(W, B, 0.001, 0.0005),   # the run sent exactly this in epochs 0-1
    "topk:0.1": lambda W, B: topk(W, B, 0.002, 0.001),      # and this in epoch 2
}
rows = list(csv.DictReader(open("run.csv")))
assert {r["plan"] for r in rows} == set(expected), {r["plan"] for r in rows}
assert len(rows) == 3 * 3 * 2, len(rows)
close = lambda a, b: abs(a - b) <= 1e-6 * abs(b)
for r in rows:
    W, B = int(r["world_size"]), float(r["bandwidth"])
    assert B in (0.001 * 1.25e8, 1.25e8), B
    want = expected[r["plan"]](W, B)
    assert close(float(r["seconds"]), want), (r, want)
    assert close(float(r["baseline_seconds"]), ddp(W, B)), r
    assert close(float(r["speedup"]), ddp(W, B) / want), r
    assert close(float(r["compute_seconds"]), T), r
# Break-even, closed form. powersgd:2: e + d + 4 (W-1) alpha = 2 (W-1)/W (11048 - 1656) / B.
for r in rows:
    W = int(r["world_size"])
    if r["plan"] == "powersgd:2":
        want = 2 * (W - 1) / W * (11048 - 1656) / (0.0015 + 4 * (W - 1) * alpha)
        assert close(float(r["break_even_bandwidth"]), want) and r["pays_at_low_bandwidth"] == "1", (r, want)
    if r["plan"] == "topk:0.1":
        # e + d + (W-1) alpha = [2 (W-1)/W (11048 - 296) - (W-1) 2144] / B: a crossing while W 2144 < 2 x 10752.
        c = 2 * (W - 1) / W * (11048 - 296) - (W - 1) * 2144
        if c > 0:
            want = c / (0.003 + (W - 1) * alpha)
            assert close(float(r["break_even_bandwidth"]), want) and r["pays_at_low_bandwidth"] == "1", (r, want)
        else:
            assert r["break_even_bandwidth"] == "" and r["pays_at_low_bandwidth"] == "0", r
# The times cross at the break-even bandwidth.
for r in rows:
    if r["break_even_bandwidth"]:
        B = float(r["break_even_bandwidth"])
        assert abs(expected[r["plan"]](int(r["world_size"]), B) / ddp(int(r["world_size"]), B) - 1) < 1e-9, r
# Top-k's speedup falls as the workers grow (its allgather grows with them); PowerSGD's allreduce does not.
slow = {(r["plan"], int(r["world_size"])): float(r["speedup"]) for r in rows if float(r["bandwidth"]) < 1e7}
assert slow[("topk:0.1", 2)] > slow[("topk:0.1", 8)] > slow[("topk:0.1", 64)], slow
assert slow[("topk:0.1", 64)] < 1 < slow[("topk:0.1", 8)], slow
assert slow[("powersgd:2", 64)] > 1, slow
j = json.load(open("run.json"))
assert j["run"]["world_size"] == 2 and j["run"]["steps"] == 250, j["run"]
assert [p["name"] for p in j["plans"]] == ["run", "powersgd:2", "topk:0.1"], j["plans"]
assert j["plans"][0]["levels"] == ["powersgd:2", "topk:0.1"] and j["plans"][0]["bytes_per_worker"] == (200 * 1656 + 50 * 2440) / 250
assert all(p["codec_measured"] for p in j["plans"])
assert abs(j["plans"][1]["worlds"][1]["break_even_bandwidths"][0] - 2 * 7 / 8 * 9392 / (0.0015 + 28e-4)) < 1e-3
assert j["plans"][2]["worlds"][2]["break_even_bandwidths"] == [] and not j["plans"][2]["worlds"][2]["pays_at_low_bandwidth"]
assert j["warnings"] == []
# The run's own step on the given link at its 2 ranks, against the measured 10 + 1.2 + 2 ms.
W, B = 2, 1.25e9
want = (200 * psgd(W, B, 0.001, 0.0005) + 50 * topk(W, B, 0.002, 0.001)) / 250
assert close(j["run"]["predicted_seconds_per_step"], want), j["run"]
assert close(j["run"]["seconds_per_step"], 0.010 + (200 * 0.0015 + 50 * 0.003) / 250 + 0.002), j["run"]
PY
grep -q "^Break-even bandwidth in Gbit/s" table.txt || fail "the table has no break-even section: $(cat table.txt)"
grep -Eq "^  topk:0.1 .* never$" table.txt || fail "the table does not say Top-k never pays on 64 workers: $(cat table.txt)"

# A model's shapes, with a level the run did not use: no codec time, the model's matrices at it.
printf 'fc1.weight 64x32\nfc1.bias 64\nfc2.weight 10x64\nfc2.bias 10\n' >model.txt
compress-bench --what-if --shapes model.txt --compressors fp16,dgc:0.5 --compute-ms 4 --compute-speed 2 \
    --alpha 0 --bandwidth 1e6 --world 4 --csv >shapes.csv 2>shapes.log || fail "--what-if --shapes: $(cat shapes.log)"
"$ACC_PYTHON" - <<'PY' || fail "the what-if of model.txt does not follow the formulas"
import csv
rows = {r["plan"]: r for r in csv.DictReader(open("shapes.csv"))}
T, B, W = 0.002, 1e6, 4       # 4 ms of compute, twice as fast
ar = lambda m: 2 * (W - 1) / W * m / B
ddp = T + ar(11048)
fp16 = T + ar(296) + ar(2 * (2048 + 640))
dgc = T + ar(296) + (W - 1) * 8 * (1024 + 320) / B
for name, want in (("fp16", fp16), ("dgc:0.5", dgc)):
    r = rows[name]
    assert float(r["bandwidth"]) == B and r["encode_seconds"] == "0", r
    assert abs(float(r["seconds"]) / want - 1) < 1e-7 and abs(float(r["speedup"]) / (ddp / want) - 1) < 1e-7, (r, want)
PY
# The same with the matrices' vectors compressed too, and a real run's file (train-dist's quickstart run).
compress-bench --what-if --shapes model.txt --compressors fp16 --vectors compress --alpha 0 --bandwidth 1e6 --world 4 \
    --json >vectors.json 2>/dev/null || fail "--what-if --vectors compress"
"$ACC_PYTHON" -c '
import json; j = json.load(open("vectors.json")); assert j["plans"][0]["bytes_per_worker"] == 11048 / 2, j' ||
    fail "--vectors compress does not halve every tensor at fp16"
kept="$ACC_SOURCE/docs/results/quickstart/accordion.h5"
if [ -f "$kept" ]; then
    compress-bench --what-if --metrics "$kept" --world 2,64 --json >kept.json 2>kept.log || fail "--what-if on $kept: $(cat kept.log)"
    "$ACC_PYTHON" -c '
import json; j = json.load(open("kept.json"))
assert j["plans"][0]["name"] == "run" and j["warnings"] == [] and j["compute_source"] == "run", j' ||
        fail "the what-if of the kept run"
fi

# The plotting script draws the CSV.
if "$ACC_PYTHON" -c 'import matplotlib' 2>/dev/null; then
    "$ACC_PYTHON" "$ACC_SOURCE/scripts/plot_what_if.py" mlp=run.csv -o run.png >/dev/null 2>plot.log ||
        fail "scripts/plot_what_if.py: $(cat plot.log)"
    [ -s run.png ] || fail "scripts/plot_what_if.py wrote no PNG"
fi

# docs/results.md's what-if figure: its CSV is what these programs predict (scripts/what-if-figure.sh
# again, the commit column aside), and its break-even table is the CSV's.
if "$ACC_PYTHON" -c 'import matplotlib' 2>/dev/null; then
    "$ACC_SOURCE/scripts/what-if-figure.sh" "$ACC_BIN" figure >figure-table.md 2>figure.log ||
        fail "scripts/what-if-figure.sh: $(cat figure.log)"
    "$ACC_PYTHON" - "$ACC_SOURCE/docs/results/what-if.csv" figure/what-if.csv <<'PY' ||
import csv, sys
kept, made = (list(csv.DictReader(open(p))) for p in sys.argv[1:])
assert len(kept) == len(made), (len(kept), len(made))
for a, b in zip(kept, made):
    for k in a:
        if k == "commit":
            continue
        x, y = a[k], b[k]
        try:
            same = abs(float(x) - float(y)) <= 1e-9 * max(abs(float(x)), abs(float(y)))
        except ValueError:
            same = x == y
        assert same, f"{k}: docs/results/what-if.csv has {x}, the programs predict {y} ({a['model']}, {a['plan']}, W={a['world_size']}); rerun scripts/what-if-figure.sh"
PY
        fail "docs/results/what-if.csv is not what the programs predict"
    awk '/^<!-- what-if table:/ { inside = 1; next } /^<!-- end of what-if table -->$/ { inside = 0 } inside' \
        "$ACC_SOURCE/docs/results.md" >docs-table.md
    [ -s docs-table.md ] || fail "docs/results.md has no what-if table"
    "$ACC_PYTHON" "$ACC_SOURCE/scripts/plot_what_if.py" "$ACC_SOURCE/docs/results/what-if.csv" --table >csv-table.md ||
        fail "plot_what_if.py --table"
    cmp -s docs-table.md csv-table.md || fail "docs/results.md's what-if table is not its CSV's: $(diff docs-table.md csv-table.md)"
fi

# Bad input: one line, the file or option first; 1 for a file, 2 for the command line.
echo "not a metrics file" >text.h5
expect_exit 1 "^compress-bench: error: text.h5: not an HDF5 file" -- compress-bench --what-if --metrics text.h5
expect_exit 1 "^compress-bench: error: missing.h5: no such file" -- compress-bench --what-if --metrics missing.h5
write_metrics bogus.h5 zip:3
expect_exit 1 "^compress-bench: error: bogus.h5: /levels entry 2 'zip:3' is not a level this toolkit knows" -- \
    compress-bench --what-if --metrics bogus.h5
write_metrics gravac.h5 topk:0.1 gravac
expect_exit 1 "^compress-bench: error: gravac.h5: is a GraVAC run" -- compress-bench --what-if --metrics gravac.h5
write_metrics idle.h5 topk:0.1 schedule 0 0 0
expect_exit 1 "^compress-bench: error: idle.h5: records no training steps" -- compress-bench --what-if --metrics idle.h5
expect_exit 2 "^compress-bench: error: --metrics: applies only with --what-if" -- compress-bench --metrics run.h5
expect_exit 2 "^compress-bench: error: --links: applies only with --what-if" -- compress-bench --links 10
expect_exit 2 "^compress-bench: error: --compute-speed: applies only with --what-if" -- compress-bench --compute-speed 2
expect_exit 2 "^compress-bench: error: --links: must be a number in \(0, 1e\+06\], not '0'" -- compress-bench --what-if --links 10,0
expect_exit 2 "^compress-bench: error: --links: must be a number in \(0, 1e\+06\], not '-1'" -- compress-bench --what-if --links=-1
expect_exit 2 "^compress-bench: error: --compute-speed: must be a number in \(0, 1e\+06\], not '0'" -- \
    compress-bench --what-if --compute-speed 0
expect_exit 2 "^compress-bench: error: --world: must be a whole number in \[1, 1000000\], not '0'" -- \
    compress-bench --what-if --world 0
expect_exit 2 "^compress-bench: error: --metrics and --shapes exclude each other" -- \
    compress-bench --what-if --metrics run.h5 --shapes resnet18
expect_exit 2 "^compress-bench: error: --bandwidth and --links exclude each other" -- \
    compress-bench --what-if --bandwidth 1e9 --links 10
expect_exit 2 "^compress-bench: error: --reps: does not apply with --what-if" -- compress-bench --what-if --reps 3
expect_exit 2 "^compress-bench: error: --output: does not apply with --what-if" -- compress-bench --what-if -o out.h5
expect_exit 2 "^compress-bench: error: --comm-model measured: does not apply with --what-if" -- \
    compress-bench --what-if --comm comm.h5 --comm-model measured
expect_exit 2 "^compress-bench: error: --compressors: 'zip' is not a compressor spec" -- \
    compress-bench --what-if --compressors zip
[ ! -e out.h5 ] || fail "a refused --what-if wrote out.h5"
finish
