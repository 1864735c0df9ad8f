#!/usr/bin/env bash
# Who can reach the rendezvous store, and what a stranger can do there: the
# store listens on loopback for --nproc and on the master address otherwise
# (never on every interface), and a process without the run's token can
# neither read the members, nor plant a rank or an error message, nor join.
source "$(dirname "$0")/common.sh"
cd "$WORK"
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
long=(-b 8 -e 32M -n 300 -w 1 --collectives allreduce)

# listening PORT: the local addresses something listens on at PORT, one a line,
# as ss writes them; from /proc/net/tcp{,6} where ss (iproute2) is missing.
listening() {
    if command -v ss >/dev/null; then
        ss -ltnH "sport = :$1" | awk '{print $4}'
        return
    fi
    "$ACC_PYTHON" - "$1" <<'PY'
import ipaddress, sys
port = int(sys.argv[1])
for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
    try:
        lines = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
            continue
        raw = bytes.fromhex(address)  # 32-bit words, each written in the host's byte order
        if sys.byteorder == "little":
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
        ip = ipaddress.ip_address(raw)
        if width == 4:
            print(f"{ip}:{port}")
        else:
            print(f"[::ffff:{ip.ipv4_mapped}]:{port}" if ip.ipv4_mapped else f"[{ip}]:{port}")
PY
}

# stranger HOST PORT read|plant|torch: a process without the run's token as a
# client of the store (tests/e2e/store_stranger.py): read fails if it reads a
# key; plant writes keys where it is let in; torch is PyTorch's own TCPStore
# client, which the store turns away.
stranger() { "$ACC_PYTHON" "$ACC_SOURCE/tests/e2e/store_stranger.py" "$3" "$1" "$2" >/dev/null; }

# --nproc: the store listens on loopback only, under a token only the ranks know.
comm-profile --nproc 2 -v --timeout 30 "${long[@]}" >/dev/null 2>nproc.err &
launcher=$!
wait_for_line nproc.err '^(\[0\] )? +[0-9]+ +[0-9]+ +float' 60 || fail "no table row from --nproc 2: $(tail -3 nproc.err)"
port=$(grep -oE 'rendezvous at 127\.0\.0\.1:[0-9]+' nproc.err | grep -oE '[0-9]+$')
addresses=$(listening "$port")
[ -n "$addresses" ] || fail "nothing listens on the store's port $port"
echo "$addresses" | grep -vqE '^(127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]):' && fail "--nproc's store listens beyond loopback: $addresses"
stranger 127.0.0.1 "$port" read || fail "a stranger read the members of a --nproc run"
kill -TERM "$launcher"
wait "$launcher" || true

# By hand, with ACC_RUN_TOKEN: the store listens on the master address only; a
# stranger's keys change nothing, a rank with another token is turned away
# with a message that says why, and rank 0 reports it missing
# (tests/e2e/store_stranger.sh tries more of what a stranger can do).
port=$(free_port)
ACC_RUN_TOKEN=s3cret comm-profile --rank 0 --world-size 2 --master-addr 127.0.0.2 --master-port "$port" \
    --timeout 15 -e 64 -n 1 -q 2>rank0.err &
rank0=$!
for _ in $(seq 100); do [ -n "$(listening "$port")" ] && break; sleep 0.1; done
addresses=$(listening "$port")
[ "$addresses" = "[::ffff:127.0.0.2]:$port" ] || [ "$addresses" = "127.0.0.2:$port" ] ||
    fail "with --master-addr 127.0.0.2 the store listens on: $addresses"
stranger 127.0.0.2 "$port" plant || fail "the stranger could not reach the store"
expect_exit 1 "^comm-profile\[1\]: error: rendezvous at 127\.0\.0\.2:$port: the store there belongs to another run \(it was opened with another run token\); give every rank the same ACC_RUN_TOKEN, or none$" -- \
    env ACC_RUN_TOKEN=other comm-profile --rank 1 --world-size 2 --master-addr 127.0.0.2 --master-port "$port" --timeout 10 -e 64 -n 1 -q
got=0
wait "$rank0" || got=$?
[ "$got" = 1 ] || fail "rank 0 exited with $got with only strangers around"
grep -q "planted" rank0.err && fail "rank 0 printed a stranger's message: $(cat rank0.err)"
grep -qE "^comm-profile\[0\]: error: rendezvous at 127\.0\.0\.2:$port timed out after 15 s: rank 1 of 2 never arrived$" rank0.err ||
    fail "rank 0 with only strangers around: $(cat rank0.err)"

# The same token on both ranks: they measure.
port=$(free_port)
ACC_RUN_TOKEN=s3cret comm-profile --rank 1 --world-size 2 --master-port "$port" -e 64 -n 1 -q 2>rank1.err &
rank1=$!
ACC_RUN_TOKEN=s3cret comm-profile --rank 0 --world-size 2 --master-port "$port" -e 64 -n 1 -q --csv >ok.csv 2>rank0.err ||
    fail "rank 0 with the right token: $(cat rank0.err)"
wait "$rank1" || fail "rank 1 with the right token: $(cat rank1.err)"
[ "$(head -c 10 ok.csv)" = "collective" ] || fail "no CSV from ranks with the same token"

# A master address that is not this machine's: rank 0 says so.
expect_exit 1 "^comm-profile\[0\]: error: --master-addr 192\.0\.2\.1: 192\.0\.2\.1 is not an address of this machine" -- \
    comm-profile --rank 0 --world-size 2 --master-addr 192.0.2.1 --master-port "$(free_port)" --timeout 2 -q
finish
