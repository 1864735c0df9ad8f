#!/usr/bin/env bash
# comm-profile: every kind of bad invocation gets one clear error line and the
# documented exit code, before any rank starts.
source "$(dirname "$0")/common.sh"
cd "$WORK"

# Usage errors: exit 2.
expect_exit 2 "^comm-profile: error: -b/--min-bytes: the size must be at least 1 byte$" -- comm-profile -b 0
expect_exit 2 "-e/--max-bytes: '64Q' is not a size in bytes \(a whole number, optionally with K, M or G\)" -- comm-profile -e 64Q
expect_exit 2 "-e/--max-bytes 4096 is smaller than -b/--min-bytes 8192" -- comm-profile -b 8K -e 4K
expect_exit 2 "--step-factor: Value 1 not in range 2 to 1024" -- comm-profile -f 1
expect_exit 2 "--iters: must be a whole number >= 1, not '0'" -- comm-profile -n 0
expect_exit 2 "--world-size: must be a whole number >= 1, not 'two'" -- comm-profile --world-size two
expect_exit 2 "--collectives: 'alltoall' is not a collective; valid ones are allreduce, allgather, broadcast, reduce_scatter" -- comm-profile --collectives allreduce,alltoall
expect_exit 2 "--collectives: broadcast is listed twice" -- comm-profile --collectives broadcast,broadcast
expect_exit 2 "--csv excludes --json" -- comm-profile --csv --json
expect_exit 2 "--device: .*cuda" -- comm-profile --device tpu
expect_exit 2 "^comm-profile: error: --rank 2 is outside the world: --world-size is 2, so ranks are 0..1$" -- comm-profile --rank 2 --world-size 2
expect_exit 2 "^comm-profile: error: RANK='one' in the environment is not a whole number" -- env RANK=one comm-profile
expect_exit 2 "WORLD_SIZE='0' in the environment is not a whole number in \[1, 1048576\]" -- env WORLD_SIZE=0 comm-profile
expect_exit 2 "--nproc starts its own ranks; leave out --rank and --world-size" -- comm-profile --nproc 2 --rank 0
expect_exit 2 "--timeout: Value 0 not in range" -- comm-profile --timeout 0
expect_exit 2 "not expected" -- comm-profile --frobnicate
# With --nproc the options are checked once, before any rank starts.
expect_exit 2 "^comm-profile: error: -b/--min-bytes: the size must be at least 1 byte$" -- comm-profile --nproc 2 -b 0
[ "$(wc -l <"$WORK/err")" = 1 ] || fail "--nproc with a bad option printed more than one line: $(cat "$WORK/err")"
# A CPU-only build refuses NCCL as a usage error; a CUDA build may run it.
got=0
comm-profile --device cuda -e 64 -n 1 -q 2>"$WORK/err" || got=$?
if grep -q "needs a build against a CUDA LibTorch" "$WORK/err"; then
    [ "$got" = 2 ] || fail "--device cuda in a CPU-only build exited with $got"
fi
# Gloo in LibTorch 1.13 has no reduce-scatter; newer ones measure it.
got=0
comm-profile --collectives reduce_scatter -e 64 -n 1 -q 2>"$WORK/err" || got=$?
if [ "$got" != 0 ]; then
    [ "$got" = 2 ] || fail "reduce_scatter on a backend without it exited with $got"
    grep -q "reduce_scatter: the gloo backend of LibTorch .* has no reduce-scatter" "$WORK/err" || fail "reduce_scatter: $(cat "$WORK/err")"
fi
# A usage error every rank finds reaches the user once.
got=0
comm-profile --nproc 2 --collectives reduce_scatter -e 64 -n 1 -q 2>"$WORK/err" || got=$?
if [ "$got" = 2 ]; then
    [ "$(grep -c "error: reduce_scatter: the gloo backend" "$WORK/err")" = 1 ] ||
        fail "--nproc 2: a usage error of every rank is not printed once: $(cat "$WORK/err")"
fi

# Runtime errors: exit 1.
expect_exit 1 "^comm-profile: error: no/such/dir/comm.h5: directory no/such/dir does not exist$" -- comm-profile -e 64 -o no/such/dir/comm.h5
[ -e comm.h5 ] && fail "a failed run left a file"
finish
