# Sourced by the scripts that run two ranks over a real, slow link: two network
# namespaces joined by a veth pair whose both ends tc's token bucket filter
# shapes to a rate. No traffic leaves the namespaces. Needs root, ip and tc.
#
#   source scripts/shaped-link.sh
#   shaped_link_up 100mbit || echo "no shaped link here: $SHAPED_WHY"
#   shaped_link_up 20mbit 100ms 5ms  # the same, every packet also held 5 ms each way
#   shaped_ranks PROGRAM OPTIONS...   # rank 1 in the second namespace, rank 0 in the first
#   shaped_link_down                  # put it in the caller's EXIT trap too
#
# shaped_ranks adds --rank, --world-size 2, --master-addr and --master-port, and
# returns rank 0's exit code (rank 1's if rank 0 succeeded); rank 1's stdout and
# stderr go to $SHAPED_RANK1_LOG [/dev/null].

SHAPED_TAG=accs$$
SHAPED_NS=("${SHAPED_TAG}a" "${SHAPED_TAG}b")
SHAPED_ADDR=(10.231.9.1 10.231.9.2)
SHAPED_WHY=""

# shaped_link_up RATE [LATENCY] [DELAY]: RATE as tc writes it (100mbit); LATENCY
# is the most a packet may wait in the bucket [100ms]; DELAY (5ms), when given,
# holds every packet that long on each side, through tc's netem with the bucket
# under it (kernels without netem are refused: no link is left half made).
shaped_link_up() {
    local rate=$1 latency=${2:-100ms} delay=${3:-} side
    if [ "$(id -u)" != 0 ]; then SHAPED_WHY="needs root"; return 1; fi
    if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then SHAPED_WHY="needs ip and tc (iproute2)"; return 1; fi
    if ! ip netns add "${SHAPED_NS[0]}" 2>/dev/null; then SHAPED_WHY="cannot create network namespaces here"; return 1; fi
    ip netns add "${SHAPED_NS[1]}"
    ip link add "${SHAPED_TAG}0" netns "${SHAPED_NS[0]}" type veth peer name "${SHAPED_TAG}1" netns "${SHAPED_NS[1]}"
    for side in 0 1; do
        local in_ns=(ip netns exec "${SHAPED_NS[$side]}")
        "${in_ns[@]}" ip addr add "${SHAPED_ADDR[$side]}/24" dev "${SHAPED_TAG}$side"
        "${in_ns[@]}" ip link set dev lo up
        "${in_ns[@]}" ip link set dev "${SHAPED_TAG}$side" up
        local bucket_at=(root)
        if [ -n "$delay" ]; then
            if ! "${in_ns[@]}" tc qdisc add dev "${SHAPED_TAG}$side" root handle 1: netem delay "$delay" 2>/dev/null; then
                SHAPED_WHY="cannot delay packets by $delay: tc's netem is not in this kernel"
                shaped_link_down
                return 1
            fi
            bucket_at=(parent 1:1)
        fi
        if ! "${in_ns[@]}" tc qdisc add dev "${SHAPED_TAG}$side" "${bucket_at[@]}" tbf rate "$rate" burst 32kb latency "$latency"; then
            SHAPED_WHY="tc cannot add a tbf qdisc here"
            shaped_link_down
            return 1
        fi
    done
}

shaped_link_down() {
    local ns
    for ns in "${SHAPED_NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}

# shaped_ranks PROGRAM OPTIONS...: one rank of PROGRAM in each namespace.
shaped_ranks() {
    local program=$1 rank1 rc0=0 rc1=0
    shift
    local world=(--world-size 2 --master-addr "${SHAPED_ADDR[0]}" --master-port 29531)
    ip netns exec "${SHAPED_NS[1]}" "$program" --rank 1 "${world[@]}" "$@" >"${SHAPED_RANK1_LOG:-/dev/null}" 2>&1 &
    rank1=$!
    ip netns exec "${SHAPED_NS[0]}" "$program" --rank 0 "${world[@]}" "$@" || rc0=$?
    wait "$rank1" || rc1=$?
    [ "$rc0" != 0 ] && return "$rc0"
    return "$rc1"
}
