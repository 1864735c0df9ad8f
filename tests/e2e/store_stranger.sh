#!/usr/bin/env bash
# A local process without the run's token, as a client of the rendezvous store
# (speaking its protocol with the default token, or as PyTorch's own TCPStore),
# against a run that has one: it is turned away, reads nothing of the run's (the
# ranks' members, Gloo's addresses, the host names) and writes nothing the run
# trusts, and the run ends normally (tests/e2e/store_stall.sh: stalls).
source "$(dirname "$0")/common.sh"
cd "$WORK"
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

# stranger HOST PORT read|plant|torch: a process without the run's token as a
# client of the store (tests/e2e/store_stranger.py): read fails if it reads a
# key; plant writes keys where it is let in; torch is PyTorch's own TCPStore
# client, which the store turns away.
stranger() { "$ACC_PYTHON" "$ACC_SOURCE/tests/e2e/store_stranger.py" "$3" "$1" "$2" >/dev/null; }

# A run by hand with ACC_RUN_TOKEN: the stranger plants its keys while rank 0
# waits; rank 1, with the same token, then joins and both measure.
port=$(free_port)
ACC_RUN_TOKEN=s3cret comm-profile --rank 0 --world-size 2 --master-port "$port" --timeout 30 \
    -e 64 -n 1 -w 0 --csv >rank0.csv 2>rank0.err &
rank0=$!
for _ in $(seq 100); do
    "$ACC_PYTHON" -c "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$port" \
        2>/dev/null && break
    sleep 0.1
done
stranger 127.0.0.1 "$port" plant || fail "the stranger could not reach the store"
stranger 127.0.0.1 "$port" torch || fail "PyTorch's TCPStore client was let in"
ACC_RUN_TOKEN=s3cret comm-profile --rank 1 --world-size 2 --master-port "$port" --timeout 30 -e 64 -n 1 -w 0 \
    2>rank1.err || fail "rank 1 with the run's token, after the stranger: $(cat rank1.err)"
wait "$rank0" || fail "rank 0 with the run's token, after the stranger: $(cat rank0.err)"
[ "$(head -c 10 rank0.csv)" = "collective" ] || fail "no measurements after the stranger: $(cat rank0.err)"
grep -qiE "planted|intruder|turned away|another run" rank0.err rank1.err &&
    fail "a rank reported what the stranger wrote: $(cat rank0.err rank1.err)"

# --nproc: while the ranks measure, the stranger reads none of their keys.
comm-profile --nproc 2 -v --timeout 30 -b 8 -e 32M -n 300 -w 1 --collectives allreduce >/dev/null 2>nproc.err &
launcher=$!
wait_for_line nproc.err '^(\[0\] )? +[0-9]+ +[0-9]+ +float' 60 || fail "no table row from --nproc 2: $(tail -3 nproc.err)"
port=$(grep -oE 'rendezvous at 127\.0\.0\.1:[0-9]+' nproc.err | grep -oE '[0-9]+$' | head -1)
stranger 127.0.0.1 "$port" read || fail "a stranger read a key of a --nproc run"
kill -TERM "$launcher"
wait "$launcher" || true
finish
