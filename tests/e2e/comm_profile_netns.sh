#!/usr/bin/env bash
# Ground truth for the alpha-beta fit: two network namespaces joined by a veth
# pair shaped to 200 Mbit/s with tc's token bucket filter (tbf), one rank in
# each. The fitted allreduce bus bandwidth must be within 15% of the shaped
# rate (25e6 bytes/s; for 2 ranks busbw is what each rank sends per second).
# Needs root; all traffic stays inside the namespaces the test creates, which
# it removes on every exit path.
source "$(dirname "$0")/common.sh"
use_shaped_link
shaped_link_up 200mbit 50ms || skip "$SHAPED_WHY"

cd "$WORK"
# From 256 KiB up, the 32 KiB token bucket's burst no longer matters: --fit-from fits the
# bandwidth there and the latency from the smaller sizes.
got=0
SHAPED_RANK1_LOG=rank1.err shaped_ranks "$ACC_BIN/comm-profile" --collectives allreduce -b 4K -e 8M -n 5 -w 1 \
    --fit-from 256K --timeout 60 -o comm.h5 2>rank0.err || got=$?
[ "$got" = 0 ] || fail "a rank failed (exit $got): $(tail -2 rank0.err) $(tail -2 rank1.err)"
cat rank0.err
"$ACC_PYTHON" - <<'PY' || fail "the fitted bandwidth is not within 15% of the shaped 200 Mbit/s"
import h5py
g = h5py.File("comm.h5", "r")["collectives/allreduce"]
shaped = 200e6 / 8
busbw = g.attrs["bus_bandwidth"]
print(f"fitted allreduce busbw {busbw / 1e6:.2f} MB/s, shaped {shaped / 1e6:.1f} MB/s, "
      f"ratio {busbw / shaped:.3f}, R^2 {g.attrs['r2']:.4f}")
assert abs(busbw / shaped - 1) <= 0.15
assert g.attrs["fit_from"] == 256 * 1024, g.attrs["fit_from"]
assert g.attrs["fit_points"] == 6, g.attrs["fit_points"]  # 256 KiB .. 8 MiB
assert g.attrs["alpha"] > 0, g.attrs["alpha"]  # the latency of the sizes below, not 0
import numpy as np
small = g["size"][:] < 256 * 1024
assert g.attrs["alpha"] == np.median(g["time_mean"][:][small]), "alpha is not the median of the small sizes' mean times"
PY
grep -q "B over the 6 sizes from 256 KiB on (--fit-from)" rank0.err || fail "the table does not say how it fitted"
finish
