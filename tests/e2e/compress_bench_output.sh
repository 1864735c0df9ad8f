#!/usr/bin/env bash
# compress-bench's outputs read back by code nobody here wrote: JSON and CSV with
# Python, the results file with h5py; sizes checked against docs/metrics.md's formulas.
source "$(dirname "$0")/common.sh"
cd "$WORK"
cat >model.txt <<'TXT'
# a small model
conv.weight 16x8x3x3
conv.bias 16
fc.weight 10x144
fc.bias 10
TXT
specs=none,fp16,powersgd:2,topk:0.05,randomk:0.1,dgc:0.05,signsgd,efsignsgd,qsgd:4,qsgd:200,terngrad,topk:1
compress-bench --shapes model.txt --compressors "$specs" --world 1,4 --reps 2 --alpha 1e-5 --bandwidth 1e9 \
    --compute-ms 5 -o bench.h5 --json >out.json 2>table.txt || fail "compress-bench on a shapes file"
grep -q "compressor .* W .* sent .* speedup pays" table.txt || fail "no table on stderr"
grep -Eq "^  powersgd:2 +4 " table.txt || fail "no powersgd:2 row for W=4 in the table"

# Columns line up whatever the values: tiny tensors give microsecond times and
# sign compressors large gains; a long spec and a large world widen their columns.
printf 'w 2x3\nb 1\n' >tiny.txt
compress-bench --shapes tiny.txt --compressors none,signsgd,randomk:0.123456789 --world 1,1000000 --reps 1 \
    --vectors compress 2>tiny-table.txt || fail "compress-bench on a tiny model"
sed -n '/^  compressor /,$p' tiny-table.txt | grep '^  [^ ]' | sed -E 's/ +[^ ]+$//' | awk '{print length}' | sort -u >widths.txt
[ "$(wc -l <widths.txt)" = 1 ] || fail "the table's columns do not line up: $(cat tiny-table.txt)"

$ACC_PYTHON - "$specs" <<'PY' || fail "JSON results"
import json, math, sys
specs = sys.argv[1].split(",")
r = json.load(open("out.json"))
shapes = {"conv.weight": (16, 8, 3, 3), "conv.bias": (16,), "fc.weight": (10, 144), "fc.bias": (10,)}
assert r["values"] == 16 * 72 + 16 + 1440 + 10 and r["parameters"] == 4
assert r["network"] == {"alpha": 1e-5, "bandwidth": 1e9, "allgather_alpha": 1e-5, "allgather_bandwidth": 1e9,
                        "source": "flags", "comm_profile": None, "comm_model": "fit"}, r["network"]
assert abs(r["compute_seconds"] - 0.005) < 1e-12 and r["memcpy_bandwidth"] > 1e8
assert len(r["results"]) == 2 * len(specs)

def kept(f, n):
    return min(n, max(1, math.floor(f * n)))

def wire(spec, shape):  # docs/metrics.md, "Data sent"
    n = math.prod(shape)
    name, _, p = spec.partition(":")
    if len(shape) < 2 or name == "none":  # vectors go uncompressed by default
        return 4 * n
    rows, cols = shape[0], n // shape[0]
    if name == "fp16": return 2 * n
    if name == "powersgd":
        r = min(int(p), rows, cols)
        return 4 * (rows + cols) * r if (rows + cols) * r * 2 < rows * cols else 4 * n
    if name in ("topk", "dgc"): return 8 * kept(float(p), n)
    if name == "randomk": return 4 * kept(float(p), n)
    if name == "signsgd": return 4 * math.ceil(n / 32)
    if name == "efsignsgd": return 4 * math.ceil(n / 32) + 4
    if name == "qsgd": return (1 if int(p) < 128 else 2) * n + 4 * math.ceil(n / 128)
    if name == "terngrad": return math.ceil(n / 4) + 4
    raise ValueError(spec)

dense = 4 * r["values"]
for row in r["results"]:
    spec = row["compressor"]
    want = sum(wire(spec, s) for s in shapes.values())
    assert row["bytes_per_worker"] == want, (spec, row["bytes_per_worker"], want)
    assert abs(row["compression_ratio"] - dense / want) < 1e-9 * dense / want
    for part in ("encode_seconds", "decode_seconds"):
        t = row[part]
        assert 0 <= t["min"] <= t["median"] <= t["max"], (spec, part, t)
    assert row["world_size"] in (1, 4)
    exact = spec in ("none", "topk:1")
    if exact:
        assert row["relative_error"] < 1e-6 and abs(row["cosine"] - 1) < 1e-6 and abs(row["gain"] - 1) < 1e-6, row
    if spec == "fp16":
        assert row["relative_error"] < 1e-3
    assert -1 <= row["cosine"] <= 1 + 1e-9
    base = row["baseline_iteration_seconds"]
    assert abs(row["speedup"] - base / row["iteration_seconds"]) < 1e-9 * row["speedup"]
    assert row["pays"] == (row["speedup"] > 1)
    if row["world_size"] == 1:
        assert row["comm_seconds"] == 0 and not row["pays"]
    else:
        assert row["comm_seconds"] > 0
base = {b["world_size"]: b for b in r["baseline"]}
assert base[1]["iteration_seconds"] == 0.005 and base[4]["iteration_seconds"] > 0.005
PY

$ACC_PYTHON - <<'PY' || fail "h5py reading bench.h5"
import h5py, json, numpy as np
r = json.load(open("out.json"))
with h5py.File("bench.h5", "r") as f:
    a = f.attrs
    assert a["format"] == "accordion.compress-bench" and a["format_version"] == "1.1", dict(a)
    assert a["comm_model"] == "fit", dict(a)
    assert a["producer"].startswith("compress-bench ") and "--compressors" in a["command_line"]
    assert a["source"] == "model.txt" and a["network_source"] == "flags" and a["vectors"] == "none"
    assert a["alpha"] == 1e-5 and a["bandwidth"] == 1e9 and a["reps"] == 2
    assert list(f["parameters/name"].asstr()[()]) == ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]
    assert list(f["inputs/name"].asstr()[()]) == ["synthetic"]
    res = f["results"]
    comp = list(res["compressor"].asstr()[()])
    assert comp == [x["compressor"] for x in r["results"]]
    for key in ("bytes_per_worker", "world_size"):
        np.testing.assert_array_equal(res[key][()], [x[key] for x in r["results"]])
    np.testing.assert_allclose(res["speedup"][()], [x["speedup"] for x in r["results"]])
    np.testing.assert_allclose(res["encode_seconds_median"][()], [x["encode_seconds"]["median"] for x in r["results"]])
    np.testing.assert_allclose(res["floats_per_worker"][()], res["bytes_per_worker"][()] / 4)
    assert res["input"].dtype == np.int64 and (res["input"][()] == 0).all()
PY
h5dump -a /format bench.h5 | grep -q '"accordion.compress-bench"' || fail "h5dump: format attribute"

compress-bench -q --shapes model.txt --compressors none,topk:0.05 --world 2 --reps 1 --csv >out.csv ||
    fail "compress-bench --csv"
$ACC_PYTHON - <<'PY' || fail "CSV results"
import csv
rows = list(csv.DictReader(open("out.csv")))
assert [r["compressor"] for r in rows] == ["none", "topk:0.05"], rows
assert all(r["input"] == "synthetic" and r["world_size"] == "2" for r in rows)
assert float(rows[0]["compression_ratio"]) == 1.0
assert float(rows[1]["speedup"]) > 0
PY

# The built-in ResNet-18 uses the names and shapes of examples/synth_grads.py.
compress-bench -q --shapes resnet18 --compressors signsgd --world 1 --reps 1 -o r18.h5 || fail "--shapes resnet18"
$ACC_PYTHON - "$ACC_SOURCE/examples" <<'PY' || fail "resnet18 preset differs from examples/synth_grads.py"
import sys, h5py
sys.path.insert(0, sys.argv[1])
from synth_grads import resnet18_cifar
with h5py.File("r18.h5", "r") as f:
    names = list(f["parameters/name"].asstr()[()])
    ndim = f["parameters/ndim"][()]
    shape = f["parameters/shape"][()]
want = resnet18_cifar()
assert names == [n for n, _ in want]
assert [tuple(shape[i][: ndim[i]]) for i in range(len(names))] == [s for _, s in want]
PY

# Real gradients: the snapshots of a grads.h5; a zero one gets a warning, not an error.
$ACC_PYTHON - <<'PY'
import h5py, numpy as np
rng = np.random.default_rng(1)
with h5py.File("grads.h5", "w") as f:
    f.attrs["format"] = "accordion.grads"
    f.attrs["format_version"] = "1.0"
    f["parameters/name"] = np.array(["fc.weight", "fc.bias"], dtype=h5py.string_dtype())
    f["parameters/ndim"] = np.array([2, 1], dtype=np.int32)
    f["parameters/shape"] = np.array([[64, 32], [64, 0]], dtype=np.int64)
    f["parameters/numel"] = np.array([2048, 64], dtype=np.int64)
    f["epochs/norm"] = np.ones((3, 2))
    f["epochs/lr"] = np.full(3, 0.1)
    f["epochs/steps"] = np.full(3, 10, dtype=np.int64)
    for e in (0, 2):
        g = f.create_group(f"snapshots/epoch_{e}")
        g.attrs["epoch"] = e
        g.attrs["steps"] = 10
        low_rank = np.outer(rng.standard_normal(64), rng.standard_normal(32)) if e == 0 else np.zeros((64, 32))
        g["fc.weight"] = low_rank.astype(np.float32)
        g["fc.bias"] = np.zeros(64, dtype=np.float32)
PY
compress-bench --from grads.h5 --compressors powersgd:1,none --world 2 --reps 1 --json >from.json 2>from.err ||
    fail "compress-bench --from"
grep -q "warning: input 'epoch 2' has zero norm" from.err || fail "no warning for a zero gradient"
$ACC_PYTHON - <<'PY' || fail "--from results"
import json
r = json.load(open("from.json"))
assert [i["name"] for i in r["inputs"]] == ["epoch 0", "epoch 2"]
rows = {(x["input"], x["compressor"]): x for x in r["results"]}
# A rank-1 gradient: rank-1 PowerSGD reproduces it.
assert rows[("epoch 0", "powersgd:1")]["relative_error"] < 1e-5, rows[("epoch 0", "powersgd:1")]
assert rows[("epoch 2", "powersgd:1")]["relative_error"] is None  # zero norm: undefined, written as null
PY
compress-bench -q --from grads.h5 --snapshots 2 --compressors none --world 1 --reps 1 --json >one.json ||
    fail "--snapshots"
grep -q '"epoch 2"' one.json && ! grep -q '"epoch 0"' one.json || fail "--snapshots 2 did not pick epoch 2 only"

# The network from a communication profile (written with h5py as docs/formats.md describes):
# 4 ranks, allreduce t(S) = 60 us + S / 1e9, allgather t(S) = 30 us + S / 2e9.
$ACC_PYTHON - <<'PY'
import h5py, numpy as np
with h5py.File("comm.h5", "w") as f:
    f.attrs["format"] = "accordion.comm-profile"
    f.attrs["format_version"] = "1.0"
    f.attrs["world_size"] = 4
    for name, alpha, bw, factor in (("allreduce", 60e-6, 1e9, 1.5), ("allgather", 30e-6, 2e9, 0.75)):
        g = f.create_group(f"collectives/{name}")
        size = np.array([1 << 20, 1 << 24], dtype=np.int64)
        t = alpha + size / bw
        g["size"] = size
        g["count"] = size // 4 // (4 if name == "allgather" else 1)
        g["time_min"], g["time_median"], g["time_max"] = t, t, t
        g["algbw"] = size / t
        g["busbw"] = size / t * factor
        g["wrong"] = np.full(2, -1, dtype=np.int64)
        g.attrs["bus_factor"] = factor
        g.attrs["alpha"] = alpha
        g.attrs["bandwidth"] = bw
        g.attrs["bus_bandwidth"] = bw * factor
PY
compress-bench --shapes model.txt --compressors none,signsgd --world 4 --reps 1 --comm comm.h5 --json -o comm-bench.h5     >comm.json 2>comm.err || fail "compress-bench --comm"
grep -q "network from comm.h5 (gloo, 4 ranks)" comm.err || fail "the table does not name the profile"
$ACC_PYTHON - <<'PY' || fail "--comm results"
import json, math, h5py
r = json.load(open("comm.json"))
n = r["network"]
assert n["source"] == "comm" and n["comm_profile"] == "comm.h5", n
# Per ring step: 60 us / (2 * 3) and 30 us / 3; per link: 1e9 * 1.5 and 2e9 * 0.75.
assert math.isclose(n["alpha"], 10e-6) and math.isclose(n["bandwidth"], 1.5e9), n
assert math.isclose(n["allgather_alpha"], 10e-6) and math.isclose(n["allgather_bandwidth"], 1.5e9), n
rows = {x["compressor"]: x for x in r["results"]}
# At the profiled world size the model gives back the profile's own times.
dense = rows["none"]["bytes_per_worker"]
assert math.isclose(rows["none"]["comm_seconds"], 60e-6 + dense / 1e9, rel_tol=1e-9), rows["none"]
signs = rows["signsgd"]["bytes_per_worker"] - 4 * (16 + 10)  # vectors travel in an allreduce
assert math.isclose(rows["signsgd"]["comm_seconds"], 60e-6 + 4 * (16 + 10) / 1e9 + 30e-6 + 4 * signs / 2e9,
                    rel_tol=1e-9), rows["signsgd"]
with h5py.File("comm-bench.h5", "r") as f:
    assert f.attrs["network_source"] == "comm" and f.attrs["comm_profile"] == "comm.h5"
    assert math.isclose(f.attrs["allgather_bandwidth"], 1.5e9)
PY
# The device path on CPU tensors (--path device) sends the same bytes with the same
# error as the host path, and its timing code runs.
device_specs=none,fp16,powersgd:2,topk:0.05,signsgd,qsgd:4,terngrad
for path in host device; do
    compress-bench --shapes model.txt --compressors "$device_specs" --world 2 --reps 2 --path "$path" --json \
        >"path-$path.json" 2>"path-$path.err" || fail "compress-bench --path $path"
done
grep -q "compressors: device path on the CPU" path-device.err || fail "--path device does not say which path ran"
$ACC_PYTHON - <<'PY' || fail "--path device differs from --path host"
import json, math
host, device = (json.load(open(f"path-{p}.json"))["results"] for p in ("host", "device"))
assert [r["compressor"] for r in host] == [r["compressor"] for r in device]
for h, d in zip(host, device):
    assert h["bytes_per_worker"] == d["bytes_per_worker"], (h, d)
    assert math.isclose(h["relative_error"], d["relative_error"], rel_tol=1e-4, abs_tol=1e-6), (h, d)
    assert d["encode_seconds"]["median"] > 0 and d["decode_seconds"]["median"] > 0, d
PY

# --trace: a trace of the timed steps (Chrome trace JSON): one range per compressor and
# world size holding its steps, each step's ATen operations inside; trace-summary.py
# reads it back (missing directories are made, as for --output).
compress-bench --shapes model.txt --compressors topk:0.05,powersgd:2 --world 1,4 --reps 3 --path device \
    --trace traces/bench.json 2>trace.err || fail "compress-bench --trace: $(cat trace.err)"
grep -q "wrote traces/bench.json (.* events)" trace.err || fail "--trace did not say what it wrote"
$ACC_PYTHON - <<'PY' || fail "the trace"
import json
events = json.load(open("traces/bench.json"))["traceEvents"]
assert all(e["ph"] == "X" and e["ts"] >= 0 and e["dur"] >= 0 for e in events), events[:3]
ranges = [e for e in events if e["cat"] == "range"]
rows = [e for e in ranges if e["name"] != "step"]
assert [r["name"] for r in rows] == ["topk:0.05 W=1", "topk:0.05 W=4", "powersgd:2 W=1", "powersgd:2 W=4"], rows
for row in rows:
    steps = [e for e in ranges if e["name"] == "step" and row["ts"] <= e["ts"] <= row["ts"] + row["dur"]]
    assert len(steps) == 3, (row, steps)
names = {e["name"] for e in events if e["cat"] == "operation"}
assert {"aten::topk", "aten::bmm"} <= names, sorted(names)[:20]
PY
# Which operations rank first depends on the machine's load: the full listing names bmm, --top 3 cuts it short.
$ACC_PYTHON "$ACC_SOURCE/scripts/trace-summary.py" traces/bench.json --top 1000 >summary.md ||
    fail "trace-summary.py on a trace"
for line in "### topk:0.05 W=1 (3 steps)" "### powersgd:2 W=4 (3 steps)" "| \`aten::bmm\` |" "| host operation | per step |"; do
    grep -qF -- "$line" summary.md || fail "trace-summary.py's summary lacks '$line': $(cat summary.md)"
done
$ACC_PYTHON "$ACC_SOURCE/scripts/trace-summary.py" traces/bench.json --top 3 >summary3.md ||
    fail "trace-summary.py --top 3 on a trace"
[ "$(grep -c '^| `' summary3.md)" -eq 12 ] || fail "--top 3 did not list 3 operations per compressor: $(cat summary3.md)"
finish
