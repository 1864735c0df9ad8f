#!/usr/bin/env bash
# What a process without the run's token can no longer do to a run (LibTorch
# 1.13's TCPStore let it): stall the ranks, or keep rank 0 from exiting, with
# one byte; make rank 0 hold a large message. And every wait of a joining rank
# ends within --timeout (plus 3 s here, the program's start on a busy machine
# included) with one line naming the address: rank
# 0 stopped (SIGSTOP) before the rendezvous, or a listener that never answers.
source "$(dirname "$0")/common.sh"
cd "$WORK"
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
stranger="$ACC_SOURCE/tests/e2e/store_stranger.py"

# listens PORT: whether something accepts connections at 127.0.0.1:PORT.
listens() { "$ACC_PYTHON" -c "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$1" 2>/dev/null; }

# Two ranks by hand while a stranger holds a connection with one byte sent, and
# another announces a 100 MiB message: both ranks finish, at once.
port=$(free_port)
export ACC_RUN_TOKEN=s3cret
start=$(date +%s.%N)
comm-profile --rank 0 --world-size 2 --master-port "$port" --timeout 20 -e 64K -n 20 --csv >rank0.csv 2>rank0.err &
rank0=$!
for _ in $(seq 100); do listens "$port" && break; sleep 0.1; done
"$ACC_PYTHON" "$stranger" byte 127.0.0.1 "$port" 120 &
holder=$!
"$ACC_PYTHON" "$stranger" big 127.0.0.1 "$port" >big.out || fail "$(cat big.out)"
comm-profile --rank 1 --world-size 2 --master-port "$port" --timeout 20 -e 64K -n 20 2>rank1.err ||
    fail "rank 1 beside a stranger: $(cat rank1.err)"
wait "$rank0" || fail "rank 0 beside a stranger: $(cat rank0.err)"
took=$("$ACC_PYTHON" -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$start")
kill "$holder" 2>/dev/null || true
"$ACC_PYTHON" -c "import sys; sys.exit(float(sys.argv[1]) >= 30)" "$took" ||
    fail "two ranks beside a stranger holding one byte took $took s"
[ "$(head -c 10 rank0.csv)" = "collective" ] || fail "no measurements beside the stranger: $(cat rank0.err)"
echo "two ranks beside the strangers: $took s; $(cat big.out)"

# Rank 0 stopped before the rendezvous: rank 1 gives up within --timeout.
port=$(free_port)
comm-profile --rank 0 --world-size 2 --master-port "$port" --timeout 60 -q 2>stopped0.err &
rank0=$!
for _ in $(seq 100); do listens "$port" && break; sleep 0.1; done
kill -STOP "$rank0"
start=$(date +%s.%N)
expect_exit 1 "^comm-profile\[1\]: error: rendezvous: rank 1: timed out after 3\.0 s: the rendezvous store at 127\.0\.0\.1:$port did not answer \(is rank 0 stopped, or is something else listening there\?\)$" -- \
    comm-profile --rank 1 --world-size 2 --master-port "$port" --timeout 3 -q
took=$("$ACC_PYTHON" -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$start")
kill -KILL "$rank0"
"$ACC_PYTHON" -c "import sys; sys.exit(float(sys.argv[1]) >= 6)" "$took" ||
    fail "rank 1 beside a stopped rank 0 waited $took s with --timeout 3"
echo "rank 1 beside a stopped rank 0: $took s with --timeout 3"

# A listener that accepts and never answers.
port=$(free_port)
"$ACC_PYTHON" "$stranger" silent "$port" 60 &
for _ in $(seq 100); do listens "$port" && break; sleep 0.1; done
start=$(date +%s.%N)
expect_exit 1 "^comm-profile\[1\]: error: rendezvous: rank 1: timed out after 3\.0 s: the rendezvous store at 127\.0\.0\.1:$port did not answer" -- \
    comm-profile --rank 1 --world-size 2 --master-port "$port" --timeout 3 -q
took=$("$ACC_PYTHON" -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$start")
"$ACC_PYTHON" -c "import sys; sys.exit(float(sys.argv[1]) >= 6)" "$took" ||
    fail "rank 1 against a silent listener waited $took s with --timeout 3"
echo "rank 1 against a silent listener: $took s with --timeout 3"
finish
