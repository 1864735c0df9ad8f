#!/usr/bin/env bash
# docs/results.md's, docs/benchmarks.md's and README.md's marked tables match the raw data they are
# made from (scripts/results-tables.py --check), and the check sees a table that does
# not: any of them with a figure changed by one digit.
source "$(dirname "$0")/common.sh"
tables="$ACC_PYTHON $ACC_SOURCE/scripts/results-tables.py"
$tables --check >"$WORK/out" 2>"$WORK/err" || fail "docs/results.md: $(cat "$WORK/err")"
grep -qE "^results-tables.py: ([0-9]+) of \1 tables match their data$" "$WORK/out" || fail "--check said: $(cat "$WORK/out")"

# The study's own report (scripts/experiments/time-to-accuracy.sh) makes the same
# tables from the same runs and writes the runs back unchanged.
variants="dense topk10x topk100x powersgd-r4 powersgd-r2 powersgd-r1 accordion-topk accordion-powersgd
          accordion-powersgd-r4 gravac-topk-exp gravac-topk-geo gravac-dgc-exp gravac-dgc-geo gravac-powersgd-exp
          gravac-powersgd-geo auto auto-r4"
$ACC_PYTHON "$ACC_SOURCE/scripts/experiments/time_to_accuracy_report.py" --out "$WORK/none" --seeds "1 2 3" \
    --models "mlp cnn" --links "20mbit 100mbit loopback" --variants "$(echo $variants)" \
    --runs "$ACC_SOURCE/docs/results/time-to-accuracy-runs.csv" --save-runs "$WORK/runs.csv" >"$WORK/report.md" \
    2>"$WORK/err" || fail "time_to_accuracy_report.py: $(cat "$WORK/err")"
cmp -s "$WORK/runs.csv" "$ACC_SOURCE/docs/results/time-to-accuracy-runs.csv" ||
    fail "time_to_accuracy_report.py --save-runs changed the runs it read"
for study in "20mbit mlp" "100mbit cnn" "loopback mlp" "loopback cnn"; do
    # results-tables.py marks stale rows; the report does not.
    awk -v begin="<!-- table: time-to-accuracy $study -->" '$0 == begin { inside = 1; next }
        /^<!-- end of table -->$/ { inside = 0 } inside { sub(/ \(stale: before [0-9a-f]+\) \|/, " |"); print }' \
        "$ACC_SOURCE/docs/results.md" >"$WORK/table.md"
    [ -s "$WORK/table.md" ] || fail "docs/results.md has no table 'time-to-accuracy $study'"
    missing=$(awk 'NR == FNR { have[$0] = 1; next } !($0 in have)' "$WORK/report.md" "$WORK/table.md")
    [ -z "$missing" ] || fail "docs/results.md's table for $study has lines the study's report does not: $missing"
done

# Rows made before a change that docs/results.md says changes their numbers are marked stale
# (results-tables.py's STALE): GraVAC DGC and PowerSGD before 62384a7. The time-to-accuracy
# tables keep theirs (8 a table); the GraVAC table's were rerun at 71792ba and have none.
for study in "gravac dense" "time-to-accuracy 20mbit mlp" "time-to-accuracy 100mbit cnn"; do
    awk -v begin="<!-- table: $study" 'index($0, begin) == 1 { inside = 1; next } /^<!-- end of table -->$/ { inside = 0 }
        inside && /^\| / && !/^\| run \|/' "$ACC_SOURCE/docs/results.md" >"$WORK/rows.md"
    marked=$(grep -c '(stale: before 62384a7) |' "$WORK/rows.md" || true)
    wrong=$(grep '(stale' "$WORK/rows.md" | grep -Ev '^\| (gravac-(dgc|powersgd)-|GraVAC (DGC|PowerSGD), )' || true)
    case $study in gravac*) want=0 ;; *) want=8 ;; esac
    [ "$marked" = "$want" ] && [ -z "$wrong" ] || fail "$study: $marked rows marked stale, expected $want: $wrong"
done
# The marks follow the commit column both ways: the GraVAC rows rerun at 71792ba, given back
# their old commit 4ccddc1, are marked again (its other rows, Top-k and the static levels, are
# not); the MLP's GraVAC DGC rows, given a later commit, lose their marks.
rm -rf "$WORK/data" && mkdir -p "$WORK/data" && cp "$ACC_SOURCE"/docs/results/*.csv "$WORK/data/"
[ "$(grep -c ',71792ba$' "$WORK/data/gravac-runs.csv")" = 144 ] ||
    fail "gravac-runs.csv: expected the 144 rows (6 variants, 3 seeds, 8 epochs) rerun at 71792ba"
sed -i 's/,71792ba$/,4ccddc1/' "$WORK/data/gravac-runs.csv"
sed -i '/,gravac-dgc-exp,/s/,\(7c38a96\|d03161e\)\r$/,abcdef0\r/' "$WORK/data/time-to-accuracy-runs.csv"  # CRLF, as csv writes it
cp "$ACC_SOURCE/docs/results.md" "$WORK/rerun.md"
$tables --doc "$WORK/rerun.md" --data "$WORK/data" >/dev/null 2>&1 || fail "rewriting with the commits changed failed"
[ "$(grep -cE '^\| gravac-(dgc|powersgd)-[a-z0-9.-]* \(stale: before 62384a7\) \| ' "$WORK/rerun.md")" = 6 ] ||
    fail "the GraVAC table's DGC and PowerSGD rows of commit 4ccddc1 are not all marked stale"
wrong=$(grep '^| [a-z0-9.-]* (stale' "$WORK/rerun.md" | grep -Ev '^\| gravac-(dgc|powersgd)-' || true)
[ -z "$wrong" ] || fail "GraVAC table rows other than DGC and PowerSGD are marked stale: $wrong"
[ "$(grep -c '^| GraVAC DGC, exponential | ' "$WORK/rerun.md")" = 2 ] ||
    fail "the MLP's GraVAC DGC rows of a later commit are still marked stale"
[ "$(grep -c '^| GraVAC DGC, exponential (stale: before 62384a7) | ' "$WORK/rerun.md")" = 2 ] ||
    fail "the CNN's GraVAC DGC rows, of the old commits, are no longer marked stale"

# The planner study's report makes the same tables from the same raw data.
for model in mlp cnn; do
    $ACC_PYTHON "$ACC_SOURCE/scripts/experiments/planner_report.py" --from-csv "$ACC_SOURCE/docs/results/planner-runs.csv" \
        --models $model >"$WORK/planner.md" 2>"$WORK/err" || fail "planner_report.py: $(cat "$WORK/err")"
    awk -v begin="<!-- table: planner $model -->" '$0 == begin { inside = 1; next } /^<!-- end of table -->$/ { inside = 0 } inside' \
        "$ACC_SOURCE/docs/results.md" >"$WORK/table.md"
    [ -s "$WORK/table.md" ] || fail "docs/results.md has no table 'planner $model'"
    missing=$(awk 'NR == FNR { have[$0] = 1; next } !($0 in have)' "$WORK/planner.md" "$WORK/table.md")
    [ -z "$missing" ] || fail "docs/results.md's planner table for $model has lines planner_report.py does not: $missing"
done
expect_exit 2 "error: give --out .* or --from-csv .*, one of them" -- \
    $ACC_PYTHON "$ACC_SOURCE/scripts/experiments/planner_report.py"

# A number changed in a table: named, exit 1, nothing written.
doc=$WORK/results.md
awk '/^<!-- table: time-to-accuracy 20mbit mlp -->$/ { inside = 1 }
     inside && /^\| Top-k 10x \|/ && !done {  # the last digit of its mean ratio, whatever it is
         if (/9x \|$/) sub(/9x \|$/, "8x |"); else sub(/[0-9]x \|$/, "9x |"); done = 1 }
     { print }' "$ACC_SOURCE/docs/results.md" >"$doc"
cmp -s "$doc" "$ACC_SOURCE/docs/results.md" && fail "the test's edit did not change the table"
cp "$doc" "$doc.before"
expect_exit 1 "the table 'time-to-accuracy 20mbit mlp' differs from its data" -- $tables --check --doc "$doc"
cmp -s "$doc" "$doc.before" || fail "--check wrote to the document"
# Without --check it is rewritten to match.
$tables --doc "$doc" >/dev/null 2>&1 || fail "rewriting $doc failed"
cmp -s "$doc" "$ACC_SOURCE/docs/results.md" || fail "the rewritten table differs from docs/results.md's"

# Every table of both documents with one figure changed by one digit (the last digit of
# its first row that has one): the check names the table's block, and rewriting it gives
# the document back.
"$ACC_PYTHON" - "$ACC_SOURCE" "$WORK" <<'PY' || fail "a table with a changed figure was not seen"
import importlib.util, os, re, sys
tree, work = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(tree, "scripts"))  # as when the script runs: accordion_runs beside it
spec = importlib.util.spec_from_file_location("results_tables", os.path.join(tree, "scripts", "results-tables.py"))
rt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rt)
studies = rt.Studies(os.path.join(tree, "docs", "results"), os.path.join(tree, "docs", "benchmarks"))
seen = 0
for name in ("results.md", "benchmarks.md"):
    lines = open(os.path.join(tree, "docs", name), encoding="utf-8").read().split("\n")
    block, tables = None, 0
    for i, line in enumerate(lines):
        if rt.BEGIN.match(line):
            block, tables = rt.BEGIN.match(line).group(1), 0
        elif line == rt.END:
            assert tables > 0, (name, block, "a marked block without a table")
            block = None
        elif block and line.startswith("|---"):  # a table's first row follows
            tables += 1
            row = next(k for k in range(i + 1, len(lines)) if re.search(r"\d", lines[k]))
            assert lines[row].startswith("|"), (name, block, "a table without a figure")
            m = re.search(r"\d(?=\D*$)", lines[row])
            changed = lines[:row] + [lines[row][:m.start()] + str((int(m.group()) + 1) % 10) +
                                     lines[row][m.end():]] + lines[row + 1:]
            doc = os.path.join(work, name)
            open(doc, "w", encoding="utf-8").write("\n".join(changed))
            out, names, differ = rt.tables_of(doc, studies)
            assert differ == [block], (name, block, lines[row], differ)
            assert out == lines, (name, block, "rewriting does not give the document back")
            seen += 1
assert seen >= 27, seen  # results.md's 24 tables, benchmarks.md's 3
print(f"{seen} tables with a changed figure seen")
PY

# README.md's quickstart table, made from the kept run in docs/results/quickstart/: each of its
# figures changed by one digit (its last) is seen, and rewriting gives the README back. A rerun
# on another machine is not compared: its accuracies may differ in the last digit, its times more.
"$ACC_PYTHON" - "$ACC_SOURCE" "$WORK" <<'PY' || fail "a changed figure of the README's quickstart table was not seen"
import importlib.util, os, re, sys
tree, work = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(tree, "scripts"))
spec = importlib.util.spec_from_file_location("results_tables", os.path.join(tree, "scripts", "results-tables.py"))
rt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rt)
studies = rt.Studies(os.path.join(tree, "docs", "results"), os.path.join(tree, "docs", "benchmarks"))
lines = open(os.path.join(tree, "README.md"), encoding="utf-8").read().split("\n")
begin = lines.index("<!-- table: quickstart -->")
end = lines.index(rt.END, begin)
doc = os.path.join(work, "README.md")
seen = 0
for row in range(begin + 3, end - 1):  # the fence and the header first, the fence last
    for m in re.finditer(r"\d+(\.\d+)?", lines[row]):
        if lines[row][m.end():m.end() + 1] == "," or lines[row][:m.start()].endswith(":"):
            continue  # the critical epochs' ranges, the levels' names
        k = m.end() - 1
        changed = lines[:row] + [lines[row][:k] + str((int(lines[row][k]) + 1) % 10) + lines[row][k + 1:]] + lines[row + 1:]
        open(doc, "w", encoding="utf-8").write("\n".join(changed))
        out, names, differ = rt.tables_of(doc, studies)
        assert differ == ["quickstart"], (lines[row], m.group(), differ)
        assert out == lines, "rewriting does not give the README back"
        seen += 1
assert seen >= 15, seen  # five figures a row, three rows
print(f"{seen} changed figures of the quickstart table seen")
PY
# The kept table.txt must be the table of the metrics files beside it.
mkdir -p "$WORK/qs/quickstart" && cp "$ACC_SOURCE"/docs/results/quickstart/* "$WORK/qs/quickstart/"
sed -i 's/88\.49%/88.48%/' "$WORK/qs/quickstart/table.txt"
printf '<!-- table: quickstart -->\n<!-- end of table -->\n' >"$doc"
expect_exit 2 "quickstart/table.txt: not the table of the metrics files beside it" -- \
    $tables --check --doc "$doc" --data "$WORK/qs"

# Bad input: a table without its end, one this script does not make, data that is not a study's CSV.
sed '/^<!-- end of table -->$/d' "$ACC_SOURCE/docs/results.md" >"$doc"
expect_exit 2 "has no '<!-- end of table -->' line after it" -- $tables --check --doc "$doc"
printf '<!-- table: planner resnet -->\n<!-- end of table -->\n' >"$doc"
expect_exit 2 "planner-runs.csv: no runs of resnet" -- $tables --check --doc "$doc"
printf '<!-- table: model-check-medians nowhere -->\n<!-- end of table -->\n' >"$doc"
expect_exit 2 "model-check-nowhere.csv: No such file or directory" -- $tables --check --doc "$doc"
printf '<!-- table: planner -->\n<!-- end of table -->\n' >"$doc"
expect_exit 2 "a table named 'planner', which this script does not make" -- $tables --check --doc "$doc"
printf '<!-- table: model-check-fits avx512-rerun -->\n<!-- end of table -->\n' >"$doc"
expect_exit 2 "model-check-avx512-rerun.csv: no median_alpha_modelled_seconds column" -- $tables --check --doc "$doc"
printf '<!-- table: ci nowhere.log -->\n<!-- end of table -->\n' >"$doc"
expect_exit 2 "ci/nowhere.log: No such file or directory" -- $tables --check --doc "$doc"
# --doc given more than once: each document is read, a missing one named.
expect_exit 2 "none.md: No such file or directory" -- $tables --check --doc "$ACC_SOURCE/docs/results.md" --doc "$WORK/none.md"
# The benchmarks' raw data: a log that is not .ci/run's, a compute.csv without its columns.
mkdir -p "$WORK/bench/ci" "$WORK/bench/compute-per-step"
printf 'test.sh: build took 1 s\n' >"$WORK/bench/ci/ci-run.log"
printf '<!-- table: ci ci-run.log -->\n<!-- end of table -->\n' >"$doc"
expect_exit 2 "ci-run.log: no 'test.sh: ... passed in' line: not a log of .ci/run" -- \
    $tables --check --doc "$doc" --benchmarks "$WORK/bench"
printf 'model,batch\nmlp,32\n' >"$WORK/bench/compute-per-step/compute.csv"
printf '<!-- table: compute-per-step -->\n<!-- end of table -->\n' >"$doc"
expect_exit 2 "compute.csv: not bench-comm-profile-compute.sh's compute.csv" -- \
    $tables --check --doc "$doc" --benchmarks "$WORK/bench"
for bad in time-to-accuracy-runs.csv accordion-runs.csv gravac-runs.csv model-check.csv planner-runs.csv \
    auto-overhead-runs.csv; do
    rm -rf "$WORK/data"
    mkdir -p "$WORK/data"
    cp "$ACC_SOURCE"/docs/results/*.csv "$WORK/data/"
    printf 'a,b\n1,2\n' >"$WORK/data/$bad"
    case $bad in
    time-to-accuracy-runs.csv) says="time-to-accuracy-runs.csv: not a --save-runs file" ;;
    accordion-runs.csv) says="accordion-runs.csv: no column 'study'" ;;
    gravac-runs.csv) says="gravac-runs.csv: not the GraVAC study's runs" ;;
    model-check.csv) says="model-check.csv: not shaped-model-check.sh's table" ;;
    planner-runs.csv) says="planner-runs.csv: not the planner study's runs" ;;
    auto-overhead-runs.csv) says="auto-overhead-runs.csv: columns \['a', 'b'\], expected" ;;
    esac
    expect_exit 2 "$says" -- $tables --check --data "$WORK/data"
done

# The automatic mode's loopback runs: a block with a run missing (seed 2's second auto run) is refused,
# not paired short; the throughput is dense's summed time over auto's, its measuring included.
rm -rf "$WORK/data" && mkdir -p "$WORK/data" && cp "$ACC_SOURCE"/docs/results/*.csv "$WORK/data/"
grep -vE '^[a-z]+,2,1,3,auto,' "$ACC_SOURCE/docs/results/auto-overhead-runs.csv" >"$WORK/data/auto-overhead-runs.csv"
cmp -s "$WORK/data/auto-overhead-runs.csv" "$ACC_SOURCE/docs/results/auto-overhead-runs.csv" && fail "the edit removed no run"
printf '<!-- table: auto-overhead -->\n<!-- end of table -->\n' >"$doc"
expect_exit 2 "seed 2: not whole blocks of dense, auto, auto, dense runs" -- $tables --check --doc "$doc" --data "$WORK/data"
"$ACC_PYTHON" - "$ACC_SOURCE/docs/results.md" "$ACC_SOURCE/docs/results/auto-overhead-runs.csv" <<'PY' ||
import csv, re, sys
doc, data = sys.argv[1], sys.argv[2]
lines = open(doc).read().split("\n")
begin = lines.index("<!-- table: auto-overhead -->")
rows = list(csv.DictReader(open(data)))
checked = 0
for text in lines[begin + 3:lines.index("<!-- end of table -->", begin)]:
    cells = [c.strip() for c in text.strip("|").split("|")]
    mine = [r for r in rows if r["model"] == cells[0] and cells[1] in ("all", r["seed"])]
    dense = sum(float(r["seconds"]) for r in mine if r["variant"] == "dense")
    auto = sum(float(r["seconds"]) + float(r["measure_seconds"]) for r in mine if r["variant"] == "auto")
    assert re.match(rf"{dense / auto:.3f}x( |$)", cells[6]), (text, dense / auto)
    checked += 1
assert checked >= 4, checked
print(f"{checked} throughput ratios match their runs")
PY
    fail "the auto-overhead table's ratios are not its runs'"

# The model checks that keep their profiles size by size: each repeat's latencies are
# the medians over the sizes below --fit-from (256 KiB) of those profiles' times
# (comm-profile 1.3: of the mean times; the medians' column: of the median times).
"$ACC_PYTHON" - "$ACC_SOURCE/docs/results" <<'PY' || fail "a model check's latencies are not its profiles' medians"
import csv, glob, os, sys
import numpy as np
data = sys.argv[1]
checked = 0
for path in sorted(glob.glob(os.path.join(data, "model-check-profiles", "*.csv"))):
    run = os.path.basename(path)[:-4]
    profiles = list(csv.DictReader(open(path)))
    for row in csv.DictReader(open(os.path.join(data, f"model-check-{run}.csv"))):
        def small(profile, collective, column):
            return np.median([float(p[column]) for p in profiles if p["repeat"] == row["repeat"] and
                              p["profile"] == profile and p["collective"] == collective and
                              int(p["size_bytes"]) < 256 * 1024])
        for collective in ("allreduce", "allgather"):
            for column, profile, times in ((f"{collective}_alpha_seconds", "comm", "time_mean_s"),
                                           (f"isolated_{collective}_alpha_seconds", "comm-isolated", "time_mean_s"),
                                           (f"median_{collective}_alpha_seconds", "comm", "time_median_s")):
                assert float(row[column]) == small(profile, collective, times), (run, row["repeat"], column)
                checked += 1
assert checked >= 6 * 38, checked  # both runs' rows, six latencies each
print(f"{checked} latencies match their profiles")
PY

# The model checks' medians over their repeats, recomputed here from the raw rows: each
# row's medians of the measured and modelled exchange, their error, the repeats within 25%.
"$ACC_PYTHON" - "$ACC_SOURCE/docs/results.md" "$ACC_SOURCE/docs/results" <<'PY' || fail "a model check's medians are not its rows'"
import csv, os, re, sys
import numpy as np
doc, data = sys.argv[1], sys.argv[2]
lines = open(doc).read().split("\n")
tables = 0
for i, line in enumerate(lines):
    m = re.match(r"^<!-- table: model-check-medians ?(\S*) -->$", line)
    if not m:
        continue
    tables += 1
    rows = list(csv.DictReader(open(os.path.join(data, f"model-check-{m.group(1)}.csv" if m.group(1) else "model-check.csv"))))
    body = lines[i + 3:lines.index("<!-- end of table -->", i)]
    assert len(body) == len({(r["model"], r["level"]) for r in rows}), (m.group(1), "one line per model and level")
    for text in body:
        cells = [c.strip() for c in text.strip("|").split("|")]
        group = [r for r in rows if (r["model"], r["level"]) == (cells[0], cells[1])]
        measured = np.array([float(r["measured_seconds"]) for r in group])
        assert int(cells[2]) == len(group) and cells[3] == f"{1e3 * np.median(measured):.2f}", (text,)
        for k, column in enumerate(c for c in ("modelled_seconds", "measured_times_modelled_seconds") if c in rows[0]):
            modelled = np.array([float(r[column]) for r in group])
            error = np.median(modelled) / np.median(measured) - 1
            within = int(np.sum(np.abs(modelled / measured - 1) <= 0.25))
            assert cells[5 + 3 * k:8 + 3 * k] == [f"{1e3 * np.median(modelled):.2f}", f"{100 * error:+.0f}%",
                                                  f"{within} of {len(group)}"], (text, column)
assert tables >= 2, tables
print(f"{tables} tables of medians match their rows")
PY
finish
