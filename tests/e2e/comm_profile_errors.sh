#!/usr/bin/env bash
# comm-profile: every kind of bad invocation gets one clear error line and the
# documented exit code, before any rank starts.
source "$(dirname "$0")/common.sh"
cd "$WORK"

# Usage errors: exit 2.
expect_exit 2 "^comm-profile: error: -b/--min-bytes: the size must be at least 1 byte$" -- comm-profile -b 0
expect_exit 2 "-e/--max-bytes: '64Q' is not a size in bytes \(a whole number, optionally with K, M or G\)" -- comm-profile -e 64Q
expect_exit 2 "-e/--max-bytes 4096 is smaller than -b/--min-bytes 8192" -- comm-profile -b 8K -e 4K
expect_exit 2 "^comm-profile: error: --fit-from: '12Q' is not a size in bytes" -- comm-profile --fit-from 12Q
expect_exit 2 "^comm-profile: error: --fit-from 16777216 is larger than -e/--max-bytes 8388608" -- \
    comm-profile -e 8M --fit-from 16M
expect_exit 2 "^comm-profile: error: --fit-from 64 KiB leaves 1 of the sweep's sizes to fit the bandwidth over" -- \
    comm-profile -b 8 -e 64K --fit-from 64K
expect_exit 2 "--step-factor: must be a whole number in \[2, 1024\], not '1'" -- comm-profile -f 1
expect_exit 2 "--iters: must be a whole number in \[1, 1000000\], not '0'" -- comm-profile -n 0
expect_exit 2 "^comm-profile: error: --agg-iters: must be a whole number in \[1, 10000\], not '10001'" -- comm-profile -m 10001
expect_exit 2 "--world-size: must be a whole number in \[1, 1048576\], not 'two'" -- comm-profile --world-size two
expect_exit 2 "--collectives: 'alltoall' is not a collective; valid ones are allreduce, allgather, broadcast, reduce_scatter" -- comm-profile --collectives allreduce,alltoall
expect_exit 2 "--collectives: broadcast is listed twice" -- comm-profile --collectives broadcast,broadcast
expect_exit 2 "--csv excludes --json" -- comm-profile --csv --json
expect_exit 2 "--device: .*cuda" -- comm-profile --device tpu
expect_exit 2 "^comm-profile: error: --rank 2 is outside the world: --world-size is 2, so ranks are 0..1$" -- comm-profile --rank 2 --world-size 2
expect_exit 2 "^comm-profile: error: RANK='one' in the environment is not a whole number" -- env RANK=one comm-profile
expect_exit 2 "WORLD_SIZE='0' in the environment is not a whole number in \[1, 1048576\]" -- env WORLD_SIZE=0 comm-profile
expect_exit 2 "--nproc starts its own ranks; leave out --rank and --world-size" -- comm-profile --nproc 2 --rank 0
expect_exit 2 "--timeout: must be a number in \[0.1, 86400\], not '0'" -- comm-profile --timeout 0
expect_exit 2 "^comm-profile: error: --frobnicate: unknown option \(see 'comm-profile --help'\)$" -- comm-profile --frobnicate
expect_exit 2 "^comm-profile: error: --iter: unknown option; did you mean --iters\?" -- comm-profile --iter 3
expect_exit 2 "^comm-profile: error: -e/--max-bytes: 2048G is too large; sizes go from 1 byte to 64G$" -- comm-profile -e 2048G
# A sweep whose largest size cannot fit in memory is refused before it starts,
# once under --nproc, with the largest size that fits: a 64 GiB allgather on 2
# ranks holds 5 x 32 GiB on each (its input, its output of 2 parts, and Gloo's
# flat copy of that output).
expect_exit 2 "^comm-profile(\[[01]\])?: error: -e/--max-bytes: the sweep's largest allgather holds about 160\.0 GiB per rank, 320\.0 GiB for the 2 ranks on [^ ]+, which has [0-9.]+ GiB available; lower -e/--max-bytes to [0-9.]+ [KMG]iB or less$" -- \
    comm-profile --nproc 2 -e 64G -n 1 -w 0 --collectives allreduce,allgather
[ "$(grep -c "error:" "$WORK/err")" = 1 ] || fail "the memory check was not reported once: $(cat "$WORK/err")"

# Every numeric option refuses what cannot be meant, giving the valid range.
while read -r option value range; do
    expect_exit 2 "^comm-profile: error: $option: must be a (whole )?number in $range, not '$value'" -- \
        comm-profile "$option" "$value"
done <<'TABLE'
--iters 99999999999999999999 \[1, 1000000\]
--warmup-iters -1 \[0, 1000000\]
--agg-iters 0 \[1, 10000\]
--step-factor 1.5 \[2, 1024\]
--batch-size 0 \[1, 1048576\]
--timeout nan \[0.1, 86400\]
--timeout 1e9 \[0.1, 86400\]
--master-port 0 \[1, 65535\]
--rank -1 \[0, 1048575\]
--nproc 0 \[1, 1024\]
TABLE
# With --nproc the options are checked once, before any rank starts.
expect_exit 2 "^comm-profile: error: -b/--min-bytes: the size must be at least 1 byte$" -- comm-profile --nproc 2 -b 0
[ "$(wc -l <"$WORK/err")" = 1 ] || fail "--nproc with a bad option printed more than one line: $(cat "$WORK/err")"
# A CPU-only build refuses NCCL, and a CUDA build on a machine without a GPU
# refuses --device cuda, each as a usage error; a CUDA build with a GPU runs it.
got=0
comm-profile --device cuda -e 64 -n 1 -q 2>"$WORK/err" || got=$?
if [ "$got" != 0 ]; then
    [ "$got" = 2 ] || fail "--device cuda without a usable GPU exited with $got: $(cat "$WORK/err")"
    # In the words of every other program, in a CPU-only build too.
    grep -qE "^comm-profile: error: --device cuda: no CUDA device is available \(this LibTorch was built without CUDA, or no GPU is visible\); use --device cpu$" "$WORK/err" ||
        fail "--device cuda without a usable GPU: $(cat "$WORK/err")"
    [ "$(wc -l <"$WORK/err")" = 1 ] || fail "--device cuda without a usable GPU printed more than one line"
fi
# Gloo has no reduce-scatter algorithm: both LibTorch versions measure it as an allreduce.
comm-profile --collectives reduce_scatter -e 64 -n 1 -q -o rs.h5 2>"$WORK/err" || fail "reduce_scatter on gloo: $(cat "$WORK/err")"
comm-profile --nproc 2 --collectives reduce_scatter -e 64 -n 1 -q --check -o rs2.h5 2>"$WORK/err" ||
    fail "reduce_scatter on two gloo ranks: $(cat "$WORK/err")"

# Runtime errors: exit 1.
echo x >plain-file
expect_exit 1 "^comm-profile: error: plain-file/comm.h5: cannot create the directory plain-file" -- comm-profile -e 64 -o plain-file/comm.h5
[ -e comm.h5 ] && fail "a failed run left a file"
# LibTorch's failures are one line naming what was being done, never a stack trace.
limit=$(memory_limit_kib 500000)  # 0.5 GB beyond the libraries: too little for the request
expect_exit 1 "^comm-profile: error: computing with LibTorch: LibTorch failed: .*can't allocate memory" -- \
    bash -c 'ulimit -v "$0"; exec comm-profile -e 64 -n 1 -w 0 --collectives broadcast --model mlp --batch-size 1048576' "$limit"
grep -q "frame #" "$WORK/err" && fail "a stack trace reached the user: $(cat "$WORK/err")"
# A sweep too large for that limit is refused before it allocates anything,
# naming the largest size that fits (here below -b, so both options).
expect_exit 2 "^comm-profile: error: -e/--max-bytes: the sweep's largest broadcast holds about 1\.0 GiB per rank, 1\.0 GiB for the 1 rank on [^ ]+, which has 0\.[0-9] GiB available; lower -b/--min-bytes and -e/--max-bytes to [0-9]+ MiB or less$" -- \
    bash -c 'ulimit -v "$0"; exec comm-profile -b 1G -e 1G -n 1 -w 0 --collectives broadcast' "$limit"
# One rank's allgather of 1 GiB holds 3 GiB: its input, its output and Gloo's flat
# copy of the output. With 2.5 GiB left it is refused, naming 512 MiB (1.5 GiB).
limit=$(memory_limit_kib 2621440)
expect_exit 2 "^comm-profile: error: -e/--max-bytes: the sweep's largest allgather holds about 3\.0 GiB per rank, 3\.0 GiB for the 1 rank on [^ ]+, which has 2\.[0-9] GiB available; lower -b/--min-bytes and -e/--max-bytes to 512 MiB or less$" -- \
    bash -c 'ulimit -v "$0"; exec comm-profile -b 1G -e 1G -n 1 -w 0 -q --collectives allgather' "$limit"
# A missing output directory is created.
comm-profile -e 64 -n 1 -w 0 -q -o new/dir/comm.h5 >/dev/null || fail "comm-profile did not create new/dir"
[ -s new/dir/comm.h5 ] || fail "no new/dir/comm.h5"
finish
