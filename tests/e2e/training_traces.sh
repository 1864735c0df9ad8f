#!/usr/bin/env bash
# --trace of the training programs: rank 0 alone writes a trace of steps 10 to 19
# of the first epoch trained (the last ten of a shorter one), each step's parts in
# ranges of their own, which scripts/trace-summary.py reads back; a path that cannot
# be written is refused before training. (compress-bench's --trace:
# compress_bench_output.sh and compress_bench_errors.sh.)
source "$(dirname "$0")/common.sh"
cd "$WORK"
small=(--model mlp --hidden-size 16 --dataset synthetic --test-samples 16 --batch-size 16 --lr 0.01 --threads 1)

# steps_of TRACE FIRST LAST: the trace holds one window, "epoch 0, steps FIRST to LAST",
# with one range "step" per step and every step's parts.
steps_of() {
    "$ACC_PYTHON" - "$@" <<'PY'
import json, sys
path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
events = json.load(open(path))["traceEvents"]
ranges = [e for e in events if e["cat"] == "range"]
windows = [e for e in ranges if e["name"].startswith("epoch ")]
assert [w["name"] for w in windows] == [f"epoch 0, steps {first} to {last}"], [w["name"] for w in windows]
w = windows[0]
steps = [e for e in ranges if e["name"] == "step"]
assert len(steps) == last - first + 1, len(steps)
# (LibTorch 1.13 gives whole microseconds: a range may end a microsecond after its parent.)
assert all(w["ts"] <= s["ts"] and s["ts"] + s["dur"] <= w["ts"] + w["dur"] + 1 for s in steps), (w, steps)
for part in ("data", "forward and backward", "gradient exchange", "optimizer"):
    assert sum(e["name"] == part for e in ranges) == len(steps), part
assert any(e["name"] == "aten::addmm" for e in events if e["cat"] == "operation"), "no aten::addmm"
PY
}

# Two ranks: one trace, from rank 0 (30 steps per rank in the epoch).
train-dist "${small[@]}" --train-samples 960 --nproc 2 --epochs 2 --compress powersgd:1 --metrics m.h5 \
    --trace traces/two.json \
    2>two.log || fail "train-dist --trace: $(tail -3 two.log)"
grep -q "train-dist\[0\]: wrote traces/two.json: epoch 0, steps 10 to 19 (.* events)" two.log ||
    fail "train-dist did not say what it traced: $(grep -i wrote two.log)"
[ "$(grep -c ' events)$' two.log)" = 1 ] || fail "more than rank 0 wrote a trace: $(grep wrote two.log)"
steps_of traces/two.json 10 19 || fail "train-dist's trace"
"$ACC_PYTHON" "$ACC_SOURCE/scripts/trace-summary.py" traces/two.json >two.md || fail "trace-summary.py on a training trace"
grep -q "^### epoch 0, steps 10 to 19 (10 steps)" two.md && grep -q "^Parts of a step: data .*forward and backward" two.md ||
    fail "trace-summary.py's training summary: $(cat two.md)"

# An epoch of 6 steps: its last ten, that is all of them.
grad-dump "${small[@]}" --train-samples 96 --epochs 1 -o g.h5 --trace short.json 2>short.log ||
    fail "grad-dump --trace: $(tail -3 short.log)"
steps_of short.json 0 5 || fail "grad-dump's trace of a short epoch"

# Refused before any training: a path that cannot be written, or one of the run's outputs.
echo text >file
expect_exit 1 "^train-dist: error: file/trace.json: " -- train-dist "${small[@]}" --epochs 1 --metrics m2.h5 \
    --trace file/trace.json
grep -q "epoch 0" "$WORK/err" && fail "train-dist trained before refusing the trace's path"
expect_exit 2 "^train-dist: error: --trace m3.h5: is the same file as --metrics m3.h5" -- \
    train-dist "${small[@]}" --epochs 1 --metrics m3.h5 --trace m3.h5
expect_exit 2 "^grad-dump: error: --trace g2.h5: is the same file as --output g2.h5" -- \
    grad-dump "${small[@]}" --epochs 1 -o g2.h5 --trace g2.h5
finish
