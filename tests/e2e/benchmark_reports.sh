#!/usr/bin/env bash
# docs/benchmarks.md's figures match the raw data under docs/benchmarks/: each
# benchmark script makes its report again from a kept run's raw data
# (BENCH_FROM=DIR) and it equals the report.txt (and shaped-report.txt) kept beside
# them, every report quoted in docs/benchmarks.md is a kept report's text, and every
# goal-table figure is the number of the report line it is tied to. (Its tables made
# from raw data, between '<!-- table: NAME -->' lines, are e2e.results_tables'.)
source "$(dirname "$0")/common.sh"
bench=$ACC_SOURCE/docs/benchmarks
export ACC_PYTHON

# The script that made a raw-data directory; compress-bench-table's report is the
# program's own output (its command is in docs/benchmarks.md), CI's are logs.
script_for() {
    case $(basename "$1") in
    compressor-speed* | acc-simd-*) echo bench-compress.sh ;;
    comm-profile-loop*) echo bench-comm-profile.sh ;;
    compute-per-step*) echo bench-comm-profile-compute.sh ;;
    hook*) echo bench-hook.sh ;;
    train-dist*) echo bench-train-dist.sh ;;
    compress-bench-table | ci) echo - ;;
    *) echo "?" ;;
    esac
}

checked=0
while IFS= read -r dir; do
    script=$(script_for "$dir")
    [ "$script" != "?" ] ||
        { fail "$dir: no benchmark script is known to make its report (add it to $(basename "$0"))"; continue; }
    [ "$script" != - ] || continue
    # A report's exit status says whether its goals were met; what matters here is its text.
    BENCH_FROM=$dir bash "$ACC_SOURCE/scripts/$script" >"$WORK/made.txt" 2>"$WORK/err" ||
        grep -q . "$WORK/made.txt" || { fail "BENCH_FROM=$dir $script: $(cat "$WORK/err")"; continue; }
    cat "$dir/report.txt" $([ ! -e "$dir/shaped-report.txt" ] || echo "$dir/shaped-report.txt") >"$WORK/kept.txt"
    diff "$WORK/kept.txt" "$WORK/made.txt" >"$WORK/diff" ||
        fail "$dir: $script makes a report that differs from the one kept:$(printf '\n')$(cat "$WORK/diff")"
    checked=$((checked + 1))
done < <(find "$bench" -name report.txt -printf '%h\n' | sort)
[ "$checked" -ge 8 ] || fail "only $checked reports were made again (docs/benchmarks/ has at least 8)"

# Every plain code block of docs/benchmarks.md (a report) appears, line for line, in
# one kept report (report.txt, or report.txt followed by shaped-report.txt), and every
# figure of a "| goal | ..." table is the number at its place on the report line its
# figures comment ties it to (tests/e2e/benchmark_figures.py says how).
figures="$ACC_PYTHON $(dirname "$0")/benchmark_figures.py"
$figures check "$ACC_SOURCE/docs/benchmarks.md" "$bench" >"$WORK/out" 2>"$WORK/err" ||
    fail "docs/benchmarks.md's figures: $(cat "$WORK/err")"
grep -qE "^([0-9]+) reports quoted, \1 of them kept; ([6-9]|[1-9][0-9]+) goal tables, [0-9]+ figures tied" "$WORK/out" ||
    fail "benchmark_figures.py check said: $(cat "$WORK/out")"

# A goal-table figure changed by one digit is seen, naming its line.
sed 's/| 6.85x against 6.60x,/| 6.85x against 6.61x,/' "$ACC_SOURCE/docs/benchmarks.md" >"$WORK/benchmarks.md"
! cmp -s "$WORK/benchmarks.md" "$ACC_SOURCE/docs/benchmarks.md" || fail "the test's edit did not change a goal table"
expect_exit 1 "^docs/benchmarks.md:[0-9]+: 6.61 is not number 3 of the line 'train-dist uncompressed' under benchmarks/hook-avx512/ \(6.60\)" -- \
    $figures check "$WORK/benchmarks.md" "$bench"
# A figure copied from another line of the same report is seen: train-dist's median
# ratio without compression (0.97) given as the one with PowerSGD (0.949, so 0.95),
# which the section's report prints, but on another line.
sed 's/| 0.98x fastest, 0.97x median (3.772 s/| 0.98x fastest, 0.95x median (3.772 s/' \
    "$ACC_SOURCE/docs/benchmarks.md" >"$WORK/benchmarks.md"
! cmp -s "$WORK/benchmarks.md" "$ACC_SOURCE/docs/benchmarks.md" || fail "the test's edit did not change a goal table"
expect_exit 1 "^docs/benchmarks.md:[0-9]+: 0.95 is not number 6 of the line 'uncompressed vs DDP' under benchmarks/train-dist/ \(0.974\)" -- \
    $figures check "$WORK/benchmarks.md" "$bench"
# So is a figure tied to a line the report does not have, or to more places than the cell has figures.
sed 's/^uncompressed vs DDP = 5, 6, 1, 3$/uncompressed vs dense = 5, 6, 1, 3/' "$ACC_SOURCE/docs/benchmarks.md" >"$WORK/benchmarks.md"
expect_exit 1 "'uncompressed vs dense' names 0 lines of the report, not one" -- $figures check "$WORK/benchmarks.md" "$bench"
sed 's/^powersgd:2 vs DDP = 5, 6, 1, 3$/powersgd:2 vs DDP = 5, 6, 1, 3, 4/' "$ACC_SOURCE/docs/benchmarks.md" >"$WORK/benchmarks.md"
expect_exit 1 "column 2 has 4 figures, its figures comment ties 5" -- $figures check "$WORK/benchmarks.md" "$bench"
awk '/^<!-- figures: benchmarks\/hook\/$/ { skip = 1 } skip && /^-->$/ { skip = 0; next } !skip' \
    "$ACC_SOURCE/docs/benchmarks.md" >"$WORK/benchmarks.md"
expect_exit 1 "a goal table without a '<!-- figures: ... -->' comment just above it" -- \
    $figures check "$WORK/benchmarks.md" "$bench"
# And in every table this check covers: each goal-table figure with each of its digits
# changed to each other value, each figure copied from another line of its report (the
# number there nearest to it), each quoted report with a digit changed.
$figures self-test "$ACC_SOURCE/docs/benchmarks.md" "$bench" >"$WORK/out" 2>"$WORK/err" ||
    fail "a changed figure was not seen: $(cat "$WORK/err" "$WORK/out")"
grep -qE "^([0-9]+) figures changed by one digit, ([0-9]+) copied from another line, ([0-9]+) quoted reports changed: [0-9]+ seen$" \
    "$WORK/out" || fail "benchmark_figures.py self-test said: $(cat "$WORK/out")"

# A changed figure in a kept run's raw data shows.
cp -r "$bench/compute-per-step" "$WORK/changed"
sed -i '2s/,0\./,1./' "$WORK/changed/compute.csv"
BENCH_FROM=$WORK/changed bash "$ACC_SOURCE/scripts/bench-comm-profile-compute.sh" >"$WORK/made.txt" 2>&1 ||
    fail "BENCH_FROM=$WORK/changed: $(cat "$WORK/made.txt")"
! cmp -s "$WORK/made.txt" "$WORK/changed/report.txt" || fail "a changed raw figure made the same report"
cmp -s "$WORK/changed/report.txt" "$bench/compute-per-step/report.txt" || fail "BENCH_FROM wrote to its directory"

# Bad input: a directory that is not there, one without the raw data, both variables.
expect_exit 2 "BENCH_FROM=$WORK/none: not a directory" -- \
    env BENCH_FROM="$WORK/none" bash "$ACC_SOURCE/scripts/bench-compress.sh"
mkdir "$WORK/empty"
expect_exit 1 "BENCH_FROM=$WORK/empty: no flat.json there" -- \
    env BENCH_FROM="$WORK/empty" bash "$ACC_SOURCE/scripts/bench-compress.sh"
expect_exit 2 "BENCH_FROM and BENCH_RAW: give one" -- \
    env BENCH_FROM="$WORK/empty" BENCH_RAW="$WORK/raw" bash "$ACC_SOURCE/scripts/bench-compress.sh"
echo "$checked reports made again from their raw data"
finish
