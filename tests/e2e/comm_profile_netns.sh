#!/usr/bin/env bash
# Ground truth for the alpha-beta fit: two network namespaces joined by a veth
# pair shaped to 200 Mbit/s with tc's token bucket filter (tbf), one rank in
# each. The fitted allreduce bus bandwidth must be within 15% of the shaped
# rate (25e6 bytes/s; for 2 ranks busbw is what each rank sends per second).
# Needs root; all traffic stays inside the namespaces the test creates, which
# it removes on every exit path.
source "$(dirname "$0")/common.sh"
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs ip and tc (iproute2)"

tag=acc$$
ns0=${tag}a ns1=${tag}b
cleanup() {
    kill -KILL $(jobs -p) 2>/dev/null || true
    ip netns del "$ns0" 2>/dev/null || true
    ip netns del "$ns1" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add "$ns0" 2>/dev/null || skip "cannot create network namespaces here"
ip netns add "$ns1"
ip link add "${tag}0" type veth peer name "${tag}1"
ip link set "${tag}0" netns "$ns0"
ip link set "${tag}1" netns "$ns1"
ip -n "$ns0" addr add 10.231.7.1/24 dev "${tag}0"
ip -n "$ns1" addr add 10.231.7.2/24 dev "${tag}1"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "${tag}0" up
ip -n "$ns1" link set "${tag}1" up
for side in 0 1; do
    ns=$ns0
    [ "$side" = 1 ] && ns=$ns1
    ip netns exec "$ns" tc qdisc add dev "${tag}$side" root tbf rate 200mbit burst 32kb latency 50ms ||
        skip "tc cannot add a tbf qdisc here"
done

cd "$WORK"
# From 256 KiB up, the 32 KiB token bucket's burst no longer matters.
sweep=(--collectives allreduce -b 256K -e 8M -n 5 -w 1 --master-addr 10.231.7.1 --master-port 29500 --world-size 2 --timeout 60)
ip netns exec "$ns1" "$ACC_BIN/comm-profile" --rank 1 "${sweep[@]}" -q 2>rank1.err &
rank1=$!
got=0
ip netns exec "$ns0" "$ACC_BIN/comm-profile" --rank 0 "${sweep[@]}" -o comm.h5 2>rank0.err || got=$?
wait "$rank1" || fail "rank 1 failed: $(tail -2 rank1.err)"
[ "$got" = 0 ] || fail "rank 0 failed: $(tail -2 rank0.err)"
cat rank0.err
"$ACC_PYTHON" - <<'PY' || fail "the fitted bandwidth is not within 15% of the shaped 200 Mbit/s"
import h5py
g = h5py.File("comm.h5", "r")["collectives/allreduce"]
shaped = 200e6 / 8
busbw = g.attrs["bus_bandwidth"]
print(f"fitted allreduce busbw {busbw / 1e6:.2f} MB/s, shaped {shaped / 1e6:.1f} MB/s, "
      f"ratio {busbw / shaped:.3f}, R^2 {g.attrs['r2']:.4f}")
assert abs(busbw / shaped - 1) <= 0.15
PY
finish
