#!/usr/bin/env bash
# comm-profile on 2 local ranks: the table, CSV, JSON and HDF5 outputs agree
# with each other and with nccl-tests' definitions, h5py reads the file, and an
# independent least-squares fit (numpy) gives the same alpha and bandwidth.
source "$(dirname "$0")/common.sh"
cd "$WORK"
# Up to 2 MiB, so that the time clearly grows with the size and the fit is
# away from its alpha >= 0 and B > 0 boundaries.
sweep=(-b 8 -e 2M -f 4 -n 5 -w 1 --collectives allreduce,allgather,broadcast)

comm-profile --nproc 2 "${sweep[@]}" --check -o comm.h5 --json >report.json 2>table.txt ||
    fail "comm-profile --json exited with $?: $(tail -3 table.txt)"
# 8 B .. 2 MiB by 4: 10 rows per collective, on rank 0's standard error.
rows=$(grep -cE '^\[0\] +[0-9]+ +[0-9]+ +float +([0-9.]+ +){6}0$' table.txt || true)
[ "$rows" = 30 ] || fail "expected 30 checked table rows, got $rows"
grep -q '^\[0\] #       size       count    type   time min   time med   time max  time mean      algbw      busbw  #wrong$' table.txt ||
    fail "table header missing"
grep -qE '^\[0\] # allreduce fit t\(S\) = alpha \+ S/B: alpha [0-9.]+ us, B ([0-9.e+]+ GB/s \(busbw|unbounded)' table.txt || fail "no allreduce fit line"
grep -q '^\[0\] # Wrong values: 0 OK$' table.txt || fail "no wrong-values line"
grep -q "^\[1\]" table.txt && fail "rank 1 printed: $(grep '^\[1\]' table.txt | head -2)"

comm-profile --nproc 2 "${sweep[@]}" --csv -q >report.csv 2>csv-err.txt || fail "comm-profile --csv exited with $?"
[ -s csv-err.txt ] && fail "-q still printed: $(head -3 csv-err.txt)"

"$ACC_PYTHON" - <<'PY' || fail "outputs disagree (see above)"
import csv, json, math
import h5py, numpy as np

j = json.load(open("report.json"))
f = h5py.File("comm.h5", "r")
assert f.attrs["format"] == "accordion.comm-profile", f.attrs["format"]
assert f.attrs["format_version"] == "1.3"
assert f.attrs["agg_iters"] == 1 and j["agg_iters"] == 1  # each call timed alone by default
assert f.attrs["producer"].startswith("comm-profile ")
assert "--nproc 2" in f.attrs["command_line"]
assert f.attrs["world_size"] == 2 and j["world_size"] == 2
assert f.attrs["backend"] == "gloo" and f.attrs["checked"] == 1
assert len(f["hosts"]) == 2
assert j["wrong"] == 0 and j["output"] == "comm.h5"

factors = {"allreduce": 1.0, "allgather": 0.5, "broadcast": 1.0}
per_rank = {"allreduce": 1, "allgather": 2, "broadcast": 1}
assert sorted(f["collectives"].keys()) == sorted(factors)
assert [c["name"] for c in j["collectives"]] == ["allreduce", "allgather", "broadcast"]

def fit(s, t):
    # Weighted least squares, weights 1/t^2, with alpha >= 0 and B > 0 (docs/metrics.md).
    w = 1 / t**2
    A = np.vstack([np.ones_like(s), s]).T * np.sqrt(w)[:, None]
    alpha, beta = np.linalg.lstsq(A, t * np.sqrt(w), rcond=None)[0]
    if beta <= 0:
        return np.sum(w * t) / np.sum(w), 0.0
    if alpha < 0:
        return 0.0, np.sum(w * s * t) / np.sum(w * s * s)
    return alpha, beta

for c in j["collectives"]:
    name = c["name"]
    g = f["collectives"][name]
    rows = c["results"]
    assert len(rows) == 10, (name, len(rows))
    assert list(g["size"][:]) == [r["size"] for r in rows]
    assert g.attrs["bus_factor"] == factors[name] == c["bus_factor"]
    for i, r in enumerate(rows):
        assert r["size"] == 4 * r["count"] * per_rank[name], (name, r)
        assert g["time_min"][i] <= g["time_median"][i] <= g["time_max"][i]
        assert g["time_min"][i] <= g["time_mean"][i] <= g["time_max"][i]
        assert math.isclose(r["time_median_s"], g["time_median"][i], rel_tol=1e-12)
        assert math.isclose(r["time_mean_s"], g["time_mean"][i], rel_tol=1e-12)
        assert math.isclose(r["algbw_Bps"], r["size"] / r["time_median_s"], rel_tol=1e-12)
        assert math.isclose(r["busbw_Bps"], factors[name] * r["algbw_Bps"], rel_tol=1e-12)
        assert r["wrong"] == 0 and g["wrong"][i] == 0
    s = g["size"][:].astype(float)
    t = g["time_median"][:]
    alpha, beta = fit(s, t)
    assert math.isclose(g.attrs["alpha"], alpha, rel_tol=1e-6, abs_tol=1e-12), (name, g.attrs["alpha"], alpha)
    assert math.isclose(1 / g.attrs["bandwidth"], beta, rel_tol=1e-6, abs_tol=1e-18), (name, g.attrs["bandwidth"], beta)
    assert math.isclose(g.attrs["bus_bandwidth"], factors[name] * g.attrs["bandwidth"], rel_tol=1e-12)
    assert math.isclose(c["fit"]["alpha_s"], g.attrs["alpha"], rel_tol=1e-12, abs_tol=1e-15)
    assert g.attrs["fit_points"] == 10

# The CSV run measured the same sweep.
lines = list(csv.DictReader(open("report.csv")))
assert len(lines) == 30, len(lines)
assert lines[0]["collective"] == "allreduce" and lines[0]["size_bytes"] == "8" and lines[0]["wrong"] == ""
assert [l["size_bytes"] for l in lines if l["collective"] == "allgather"] == [str(r["size"]) for r in j["collectives"][1]["results"]]
for l in lines:
    assert math.isclose(float(l["algbw_Bps"]), int(l["size_bytes"]) / float(l["time_median_s"]), rel_tol=1e-6)
    assert float(l["time_min_s"]) <= float(l["time_mean_s"]) <= float(l["time_max_s"]), l
PY

# One rank needs no rendezvous; allgather's bus factor (n-1)/n is then 0.
comm-profile -b 1K -e 4K -n 2 -w 0 --collectives allgather --csv -o one.h5 >one.csv 2>one-err.txt || fail "a single rank failed"
grep -q '^allgather,4096,1024,float32,.*,0,$' one.csv || fail "single-rank allgather row: $(tail -1 one.csv)"
"$ACC_PYTHON" -c '
import h5py
g = h5py.File("one.h5", "r")["collectives/allgather"]
assert g.attrs["bus_factor"] == 0 and g.attrs["bus_bandwidth"] == 0 and g.attrs["bandwidth"] > 0
' || fail "single-rank file"

# -m 3: each timed iteration issues three calls back to back; the banner, the JSON
# and the file say so, and the times stay per call.
comm-profile --nproc 2 -b 8 -e 64 -f 8 -n 2 -w 0 -m 3 --collectives allreduce --json -o agg.h5 >agg.json 2>agg-err.txt ||
    fail "comm-profile -m 3 exited with $?: $(tail -3 agg-err.txt)"
grep -q "2 timed iterations of 3 back-to-back calls after 0 warm-up per size; each time is the slowest rank's mean per call" agg-err.txt ||
    fail "the banner does not tell -m 3: $(head -3 agg-err.txt)"
"$ACC_PYTHON" -c '
import json, h5py
j = json.load(open("agg.json"))
assert j["agg_iters"] == 3 and h5py.File("agg.h5", "r").attrs["agg_iters"] == 3
assert [r["size"] for r in j["collectives"][0]["results"]] == [8, 64]
' || fail "-m 3 is not recorded"
finish
