#!/usr/bin/env bash
# docs/benchmarks.md's figures match the raw data under docs/benchmarks/: each
# benchmark script makes its report again from a kept run's raw data
# (BENCH_FROM=DIR) and it equals the report.txt (and shaped-report.txt) kept beside
# them, and every report quoted in docs/benchmarks.md is a kept report's text.
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

# Every plain code block of docs/benchmarks.md (a report) appears, line for line,
# in one kept report (report.txt, or report.txt followed by shaped-report.txt).
"$ACC_PYTHON" - "$ACC_SOURCE/docs/benchmarks.md" "$bench" <<'PY' || fail "docs/benchmarks.md quotes a report that was not kept"
import glob, os, sys
lines = open(sys.argv[1]).read().split("\n")
kept = []
for report in glob.glob(os.path.join(sys.argv[2], "**", "report.txt"), recursive=True):
    text = open(report).read()
    shaped = os.path.join(os.path.dirname(report), "shaped-report.txt")
    kept.append(text)
    if os.path.exists(shaped):
        kept += [open(shaped).read(), text + open(shaped).read()]
blocks, i = [], 0
while i < len(lines):
    if lines[i].startswith("```"):
        j = lines.index("```", i + 1)
        if lines[i] == "```":  # a report; ```sh blocks are commands
            blocks.append((i + 1, "\n".join(lines[i + 1:j]) + "\n"))
        i = j
    i += 1
bad = [line for line, block in blocks if not any(block in text for text in kept)]
for line in bad:
    print(f"docs/benchmarks.md:{line}: this report is in no report.txt under docs/benchmarks/", file=sys.stderr)
print(f"{len(blocks)} reports quoted, {len(blocks) - len(bad)} of them kept")
sys.exit(1 if bad or not blocks else 0)
PY

# Every figure in a "| goal | ..." table is one its section's kept reports print, to the
# digits the table gives (its section: the raw-data directory linked last above it);
# "missed by N%" is the goal's arithmetic and is left out.
cat >"$WORK/goals.py" <<'PY'
import glob, os, re, sys
lines = open(sys.argv[1]).read().split("\n")
number = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
section, tables, bad, i = None, 0, [], 0
while i < len(lines):
    link = re.findall(r"\]\(benchmarks/([\w.-]+)/", lines[i])
    section = link[-1] if link else section
    if not lines[i].startswith("| goal |"):
        i += 1
        continue
    tables += 1
    reports = glob.glob(os.path.join(sys.argv[2], section or "-", "**", "*report.txt"), recursive=True)
    printed = [float(n.replace(",", "")) for path in reports for n in number.findall(open(path).read())]
    i += 2
    while i < len(lines) and lines[i].startswith("|"):
        for cell in lines[i].strip("|").split("|")[1:]:
            for n in number.findall(re.sub(r"missed by [\d.]+%", "", cell)):
                digits = len(n.split(".")[1]) if "." in n else 0
                if not any(abs(round(p, digits) - float(n.replace(",", ""))) < 1e-9 for p in printed):
                    bad.append(f"docs/benchmarks.md:{i + 1}: {n} is in no report under benchmarks/{section}/")
        i += 1
for line in bad:
    print(line, file=sys.stderr)
print(f"{tables} goal tables")
sys.exit(1 if bad or tables < 6 else 0)
PY
"$ACC_PYTHON" "$WORK/goals.py" "$ACC_SOURCE/docs/benchmarks.md" "$bench" >/dev/null 2>"$WORK/err" ||
    fail "a goal table's figure is not its reports': $(cat "$WORK/err")"
sed 's/| 6.85x against 6.60x,/| 6.85x against 6.61x,/' "$ACC_SOURCE/docs/benchmarks.md" >"$WORK/benchmarks.md"
! cmp -s "$WORK/benchmarks.md" "$ACC_SOURCE/docs/benchmarks.md" || fail "the test's edit did not change a goal table"
"$ACC_PYTHON" "$WORK/goals.py" "$WORK/benchmarks.md" "$bench" >/dev/null 2>"$WORK/err" &&
    fail "a goal table's changed figure was not seen"
grep -q "6.61 is in no report under benchmarks/hook-avx512/" "$WORK/err" || fail "the changed figure: $(cat "$WORK/err")"

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
