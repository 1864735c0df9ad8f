#!/usr/bin/env bash
# A peer that dies (SIGKILL), hangs (SIGSTOP) or never arrives ends every rank
# with exit 1 and one message naming what was lost and where, within the
# timeout; the --nproc launcher ends the others and exits with the worst code.
source "$(dirname "$0")/common.sh"
cd "$WORK"
# Ranks this script started do not outlive it, whatever happens.
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
# A sweep whose first rows come at once and whose last ones take long.
long=(-b 8 -e 32M -n 300 -w 1 --collectives allreduce)

# wait_for_row FILE: waits (up to 30 s) until rank 0 has printed a table row.
wait_for_row() {
    wait_for_line "$1" '^(\[0\] )? +[0-9]+ +[0-9]+ +float' 30 && return 0
    fail "no table row in $1 after 30 s"
    return 1
}

# seconds_since START_NS
seconds_since() { echo $(( ($(date +%s%N) - $1) / 1000000000 )); }

# start_pair TIMEOUT: starts ranks 0 and 1 of a long sweep on a fresh port, rank
# 0's stderr in rank0.err, rank 1's in rank1.err; sets rank0 and rank1 to their
# pids and waits for rank 0's first table row. The one to be killed is disowned
# by the caller, so that the shell does not report it.
start_pair() {
    local port
    port=$(free_port)
    comm-profile --rank 0 --world-size 2 --master-port "$port" --timeout "$1" "${long[@]}" 2>rank0.err >/dev/null &
    rank0=$!
    comm-profile --rank 1 --world-size 2 --master-port "$port" --timeout "$1" "${long[@]}" 2>rank1.err >/dev/null &
    rank1=$!
    wait_for_row rank0.err
}

# A rank killed during a collective: the other names it, its host and pid.
start_pair 30
disown "$rank1"
start=$(date +%s%N)
kill -KILL "$rank1"
got=0
wait "$rank0" || got=$?
took=$(seconds_since "$start")
[ "$got" = 1 ] || fail "rank 0 exited with $got after its peer was killed"
[ "$took" -lt 30 ] || fail "rank 0 took $took s to notice a killed peer (timeout 30 s)"
grep -qE "^comm-profile\[0\]: error: rank 1 \(host [^,]+, pid $rank1\) lost during (allreduce|barrier) after [0-9.]+ s \(connection closed\)$" rank0.err ||
    fail "killed peer: $(tail -2 rank0.err)"

# Rank 0, which hosts the store, killed: rank 1 says so.
start_pair 30
disown "$rank0"
kill -KILL "$rank0"
got=0
wait "$rank1" || got=$?
[ "$got" = 1 ] || fail "rank 1 exited with $got after rank 0 was killed"
grep -qE "^comm-profile\[1\]: error: rank 0 \(host [^,]+, pid $rank0\) lost during (allreduce|barrier) after [0-9.]+ s" rank1.err ||
    fail "killed store host: $(tail -2 rank1.err)"

# A rank that hangs: the other gives up after --timeout. The timeout also bounds
# the rendezvous, so it leaves room for a slow start on a loaded machine.
start_pair 8
start=$(date +%s%N)
kill -STOP "$rank1"
got=0
wait "$rank0" || got=$?
took=$(seconds_since "$start")
[ "$got" = 1 ] || fail "rank 0 exited with $got after its peer hung"
[ "$took" -ge 8 ] && [ "$took" -lt 20 ] || fail "rank 0 gave up on a hung peer after $took s (timeout 8 s)"
grep -qE "^comm-profile\[0\]: error: rank 1 \(host [^,]+, pid $rank1\) lost during (allreduce|barrier) after [0-9.]+ s \(no progress within --timeout 8.0 s\)$" rank0.err ||
    fail "hung peer: $(tail -2 rank0.err)"
# The hung rank, continued once its peer has gone, writes to closed sockets: an
# error with a message (exit 1), never a silent death by SIGPIPE (exit 141).
kill -CONT "$rank1"
got=0
wait "$rank1" || got=$?
[ "$got" = 1 ] || fail "the continued rank exited with $got, expected 1: $(tail -2 rank1.err)"
grep -qE "^comm-profile\[1\]: error: " rank1.err || fail "the continued rank gave no error line: $(tail -2 rank1.err)"

# Rank 0, which hosts the store, hangs: rank 1 gives up after --timeout plus the
# few seconds the diagnosis may take (the store no longer answers), not after
# a second --timeout.
start_pair 10
disown "$rank0"
start=$(date +%s%N)
kill -STOP "$rank0"
got=0
wait "$rank1" || got=$?
took=$(seconds_since "$start")
kill -KILL "$rank0"
[ "$got" = 1 ] || fail "rank 1 exited with $got after rank 0 hung"
[ "$took" -ge 10 ] && [ "$took" -le 15 ] || fail "rank 1 gave up on a hung rank 0 after $took s (timeout 10 s)"
grep -qE "^comm-profile\[1\]: error: rank 0 \(host [^,]+, pid $rank0\) lost during (allreduce|barrier) after [0-9.]+ s \(it hosted the rendezvous store, which no longer answers\)$" rank1.err ||
    fail "hung store host: $(tail -2 rank1.err)"

# Rendezvous where a rank never starts, seen from either side.
# (Rank 1 starts first and waits for the store, so that only rank 2 is late;
# it reports what rank 0 found, long before its own timeout.)
port=$(free_port)
message="rendezvous at 127.0.0.1:$port timed out after 6.0 s: rank 2 of 3 never arrived"
expect_exit 1 "^comm-profile\[0\]: error: $message$" -- \
    bash -c "comm-profile --rank 1 --world-size 3 --master-port $port --timeout 20 -q 2>late1.err & sleep 2; comm-profile --rank 0 --world-size 3 --master-port $port --timeout 6; status=\$?; wait; exit \$status"
grep -q "^comm-profile\[1\]: error: $message$" late1.err || fail "rank 1 of a failed rendezvous: $(cat late1.err)"
port=$(free_port)
expect_exit 1 "^comm-profile\[1\]: error: rendezvous: rank 1 cannot reach the store at 127.0.0.1:$port within 2.0 s; did rank 0 start\?$" -- \
    comm-profile --rank 1 --world-size 2 --master-port "$port" --timeout 2

# Ranks that disagree on the sweep refuse to measure.
port=$(free_port)
expect_exit 2 "rank 1 was started with other sweep options than rank 0" -- \
    bash -c "comm-profile --rank 1 --world-size 2 --master-port $port -e 8K -q 2>/dev/null & comm-profile --rank 0 --world-size 2 --master-port $port -e 4K -q; status=\$?; wait; exit \$status"

# A rank that fails for its own reason tells the others why.
touch "$WORK/plain"
expect_exit 1 "^comm-profile\\[1\\]: error: rank 0 stopped: $WORK/plain/comm.h5: cannot create the directory $WORK/plain: Not a directory$" -- \
    comm-profile --nproc 2 -e 64 -o "$WORK/plain/comm.h5"
grep -q "^comm-profile\\[0\\]: error: $WORK/plain/comm.h5: cannot create the directory $WORK/plain: Not a directory$" "$WORK/err" || fail "rank 0: $(cat "$WORK/err")"

# The launcher: a killed rank makes the others report it, and the launcher
# exits with the worst code (128 + 9).
comm-profile --nproc 3 -v --timeout 30 "${long[@]}" >/dev/null 2>launch.err &
launcher=$!
wait_for_row launch.err
victim=$(grep -oE 'rank 1 is pid [0-9]+' launch.err | grep -oE '[0-9]+$')
kill -KILL "$victim"
got=0
wait "$launcher" || got=$?
[ "$got" = 137 ] || fail "the launcher exited with $got, expected 137"
grep -q "^comm-profile: warning: rank 1 was killed by signal 9" launch.err || fail "launcher did not report the killed rank"
# The ranks left name the killed one; what they say in the same words is printed once.
grep -qE "^comm-profile\[[02]\]: error: rank 1 \(host [^,]+, pid $victim\) lost during" launch.err ||
    fail "no rank named the killed rank: $(grep "error:" launch.err)"
repeated=$(grep -E "^comm-profile\[[0-9]+\]: error: " launch.err | sed -E 's/^comm-profile\[[0-9]+\]//' | sort | uniq -d)
[ -z "$repeated" ] || fail "an error was printed once per rank: $repeated"
pgrep -P "$launcher" >/dev/null && fail "the launcher left ranks running"

# SIGTERM to the launcher reaches the ranks.
comm-profile --nproc 2 "${long[@]}" >/dev/null 2>term.err &
launcher=$!
wait_for_row term.err
ranks=$(pgrep -P "$launcher" | tr '\n' ' ')
kill -TERM "$launcher"
got=0
wait "$launcher" || got=$?
[ "$got" = 143 ] || fail "the launcher exited with $got after SIGTERM, expected 143"
for pid in $ranks; do
    kill -0 "$pid" 2>/dev/null && fail "rank pid $pid survived its launcher's SIGTERM"
done
finish
