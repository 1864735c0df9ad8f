#!/usr/bin/env bash
# Damaged files never crash or hang a reader: a few hundred copies of each kind of
# file the toolkit reads, each with one or two bytes changed at random (fixed
# seeds), go through the readers (tests/helpers/read_files, one child process per
# file under a time limit). Each must be read or refused with an error; a signal
# or a timeout fails the test. FUZZ_COUNT sets the number of copies per kind,
# FUZZ_READER another reader program (e.g. one built from an older tree).
source "$(dirname "$0")/common.sh"
cd "$WORK"
count=${FUZZ_COUNT:-300}
reader="${FUZZ_READER:-$ACC_BUILD_DIR/bin/read_files}"

# One valid file of each kind, written by the programs themselves.
write_sample_grads grads.h5 || fail "write_sample_grads"
regime-detect grads.h5 --interval 1 -o schedule.h5 -q || fail "regime-detect"
train-dist --model mlp --hidden-size 8 --dataset synthetic --train-samples 32 --test-samples 8 --batch-size 16 \
    --threads 1 --epochs 2 --accordion --interval 1 --low topk:0.5 --high powersgd:1 --metrics metrics.h5 \
    --checkpoint-dir . -q 2>train.log || fail "train-dist: $(tail -3 train.log)"
comm-profile -b 1K -e 4K -n 2 -w 0 --collectives allreduce,allgather -o comm-profile.h5 -q 2>comm.log ||
    fail "comm-profile: $(tail -3 comm.log)"
printf 'fc.weight 4x6\nfc.bias 4\n' >model.txt
compress-bench --shapes model.txt --compressors none,topk:0.5 --world 1,2 --reps 1 --alpha 1e-5 --bandwidth 1e9 \
    --compute-ms 5 -o compress-bench.h5 -q 2>bench.log || fail "compress-bench: $(tail -3 bench.log)"

for kind in grads schedule metrics comm-profile compress-bench; do
    [ -s "$kind.h5" ] || { fail "no $kind.h5 to damage"; continue; }
    "$reader" "$kind" 10 "$kind.h5" >/dev/null || fail "the undamaged $kind.h5 does not read"
    mkdir "bad-$kind"
    "$ACC_PYTHON" - "$kind.h5" "bad-$kind" "$count" <<'PY'
import random, sys, zlib
source, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(source, "rb").read()
rng = random.Random(zlib.crc32(source.encode()))
for i in range(count):
    bad = bytearray(data)
    for _ in range(rng.choice((1, 2))):
        at = rng.randrange(len(bad))
        bad[at] = (bad[at] + rng.randrange(1, 256)) % 256
    open(f"{out}/{i:04d}.h5", "wb").write(bad)
PY
    "$reader" "$kind" 10 "bad-$kind"/*.h5 >"$kind.result" || fail "$kind: $(grep -E 'crash|hang|exit' "$kind.result" | head -5)"
    tail -1 "$kind.result"
done
finish
