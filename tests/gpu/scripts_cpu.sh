# The GPU benchmark scripts run on the CPU with tiny sizes, so that they cannot
# rot between GPU sessions: every measurement lands in the JSON lines and in
# figures.md's tables, a failing program is recorded as such while the others
# still run, and run-all.sh refuses a bad step or a missing kit.
source "$ACC_SOURCE/tests/e2e/common.sh"
cd "$ACC_SOURCE"
export ACC_BUILD_DIR ACC_PYTHON

out=$WORK/bench
DEVICE=cpu BATCHES=2 STEPS=1 EPOCHS=2 TORCH_STEPS=1 TORCH_WARMUP=0 THREADS=1 scripts/gpu/bench-train.sh "$out" \
    2>"$WORK/train.err" || fail "bench-train.sh failed: $(tail -3 "$WORK/train.err")"
DEVICE=cpu VALUES=20000 SHAPES=tiny REPS=1 THREADS=1 scripts/gpu/bench-compress.sh "$out" 2>"$WORK/compress.err" ||
    fail "bench-compress.sh failed: $(tail -3 "$WORK/compress.err")"
"$ACC_PYTHON" - "$out" <<'PY' || fail "the measurements are incomplete"
import json, sys
out = sys.argv[1]
train = [json.loads(l) for l in open(out + "/train.jsonl")]
runs = [r["run"] for r in train]
assert runs == ["PyTorch eager", "grad-dump", "train-dist --compress none", "train-dist --compress powersgd:2",
                "train-dist --compress powersgd:2, CUDA kernels (ACC_CUDA_KERNELS=all)"], runs
for r in train:
    assert r["batch"] == 2 and r["images_per_second"] > 0 and "error" not in r, r
compress = {r["side"]: r for r in map(json.loads, open(out + "/compress.jsonl"))}
assert set(compress) == {"flat", "aten", "shapes", "kernels", "kernels-shapes", "pytorch"}, list(compress)
assert all("error" not in r for r in compress.values()), compress
names = [r["compressor"] for r in compress["flat"]["results"]] + [r["compressor"] for r in compress["shapes"]["results"]]
assert names == ["topk:0.01", "signsgd", "fp16", "qsgd:127", "powersgd:2", "topk:0.01", "dgc:0.01"], names
assert [r["compressor"] for r in compress["aten"]["results"]] == ["signsgd", "fp16", "qsgd:127"], compress["aten"]
assert [r["compressor"] for r in compress["kernels"]["results"]] == ["topk:0.01"], compress["kernels"]
assert [r["compressor"] for r in compress["kernels-shapes"]["results"]] == ["powersgd:2", "topk:0.01", "dgc:0.01"], \
    compress["kernels-shapes"]
torch = compress["pytorch"]
assert torch["values"] == 20000 and torch["k"] == 200 and torch["copy_bandwidth"] > 0, torch
assert torch["topk"]["min"] > 0 and torch["powersgd2"]["min"] > 0
PY
"$ACC_PYTHON" scripts/gpu/figures.py "$out" >"$WORK/figures.md" || fail "figures.py failed"
for row in "| 2 | PyTorch eager |" "| 2 | grad-dump |" "| 2 | train-dist --compress none |" \
    "| 2 | train-dist --compress powersgd:2 |" \
    "| 2 | train-dist --compress powersgd:2, CUDA kernels (ACC_CUDA_KERNELS=all) |" "| powersgd:2 encode+decode" "| topk:0.01 encode, 20,000 floats" \
    "| signsgd encode" "| fp16 encode" "| qsgd:127 encode" "| signsgd encode, ATen operations (ACC_CUDA_KERNELS=0)" \
    "| fp16 encode, ATen operations (ACC_CUDA_KERNELS=0)" "| qsgd:127 encode, ATen operations (ACC_CUDA_KERNELS=0)" \
    "| topk:0.01 encode+decode, tiny shapes |" "| dgc:0.01 encode+decode, tiny shapes |" \
    "| topk:0.01 encode, 20,000 floats, CUDA kernels (ACC_CUDA_KERNELS=all) |" \
    "| topk:0.01 encode+decode, tiny shapes, CUDA kernels (ACC_CUDA_KERNELS=all) |" \
    "| powersgd:2 encode+decode, tiny shapes, CUDA kernels (ACC_CUDA_KERNELS=all) |" \
    "| dgc:0.01 encode+decode, tiny shapes, CUDA kernels (ACC_CUDA_KERNELS=all) |"; do
    grep -qF -- "$row" "$WORK/figures.md" || fail "figures.md lacks the row '$row'"
done
# Where the time goes: a trace per run and their summaries, in figures.md too.
for name in flat shapes kernels kernels-shapes; do
    [ -s "$out/trace-$name.json" ] || fail "bench-compress.sh wrote no trace-$name.json"
done
for line in "## flat: ACC_CUDA_KERNELS=1 compress-bench --from" "### topk:0.01 W=1 (3 steps)" "### qsgd:127 W=1 (3 steps)" \
    "## shapes: ACC_CUDA_KERNELS=1 compress-bench --shapes" "### powersgd:2 W=1 (3 steps)" \
    "## kernels: ACC_CUDA_KERNELS=all compress-bench" "## kernels-shapes: ACC_CUDA_KERNELS=all compress-bench --shapes"; do
    grep -qF -- "$line" "$out/traces-compress.md" || fail "traces-compress.md lacks '$line': $(cat "$out/traces-compress.md")"
done
for spec in none powersgd2 powersgd2-kernels; do
    [ -s "$out/trace-train-$spec-2.json" ] || fail "bench-train.sh wrote no trace-train-$spec-2.json"
done
for line in "## train-dist --compress none, batch 2" "## train-dist --compress powersgd:2, batch 2" \
    "## train-dist --compress powersgd:2, CUDA kernels (ACC_CUDA_KERNELS=all), batch 2" \
    "### epoch 0, steps 0 to 0 (1 step)" "Parts of a step: data"; do
    grep -qF -- "$line" "$out/traces-train.md" || fail "traces-train.md lacks '$line': $(cat "$out/traces-train.md")"
done
grep -q "^## Where a compressor's step goes" "$WORK/figures.md" && grep -q "^#### powersgd:2 W=1 (3 steps)" "$WORK/figures.md" &&
    grep -q "^## Where a training step's time goes" "$WORK/figures.md" || fail "figures.md lacks the traces: $(cat "$WORK/figures.md")"
# Every goal has a ratio: nothing is "not measured" (whether it is met on this CPU does not matter).
grep -q "not measured\|failed" "$WORK/figures.md" && fail "figures.md has a row without a figure: $(cat "$WORK/figures.md")"
[ "$(grep -cE '\| (ok|MISSED) \|$' "$WORK/figures.md")" = 11 ] || fail "figures.md should have 11 verdicts: $(cat "$WORK/figures.md")"

# A program that fails is recorded and the rest still runs.
broken=$WORK/broken
ACC_BUILD_DIR=$WORK/no-build DEVICE=cpu VALUES=20000 SHAPES=tiny REPS=1 THREADS=1 scripts/gpu/bench-compress.sh \
    "$broken" 2>"$WORK/broken.err" || fail "bench-compress.sh gave up when compress-bench was missing"
grep -q '"side": "flat", "error": "failed, see logs/compress-bench-flat.log"' "$broken/compress.jsonl" ||
    fail "the missing compress-bench was not recorded: $(cat "$broken/compress.jsonl")"
grep -q '"side": "pytorch"' "$broken/compress.jsonl" && ! grep -q '"side": "pytorch", "error"' "$broken/compress.jsonl" ||
    fail "the PyTorch side did not run after compress-bench failed"
"$ACC_PYTHON" scripts/gpu/figures.py "$broken" >"$WORK/broken.md" || fail "figures.py failed on a broken run"
grep -q "| powersgd:2 encode+decode.*| not measured |" "$WORK/broken.md" || fail "a failed measurement must show as not measured"
grep -q "^Failed: flat: failed, see logs/compress-bench-flat.log" "$WORK/broken.md" || fail "figures.md must name the failure"

# Nothing measured yet: empty tables, no error.
"$ACC_PYTHON" scripts/gpu/figures.py "$WORK/empty" >"$WORK/empty.md" || fail "figures.py failed on an empty directory"
grep -q "^| batch | run | images/s |" "$WORK/empty.md" || fail "figures.py wrote no table header for an empty directory"

# run-all.sh with stand-ins for cmake and ctest: a failing step is recorded, the
# next still runs, figures.md is written, and the exit status says something failed.
mkdir -p "$WORK/fake"
cat >"$WORK/fake/cmake" <<'SH'
#!/usr/bin/env bash
[ -z "${FAKE_BUILD_FAILS:-}" ] || { echo "FAILED: lib/io/grads.cpp.o"; exit 1; }
echo "-- CUDA LibTorch: NCCL backend and --device cuda enabled"
SH
cat >"$WORK/fake/ctest" <<'SH'
#!/usr/bin/env bash
case " $* " in *" -LE "*) echo "1 tests failed out of 300"; exit 8 ;; esac
echo "100% tests passed"
SH
mkdir -p "$WORK/b/bin"
printf '#!/bin/sh\necho "train-dist (Accordion toolkit) 0.1.0"\necho "LibTorch 9.9 with CUDA; CUDA kernels: 90"\n' \
    >"$WORK/b/bin/train-dist"
chmod +x "$WORK/fake/cmake" "$WORK/fake/ctest" "$WORK/b/bin/train-dist"
got=0
PATH="$WORK/fake:$PATH" ACC_GPU_KIT=none B="$WORK/b" scripts/gpu/run-all.sh second "$WORK/ra" >/dev/null \
    2>"$WORK/ra.err" || got=$?
[ "$got" = 1 ] || fail "run-all.sh second with a failing test run: exit $got, expected 1"
printf 'build (whole tree)\tok\ngpu.python_hook_cuda\tok\nctest -LE '"'"'slow|gpu'"'"'\tFAILED (exit 8)\n' >"$WORK/want"
cut -f1,2 "$WORK/ra/steps.tsv" | diff "$WORK/want" - >&2 || fail "run-all.sh recorded the wrong steps"
grep -qF "| ctest -LE 'slow\|gpu' | FAILED (exit 8) |" "$WORK/ra/figures.md" || fail "figures.md lacks the failed step"
grep -q "configure: -- CUDA LibTorch.*; LibTorch 9.9 with CUDA; CUDA kernels: 90$" "$WORK/ra.err" ||
    fail "run-all.sh did not report the configure line and what train-dist --version says"
grep -q "configure: .*CUDA kernels: 90$" "$WORK/ra/summary.txt" || fail "summary.txt lacks what the programs were built with"
got=0
FAKE_BUILD_FAILS=1 PATH="$WORK/fake:$PATH" ACC_GPU_KIT=none B="$WORK/b" scripts/gpu/run-all.sh short "$WORK/rb" \
    >/dev/null 2>"$WORK/rb.err" || got=$?
[ "$got" = 1 ] || fail "run-all.sh short with a failing build: exit $got, expected 1"
[ "$(cut -f1,2 "$WORK/rb/steps.tsv")" = "$(printf 'build (programs and test_gpu)\tFAILED (exit 1)')" ] ||
    fail "a failed build must stop the benchmarks: $(cat "$WORK/rb/steps.tsv")"
[ -f "$WORK/rb/figures.md" ] || fail "run-all.sh wrote no figures.md after a failed build"
# No time left: nothing starts, the step says why, figures.md is still written.
got=0
BUDGET=5 PATH="$WORK/fake:$PATH" ACC_GPU_KIT=none B="$WORK/b" scripts/gpu/run-all.sh second "$WORK/rc" \
    >/dev/null 2>"$WORK/rc.err" || got=$?
[ "$got" = 1 ] || fail "run-all.sh with no time left: exit $got, expected 1"
grep -q "warning: the plan's [0-9]* s exceed BUDGET (5 s)" "$WORK/rc.err" || fail "run-all.sh did not warn that its plan exceeds BUDGET"
[ "$(cut -f1,2 "$WORK/rc/steps.tsv")" = "$(printf 'build (whole tree)\tNOT RUN (5 seconds reached)')" ] ||
    fail "with no time left the build must not start: $(cat "$WORK/rc/steps.tsv")"
[ -f "$WORK/rc/figures.md" ] || fail "run-all.sh wrote no figures.md with no time left"

expect_exit 2 "usage: scripts/gpu/run-all.sh \[--cpu-check\] \[short\|second" -- scripts/gpu/run-all.sh -x "$WORK/r"
expect_exit 1 "error: $WORK/no-kit/env.sh: no GPU kit" -- env ACC_GPU_KIT="$WORK/no-kit" scripts/gpu/run-all.sh short "$WORK/r"
finish
