# The GPU flow, checked on the CPU so that it cannot rot between GPU runs:
# scripts/gpu/run-all.sh --cpu-check runs every step of the short run (the GPU unit
# tests, both benchmarks with the programs of this build, the programs' GPU tests) and
# of the second (the Python package's GPU test, the default suite), prints its plan
# first, and packs the results into one archive beside a few files (at most 8 in all,
# for machines that hand back few files); a failing step is recorded while the rest still runs;
# without the kit, LibTorch's prefix still comes from the Python that has torch, and
# the short run builds the programs and test_gpu alone for the GPU's architecture;
# scripts/gpu/make-kit.sh copies a kit into the checkout, without Fashion-MNIST unless
# asked, and refuses a bad one.
source "$ACC_SOURCE/tests/e2e/common.sh"
cd "$ACC_SOURCE"
export ACC_PYTHON
mkdir -p "$WORK/tmp"
export TMPDIR=$WORK/tmp # run-all.sh's staging folder must be gone afterwards

# A stand-in build directory: this build's programs, and a few tests of each kind,
# so that the ctest steps run quickly (and not this test again) and show which
# tests each of them selects.
b=$WORK/b
mkdir -p "$b"
ln -s "$ACC_BIN" "$b/bin"
cat >"$b/CTestTestfile.cmake" <<'EOF2'
add_test(tiny.pass "/bin/sh" "-c" "echo tiny-pass-ran")
set_tests_properties(tiny.pass PROPERTIES LABELS "unit")
add_test(tiny.slow "/bin/sh" "-c" "exit 1")
set_tests_properties(tiny.slow PROPERTIES LABELS "slow")
add_test(gpu.unit "/bin/sh" "-c" "echo gpu-unit-ran")
set_tests_properties(gpu.unit PROPERTIES LABELS "gpu")
add_test(gpu.program_cuda "/bin/sh" "-c" "echo 'SKIPPED: no CUDA device'; exit 77")
set_tests_properties(gpu.program_cuda PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77)
add_test(gpu.python_hook_cuda "/bin/sh" "-c" "echo python-hook-ran")
set_tests_properties(gpu.python_hook_cuda PROPERTIES LABELS "gpu")
add_test(other.fails "/bin/sh" "-c" "exit 1")
EOF2

# check_out DIR LOG...: what the GPU machine would return: at most 8 files, with names
# it accepts; the archive with the steps, the logs (LOG... among them) and figures.md.
check_out() {
    local dir=$1 n
    shift
    n=$(find "$dir" -type f | wc -l)
    [ "$n" -le 8 ] || fail "$dir: $n files, more than the 8 run-all.sh leaves at most: $(find "$dir" -type f)"
    [ "$(cd "$dir" && find . -type f | sort | tr '\n' ' ')" = \
        "./figures.md ./gpu-results.tar.gz ./steps.tsv ./summary.txt " ] ||
        fail "$dir: expected gpu-results.tar.gz, summary.txt, steps.tsv and figures.md: $(ls -A "$dir")"
    tar -tzf "$dir/gpu-results.tar.gz" >"$dir.list" || fail "$dir/gpu-results.tar.gz: not a readable archive"
    for f in steps.tsv logs/ figures.md summary.txt "$@"; do
        grep -qx "gpu-results/$f" "$dir.list" || fail "$dir/gpu-results.tar.gz lacks $f: $(tr '\n' ' ' <"$dir.list")"
    done
    mkdir -p "$dir.x"
    tar -xzf "$dir/gpu-results.tar.gz" -C "$dir.x"
    cmp -s "$dir/steps.tsv" "$dir.x/gpu-results/steps.tsv" || fail "$dir/steps.tsv differs from the archive's"
    # Every step: a name, a status, whole seconds and its log.
    awk -F'\t' 'NF != 4 || $2 == "" || $3 !~ /^[0-9]+$/ || $4 !~ /^logs\// { bad = 1; print "bad line: " $0 }
        END { exit bad }' "$dir/steps.tsv" >&2 || fail "$dir/steps.tsv has a malformed line"
}

short_steps=$(printf '%s\n' "build (existing)" gpu.unit bench-train bench-compress "ctest -L gpu (programs)")
second_steps=$(printf '%s\n' "build (existing)" gpu.python_hook_cuda "ctest -LE 'slow|gpu'")

# The short run, as it runs on a GPU, on the CPU in seconds (the short run is the default).
out=$WORK/ok-run
got=0
B=$b CHECK_TESTS='^tiny\.' scripts/gpu/run-all.sh --cpu-check short "$out" >"$WORK/ok.out" 2>"$WORK/ok.err" || got=$?
[ "$got" = 0 ] || fail "run-all.sh --cpu-check: exit $got, expected 0: $(tail -20 "$WORK/ok.err")"
check_out "$out" compress.jsonl train.jsonl logs/bench-compress.log logs/ctest-gpu-unit.log logs/ctest-gpu.log
[ "$(cut -f1 "$out/steps.tsv")" = "$short_steps" ] || fail "the short run ran other steps: $(cat "$out/steps.tsv")"
[ "$(cut -f2 "$out/steps.tsv" | sort -u)" = ok ] || fail "a step failed: $(cat "$out/steps.tsv")"
# The plan comes first, with each step's expected seconds and the limit.
head -1 "$WORK/ok.err" | grep -Eq "^run-all: plan \(short \(--cpu-check\)\): kit ~[0-9]+ s, build \(programs and test_gpu\) ~[0-9]+ s, gpu.unit ~[0-9]+ s, bench-train ~[0-9]+ s, bench-compress ~[0-9]+ s, ctest -L gpu \(programs\) ~[0-9]+ s; about [0-9]+ s of a 420 s limit$" ||
    fail "run-all.sh did not print its plan first: $(head -2 "$WORK/ok.err")"
planned=$(head -1 "$WORK/ok.err" | sed -E 's/.*about ([0-9]+) s of.*/\1/')
[ "$planned" -le 420 ] || fail "the short run's plan ($planned s) does not fit its 420 s"
grep -q "^plan (short (--cpu-check)): kit ~" "$out/summary.txt" || fail "summary.txt lacks the plan"
grep -q "gpu-results/trace-train-powersgd2-2.json" "$out.list" && grep -q "gpu-results/trace-flat.json" "$out.list" ||
    fail "the archive lacks the traces: $(tr '\n' ' ' <"$out.list")"
x=$out.x/gpu-results
grep -q "gpu.unit .*Passed" "$x/logs/ctest-gpu-unit.log" || fail "the gpu.unit step did not run gpu.unit"
grep -q "program_cuda\|python_hook\|tiny" "$x/logs/ctest-gpu-unit.log" && fail "the gpu.unit step ran other tests"
grep -q "gpu.program_cuda (Skipped)" "$x/logs/ctest-gpu.log" || fail "the programs' GPU tests did not run"
grep -q "gpu.unit \|python_hook\|tiny\|other.fails" "$x/logs/ctest-gpu.log" &&
    fail "the programs' GPU step ran gpu.unit, the Python package's test or a test without the label"
for row in "| 2 | grad-dump |" "| 2 | train-dist --compress powersgd:2 |" "| topk:0.01 encode, 20,000 floats"; do
    grep -qF -- "$row" "$out/figures.md" || fail "figures.md lacks the row '$row'"
done
grep -q "not measured\|Failed" "$out/figures.md" && fail "the short run left a measurement out: $(cat "$out/figures.md")"
grep -q "^scripts/gpu/run-all.sh short (--cpu-check): finished, exit status 0" "$out/summary.txt" ||
    fail "summary.txt does not say how the run ended: $(head -3 "$out/summary.txt")"
grep -q "^bench-compress  *ok" "$out/summary.txt" || fail "summary.txt lacks the steps: $(cat "$out/summary.txt")"
# (PyTorch 2.x's python keeps a compile cache there, torchinductor_USER: not ours.)
left=$(ls -A "$WORK/tmp" | grep -v '^torchinductor_' || true)
[ -z "$left" ] || fail "run-all.sh left $left in TMPDIR"

# The second run: the Python package's GPU test, then the default suite.
out=$WORK/second-run
got=0
B=$b CHECK_TESTS='^tiny\.' scripts/gpu/run-all.sh --cpu-check second "$out" >/dev/null 2>"$WORK/second.err" || got=$?
[ "$got" = 0 ] || fail "run-all.sh --cpu-check second: exit $got, expected 0: $(tail -20 "$WORK/second.err")"
check_out "$out" logs/ctest-gpu-python.log logs/ctest-default.log
[ "$(cut -f1 "$out/steps.tsv")" = "$second_steps" ] || fail "the second run ran other steps: $(cat "$out/steps.tsv")"
head -1 "$WORK/second.err" | grep -q "^run-all: plan (second (--cpu-check)): .*of a 540 s limit$" ||
    fail "the second run did not print its plan first: $(head -1 "$WORK/second.err")"
x=$out.x/gpu-results
grep -q "gpu.python_hook_cuda .*Passed" "$x/logs/ctest-gpu-python.log" || fail "the second run did not run the Python test"
grep -q "tiny.pass .*Passed" "$x/logs/ctest-default.log" || fail "the default suite did not run tiny.pass"
grep -q "tiny.slow\|gpu\.\|other.fails" "$x/logs/ctest-default.log" &&
    fail "the default suite ran a slow or gpu test, or one outside CHECK_TESTS: $(cat "$x/logs/ctest-default.log")"

# An archive over ARCHIVE_LIMIT is packed again without the traces; their summaries stay.
small=$WORK/small-archive
B=$b CHECK_TESTS='^tiny\.' ARCHIVE_LIMIT=1000 scripts/gpu/run-all.sh --cpu-check short "$small" >/dev/null 2>&1 ||
    fail "run-all.sh --cpu-check with a small ARCHIVE_LIMIT failed"
check_out "$small" compress.jsonl
grep -q "gpu-results/trace-" "$small.list" && fail "the traces stayed in an archive over ARCHIVE_LIMIT"
grep -q "gpu-results/traces-compress.md" "$small.list" || fail "the traces' summaries left the archive too"
grep -q "the traces (trace-\*.json) left out" "$small/summary.txt" || fail "summary.txt does not say the traces were left out"

# A benchmark that fails (a bad size stops bench-train; a bad preset fails five of
# bench-compress's measurements) is recorded, the rest still runs, the archive is
# still written, and the exit status is 1.
out=$WORK/bad-run
got=0
B=$b CHECK_TESTS='^tiny\.' BATCHES=x SHAPES=no-such-preset scripts/gpu/run-all.sh --cpu-check short "$out" \
    >/dev/null 2>"$WORK/bad.err" || got=$?
[ "$got" = 1 ] || fail "run-all.sh --cpu-check with failing benchmarks: exit $got, expected 1"
check_out "$out" compress.jsonl
[ "$(cut -f1 "$out/steps.tsv")" = "$short_steps" ] || fail "a failure stopped the flow: $(cat "$out/steps.tsv")"
printf '%s\n' ok ok "FAILED (exit 1)" "FAILED (5 measurement(s) failed)" ok >"$WORK/want"
cut -f2 "$out/steps.tsv" | diff "$WORK/want" - >&2 || fail "the failures were recorded wrongly"
grep '"side": "flat"' "$out.x/gpu-results/compress.jsonl" | grep -q '"results"' ||
    fail "bench-compress did not measure what it could: $(cat "$out.x/gpu-results/compress.jsonl")"
grep -q "x: unbound variable" "$out.x/gpu-results/logs/bench-train.log" || fail "bench-train's log is not in the archive"
grep -q "^== bench-train: FAILED (exit 1)" "$out/summary.txt" || fail "summary.txt does not show the failed step"
grep -q "exit status 1" "$out/summary.txt" || fail "summary.txt does not give the exit status"

# Without the kit the build still gets LibTorch's prefix and the tests' Python from
# the Python that has torch (stand-ins for cmake, ctest, nvidia-smi and that Python);
# the short run builds the programs and test_gpu alone, for the GPU's architecture
# (nvidia-smi's compute capability, or CUDA_ARCH), the second the whole tree for the
# default architectures.
mkdir -p "$WORK/fake"
cat >"$WORK/fake/cmake" <<SH
#!/usr/bin/env bash
echo "\$*" >>"$WORK/cmake.calls"
printf '%s\n' "\$@" >>"$WORK/cmake.args"
echo "-- CUDA LibTorch: NCCL backend and --device cuda enabled"
SH
printf '#!/bin/sh\necho "100%% tests passed"\n' >"$WORK/fake/ctest"
printf '#!/bin/sh\necho /opt/fake-torch/share/cmake\n' >"$WORK/fake/torch-python"
printf '#!/bin/sh\necho "ModuleNotFoundError: No module named torch" >&2\nexit 1\n' >"$WORK/fake/no-torch"
cat >"$WORK/fake/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in *compute_cap*) echo "8.9" ;; -L) echo "GPU 0: NVIDIA Stand-in (UUID: GPU-0)" ;; *) echo "stand-in" ;; esac
SH
chmod +x "$WORK/fake/"*
# run_fake MODE OUTDIR [VAR=VALUE...]: run-all.sh MODE with the stand-ins, its calls of
# cmake in $WORK/cmake.calls; the short run's benchmarks find no programs in the stand-in
# build and fail at once (tiny sizes on the CPU), so its exit status is not checked.
run_fake() {
    local mode=$1 dir=$2
    shift 2
    rm -f "$WORK/cmake.args" "$WORK/cmake.calls"
    env PATH="$WORK/fake:$PATH" ACC_GPU_KIT=none PYTHON="$WORK/fake/torch-python" B="$WORK/gb" DEVICE=cpu BATCHES=x \
        VALUES=1000 SHAPES=tiny REPS=1 "$@" scripts/gpu/run-all.sh "$mode" "$dir" >/dev/null 2>"$WORK/none.err"
}
run_fake short "$WORK/none" || true
[ "$(cut -f1 "$WORK/none/steps.tsv" | head -2)" = "$(printf 'build (programs and test_gpu)\ngpu.unit')" ] ||
    fail "run-all.sh short with ACC_GPU_KIT=none: $(cat "$WORK/none/steps.tsv") $(tail "$WORK/none.err")"
grep -qx -- "-DCMAKE_PREFIX_PATH=/opt/fake-torch/share/cmake" "$WORK/cmake.args" ||
    fail "ACC_GPU_KIT=none: no LibTorch prefix passed to cmake: $(cat "$WORK/cmake.args")"
grep -qx -- "-DACC_PYTHON=$WORK/fake/torch-python" "$WORK/cmake.args" ||
    fail "ACC_GPU_KIT=none: no -DACC_PYTHON passed to cmake: $(cat "$WORK/cmake.args")"
grep -qx -- "-DACC_CUDA_ARCHITECTURES=89-real" "$WORK/cmake.args" ||
    fail "the short run did not build for nvidia-smi's compute capability 8.9: $(cat "$WORK/cmake.args")"
grep -q -- "--build $WORK/gb -j 16 --target grad-dump regime-detect train-dist compress-bench comm-profile test_gpu$" \
    "$WORK/cmake.calls" || fail "the short run did not build the programs and test_gpu alone: $(cat "$WORK/cmake.calls")"
run_fake short "$WORK/none" CUDA_ARCH=90 || true
grep -qx -- "-DACC_CUDA_ARCHITECTURES=90-real" "$WORK/cmake.args" || fail "CUDA_ARCH=90 was not passed on"
run_fake second "$WORK/none" || fail "run-all.sh second with ACC_GPU_KIT=none failed: $(tail "$WORK/none.err")"
grep -q -- "--build $WORK/gb -j 16$" "$WORK/cmake.calls" || fail "the second run must build the whole tree: $(cat "$WORK/cmake.calls")"
grep -qx -- "-UACC_CUDA_ARCHITECTURES" "$WORK/cmake.args" && ! grep -q -- "-DACC_CUDA_ARCHITECTURES" "$WORK/cmake.args" ||
    fail "the second run must build the default architectures: $(cat "$WORK/cmake.args")"
expect_exit 1 "run-all: error: PYTHON=$WORK/fake/no-torch: cannot import torch" -- \
    env ACC_GPU_KIT=none PYTHON="$WORK/fake/no-torch" scripts/gpu/run-all.sh short "$WORK/none2"
expect_exit 2 "usage: scripts/gpu/run-all.sh \[--cpu-check\] \[short\|second \[OUTDIR\]\]" -- \
    scripts/gpu/run-all.sh --bogus "$WORK/r"
expect_exit 2 "usage: scripts/gpu/run-all.sh" -- scripts/gpu/run-all.sh shrot "$WORK/r"
expect_exit 2 "usage: scripts/gpu/run-all.sh" -- scripts/gpu/run-all.sh "$WORK/r"
expect_exit 2 "usage: scripts/gpu/run-all.sh" -- scripts/gpu/run-all.sh short "$WORK/r" extra

# make-kit.sh, in a checkout of its own, with a kit made here: read-only, as a kit
# directory may be, so that a second run must still replace the first copy.
if ! command -v git >/dev/null; then
    echo "no git here: make-kit.sh, which needs a git checkout, is not checked"
    finish
    exit 0
fi
repo=$WORK/repo
mkdir -p "$repo/scripts/gpu" "$WORK/kit/debs" "$WORK/kit/gloo/include/gloo" "$WORK/fm"
cp scripts/gpu/make-kit.sh "$repo/scripts/gpu/"
git -C "$repo" init -q
git -C "$repo" add scripts
echo 'echo kit' >"$WORK/kit/env.sh"
echo deb >"$WORK/kit/debs/libfmt-dev_9.1.0_amd64.deb"
echo '#pragma once' >"$WORK/kit/gloo/include/gloo/algorithm.h"
echo images >"$WORK/fm/train-images-idx3-ubyte.gz"
chmod -R a-w "$WORK/kit"
trap 'chmod -R u+w "$WORK"; rm -rf "$WORK"' EXIT # a user other than root cannot remove read-only folders
# With --with-data (the second run's kit), twice: Fashion-MNIST goes in, and the command is the second run's.
for run in first second; do
    got=0
    FASHION_MNIST=$WORK/fm "$repo/scripts/gpu/make-kit.sh" --with-data "$WORK/kit" >"$WORK/kit.out" 2>"$WORK/kit.err" ||
        got=$?
    [ "$got" = 0 ] || fail "make-kit.sh --with-data ($run run): exit $got: $(cat "$WORK/kit.err")"
done
for f in env.sh debs/libfmt-dev_9.1.0_amd64.deb gloo/include/gloo/algorithm.h data/fashion-mnist/train-images-idx3-ubyte.gz; do
    [ -f "$repo/.gpu-kit/$f" ] || fail "make-kit.sh --with-data did not copy $f into .gpu-kit"
done
printf '%s\n' 'copy: the checkout with .gpu-kit' 'command: scripts/gpu/run-all.sh second' 'copy back: gpu-results/' |
    diff - "$WORK/kit.out" >&2 || fail "make-kit.sh --with-data printed the wrong steps"
grep -Eq "make-kit: \.gpu-kit: [0-9.]+ MiB to copy with the checkout \(the kit [0-9.]+ MiB, Fashion-MNIST [0-9.]+ MiB, the checkout's files [0-9.]+ MiB\)$" \
    "$WORK/kit.err" || fail "make-kit.sh did not say the size: $(cat "$WORK/kit.err")"
grep -q "limit" "$WORK/kit.err" && fail "make-kit.sh names a limit: $(cat "$WORK/kit.err")"
# Without it (the short run's kit, the default): the same kit without the data set.
FASHION_MNIST=$WORK/fm "$repo/scripts/gpu/make-kit.sh" "$WORK/kit" >"$WORK/kit.out" 2>"$WORK/kit.err" ||
    fail "make-kit.sh: $(cat "$WORK/kit.err")"
[ -f "$repo/.gpu-kit/env.sh" ] || fail "make-kit.sh did not copy env.sh"
[ -e "$repo/.gpu-kit/data" ] && fail "make-kit.sh without --with-data left Fashion-MNIST in the kit"
grep -q "Fashion-MNIST" "$WORK/kit.err" && fail "make-kit.sh without --with-data counts Fashion-MNIST: $(cat "$WORK/kit.err")"
[ "$(grep -cx '/.gpu-kit/' "$repo/.git/info/exclude")" = 1 ] ||
    fail "make-kit.sh must add /.gpu-kit/ to .git/info/exclude once: $(cat "$repo/.git/info/exclude")"
git -C "$repo" status --porcelain --untracked-files=all | grep -q gpu-kit && fail "git still sees .gpu-kit"
printf '%s\n' 'copy: the checkout with .gpu-kit' 'command: scripts/gpu/run-all.sh' 'copy back: gpu-results/' |
    diff - "$WORK/kit.out" >&2 || fail "make-kit.sh printed the wrong steps"
compgen -G "$repo/.gpu-kit.tmp*" >/dev/null && fail "make-kit.sh left a temporary copy: $(ls -A "$repo")"
"$repo/scripts/gpu/make-kit.sh" "$WORK/kit" kits/gpu >"$WORK/kit.out" 2>"$WORK/kit.err" ||
    fail "make-kit.sh into kits/gpu failed: $(cat "$WORK/kit.err")"
grep -qx "command: ACC_GPU_KIT=kits/gpu scripts/gpu/run-all.sh" "$WORK/kit.out" ||
    fail "another DEST must be named in the command: $(cat "$WORK/kit.out")"
[ -d "$repo/kits/gpu/data" ] && fail "make-kit.sh made data/ without --with-data"
grep -qx '/kits/gpu/' "$repo/.git/info/exclude" || fail "make-kit.sh did not exclude kits/gpu"
expect_exit 1 "make-kit: error: $WORK/no-such-dir: no Fashion-MNIST there" -- \
    env FASHION_MNIST="$WORK/no-such-dir" "$repo/scripts/gpu/make-kit.sh" --with-data "$WORK/kit" kits/data

mkdir -p "$WORK/no-env/debs"
mkdir -p "$repo/notes" && echo mine >"$repo/notes/todo"
expect_exit 1 "make-kit: error: $WORK/nowhere: no such directory" -- "$repo/scripts/gpu/make-kit.sh" "$WORK/nowhere"
expect_exit 1 "make-kit: error: $WORK/no-env/env.sh: missing" -- "$repo/scripts/gpu/make-kit.sh" "$WORK/no-env"
expect_exit 1 "make-kit: error: \.\./outside: DEST must be a new folder inside the checkout" -- \
    "$repo/scripts/gpu/make-kit.sh" "$WORK/kit" ../outside
expect_exit 1 "make-kit: error: notes: exists and is not a GPU kit" -- "$repo/scripts/gpu/make-kit.sh" "$WORK/kit" notes
[ -f "$repo/notes/todo" ] || fail "make-kit.sh removed a folder that was not a kit"
expect_exit 2 "usage: scripts/gpu/make-kit.sh \[--with-data\] KIT_SOURCE" -- "$repo/scripts/gpu/make-kit.sh"
expect_exit 2 "usage: scripts/gpu/make-kit.sh" -- "$repo/scripts/gpu/make-kit.sh" --bogus "$WORK/kit"
finish
