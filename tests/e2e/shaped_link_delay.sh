#!/usr/bin/env bash
# A shaped link with a delay (scripts/shaped-link.sh's third argument): where
# the kernel has tc's netem, the delay must show in comm-profile's fitted
# latency; where it has not, the link must be refused with that reason and no
# network namespace left behind.
source "$(dirname "$0")/common.sh"
use_shaped_link
ip netns add "${SHAPED_TAG}probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "${SHAPED_TAG}probe"

cd "$WORK"
if ! shaped_link_up 200mbit 50ms 5ms; then
    echo "refused: $SHAPED_WHY"
    [[ $SHAPED_WHY == *"netem is not in this kernel"* ]] || fail "refused for another reason: $SHAPED_WHY"
    ip netns list | grep -q "^$SHAPED_TAG" && fail "the refused link left namespaces: $(ip netns list | grep "^$SHAPED_TAG" | tr '\n' ' ')"
    finish
    exit 0
fi
# Each allreduce step crosses the link once each way or more: at least 5 ms.
got=0
SHAPED_RANK1_LOG=rank1.err shaped_ranks "$ACC_BIN/comm-profile" --collectives allreduce -b 1K -e 64K -n 5 -w 1 \
    --timeout 60 -o comm.h5 2>rank0.err || got=$?
[ "$got" = 0 ] || fail "a rank failed (exit $got): $(tail -2 rank0.err) $(tail -2 rank1.err)"
"$ACC_PYTHON" - <<'PY' || fail "the fitted latency does not show the 5 ms delay"
import h5py
alpha = h5py.File("comm.h5", "r")["collectives/allreduce"].attrs["alpha"]
print(f"fitted allreduce latency {alpha * 1e3:.2f} ms with 5 ms of delay each way")
assert alpha >= 0.005
PY
finish
