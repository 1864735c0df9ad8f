# comm-profile --device cuda on one rank (NCCL): every collective's results are
# exact (--check), the file says NCCL, the times are the device's (an 8-byte
# collective takes far less than the millisecond the stream is held before it, so
# neither that hold nor the host's time to queue it is counted), no timing reached
# the GPU before the host had queued its collective, and the process group is
# destroyed before exit.
source "$(dirname "$0")/common.sh"
require_cuda
cd "$WORK"

if ! comm-profile --device cuda -b 8 -e 16M -f 8 -n 10 -w 2 --check \
    --collectives allreduce,allgather,broadcast,reduce_scatter -o comm.h5 --json >report.json 2>err.txt; then
    fail "comm-profile --device cuda failed:"
    sed 's/^/    /' err.txt >&2
    finish
fi
grep -q "before the host had queued" err.txt && fail "timings include the host's time to queue: $(grep -m1 queued err.txt)"
no_teardown_warning err.txt
no_device_guess err.txt
"$ACC_PYTHON" - <<'PY' || fail "comm-profile's NCCL figures (see above)"
import json
import h5py

j = json.load(open("report.json"))
f = h5py.File("comm.h5", "r")
assert f.attrs["backend"] == "nccl", f.attrs["backend"]
assert f.attrs["checked"] == 1 and j["wrong"] == 0, j["wrong"]
assert [c["name"] for c in j["collectives"]] == ["allreduce", "allgather", "broadcast", "reduce_scatter"]
for c in j["collectives"]:
    rows = c["results"]
    assert len(rows) == 8, (c["name"], len(rows))  # 8 B .. 16 MiB by 8
    assert all(r["wrong"] == 0 for r in rows), c["name"]
    small = rows[0]["time_median_s"]
    assert 0 < small < 300e-6, f"{c['name']} of {rows[0]['size']} B: {small * 1e6:.1f} us"
PY
finish
