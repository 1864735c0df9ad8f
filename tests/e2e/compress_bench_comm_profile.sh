#!/usr/bin/env bash
# compress-bench on the network comm-profile measured: two local ranks profile the
# loopback, and compress-bench's model reproduces the profile's fitted times.
source "$(dirname "$0")/common.sh"
cd "$WORK"
comm-profile -q --nproc 2 --collectives allreduce,allgather -b 4K -e 4M -n 3 -w 1 -o comm.h5 ||
    fail "comm-profile --nproc 2"
printf 'fc.weight 256x512\nfc.bias 256\n' >model.txt
compress-bench -q --shapes model.txt --comm comm.h5 --compressors none,topk:0.01 --world 2,8 --reps 1 --json >out.json ||
    fail "compress-bench --comm"
$ACC_PYTHON - <<'PY' || fail "the model does not follow the profile"
import json, math, h5py
# JSON has no infinity: a profile whose time did not grow with the size (a loaded
# machine can measure that on loopback) has an infinite bandwidth, written as null.
r = json.load(open("out.json"), object_hook=lambda d: {k: math.inf if v is None else v for k, v in d.items()})
with h5py.File("comm.h5", "r") as f:
    n = int(f.attrs["world_size"])
    ar, ag = (f["collectives"][c].attrs for c in ("allreduce", "allgather"))
    net = r["network"]
    assert net["source"] == "comm" and n == 2 and net["comm_profile"] == "comm.h5"
    assert math.isclose(net["alpha"], ar["alpha"] / (2 * (n - 1)), rel_tol=1e-9), net
    assert math.isclose(net["bandwidth"], ar["bandwidth"] * 2 * (n - 1) / n, rel_tol=1e-9), net
    assert math.isclose(net["allgather_alpha"], ag["alpha"] / (n - 1), rel_tol=1e-9), net
    rows = {(x["compressor"], x["world_size"]): x for x in r["results"]}
    # At the profiled world size: the fitted t(S) of the allreduce of everything.
    none = rows[("none", 2)]
    assert math.isclose(none["comm_seconds"], ar["alpha"] + none["bytes_per_worker"] / ar["bandwidth"], rel_tol=1e-9)
    # Top-k's payload goes through the allgather fit (S = both ranks' parts), the vector through the allreduce.
    topk = rows[("topk:0.01", 2)]
    gathered = topk["bytes_per_worker"] - 4 * 256
    want = ar["alpha"] + 4 * 256 / ar["bandwidth"] + ag["alpha"] + n * gathered / ag["bandwidth"]
    assert math.isclose(topk["comm_seconds"], want, rel_tol=1e-9), (topk["comm_seconds"], want)
    assert rows[("none", 8)]["comm_seconds"] > none["comm_seconds"]
PY

# --comm-model measured: at the profiled world size a collective whose size lies
# between two measured sizes costs their times interpolated; elsewhere the fit.
compress-bench -q --shapes model.txt --comm comm.h5 --comm-model measured --compressors none,topk:0.01 --world 2,8 \
    --reps 1 --json >measured.json || fail "compress-bench --comm-model measured"
$ACC_PYTHON - <<'PY' || fail "the measured times are not what the model prices with"
import json, math, h5py, numpy as np
fit = {(x["compressor"], x["world_size"]): x for x in json.load(open("out.json"))["results"]}
r = json.load(open("measured.json"))
assert r["network"]["comm_model"] == "measured", r["network"]
rows = {(x["compressor"], x["world_size"]): x for x in r["results"]}
with h5py.File("comm.h5", "r") as f:
    n = int(f.attrs["world_size"])
    ar, ag = (f["collectives"][c] for c in ("allreduce", "allgather"))
    def measured(g, size):
        return float(np.interp(size, g["size"][()], g["time_median"][()]))
    # The dense allreduce of 513 KiB lies between two measured sizes (4 KiB .. 4 MiB).
    none = rows[("none", 2)]
    assert math.isclose(none["comm_seconds"], measured(ar, none["bytes_per_worker"]), rel_tol=1e-9), none
    # Top-k: the 1 KiB vector below the first measured size (the fit), the payload's allgather measured.
    topk = rows[("topk:0.01", 2)]
    gathered = topk["bytes_per_worker"] - 4 * 256
    want = ar.attrs["alpha"] + 4 * 256 / ar.attrs["bandwidth"] + measured(ag, n * gathered)
    assert math.isclose(topk["comm_seconds"], want, rel_tol=1e-9), (topk["comm_seconds"], want)
# At another world size, the fit as before.
for c in ("none", "topk:0.01"):
    assert math.isclose(rows[(c, 8)]["comm_seconds"], fit[(c, 8)]["comm_seconds"], rel_tol=1e-9), c
PY
expect_exit 2 "^compress-bench: error: --comm-model measured: needs --comm, whose measured times it prices with$" -- \
    compress-bench --comm-model measured --compressors none --world 2
expect_exit 2 "^compress-bench: error: --comm-model: .*fit" -- compress-bench --comm comm.h5 --comm-model table
finish
