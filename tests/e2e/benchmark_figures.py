#!/usr/bin/env python3
"""docs/benchmarks.md's figures against the reports kept under docs/benchmarks/
(e2e.benchmark_reports).

    benchmark_figures.py check DOC BENCH      exit 1 naming every quoted report that is in no
                                              kept report, and every goal-table figure that is
                                              not the number of the report line it is tied to
    benchmark_figures.py self-test DOC BENCH  changes every goal-table figure by one digit (each
                                              digit to each other value), copies each from another
                                              line of its report (the number there nearest to it),
                                              and changes a digit in every quoted report; exit 1
                                              if the check misses one

A quoted report is a plain ``` block; it must appear, line for line, in a report.txt
(or a report.txt followed by its shaped-report.txt).

A goal table (its first line "| goal | ...") has its figures tied to their report lines
by the HTML comment just above it:

    <!-- figures: benchmarks/DIR/ [| benchmarks/DIR2/ ...]
    LABEL = PLACE, PLACE...; LABEL = PLACE...
    ...
    -->

The first line names, per column after the goal, the directory whose report (report.txt,
then shaped-report.txt if there is one) that column quotes. Then one line per table row:
per column (" | " between them; one for every column when there is only one), the report
lines its figures come from, in the order the figures stand in the cell. LABEL names one
line of the report: the one that, leading spaces left out, starts with LABEL, '#' in it
standing for any number; "A > B" is the first line starting with B after the line A.
Each PLACE is the place of a figure's number among the line's numbers (1 the first), so
one place ties one figure. A figure is the number a cell shows, with its sign; it matches
when the report's number, rounded half up to the digits the figure shows, is the figure.
Not figures: the goal column, "missed by N%" (the goal's arithmetic) and a compressor's
parameter ("topk:0.01", "powersgd:2"), in the table and on the report's lines."""
import glob
import os
import re
import sys
from decimal import ROUND_HALF_UP, Decimal

NUMBER = re.compile(r"(?<![\w.:])[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
MISSED = re.compile(r"missed by [\d.]+%")
BEGIN = re.compile(r"^<!-- figures: (.+)$")
REPORTS = {}


def value(text):
    return float(text.replace(",", ""))


def digits(text):
    return len(text.split(".")[1]) if "." in text else 0


def rounds_to(number, figure):
    """Whether the report's NUMBER, rounded half up to FIGURE's digits, is FIGURE."""
    exact = Decimal(number.replace(",", ""))
    return exact.quantize(Decimal(1).scaleb(-digits(figure)), ROUND_HALF_UP) == Decimal(figure.replace(",", ""))


def report(bench, directory):
    """The lines of DIRECTORY's report (report.txt, then shaped-report.txt if kept)."""
    path = os.path.join(bench, os.path.relpath(directory, "benchmarks"))
    if path not in REPORTS:
        text = None
        if os.path.exists(os.path.join(path, "report.txt")):
            text = open(os.path.join(path, "report.txt"), encoding="utf-8").read()
            shaped = os.path.join(path, "shaped-report.txt")
            if os.path.exists(shaped):
                text += open(shaped, encoding="utf-8").read()
        REPORTS[path] = None if text is None else text.rstrip("\n").split("\n")
    return REPORTS[path]


def find_line(lines, label):
    """The index of the one report line LABEL names, or an error message."""
    def matching(part, start=0):
        pattern = re.compile(r"\s*" + r"(?:[+-]?[\d,]+(?:\.\d+)?)".join(map(re.escape, part.split("#"))))
        return [i for i in range(start, len(lines)) if pattern.match(lines[i])]

    first, _, then = label.partition(" > ")
    found = matching(first)
    if len(found) != 1:
        return f"'{first}' names {len(found)} lines of the report, not one"
    if not then:
        return found[0]
    after = matching(then, found[0] + 1)
    return after[0] if after else f"no line starting with '{then}' after '{first}'"


def cells(line):
    return [c for c in line.strip().strip("|").split("|")]


def figures(cell_text, offset):
    """A cell's figures: (text, start, end) in its line, offset being where the cell starts."""
    blanked = MISSED.sub(lambda m: " " * len(m.group()), cell_text)
    return [(m.group(), offset + m.start(), offset + m.end()) for m in NUMBER.finditer(blanked)]


def goal_tables(lines):
    """Each goal table: (doc line of its header, the directories, [spec lines], [rows]); a row
    is [(the cell's figures, its doc line index)] per column after the goal. Errors as strings."""
    tables, errors, i = [], [], 0
    while i < len(lines):
        if lines[i].startswith("| goal |"):
            errors.append(f"{i + 1}: a goal table without a '<!-- figures: ... -->' comment just above it")
        m = BEGIN.match(lines[i])
        if not m:
            i += 1
            continue
        try:
            end = lines.index("-->", i)
        except ValueError:
            errors.append(f"{i + 1}: a figures comment without its '-->' line")
            break
        first = end + 1
        if first >= len(lines) or not lines[first].startswith("| goal |"):
            errors.append(f"{i + 1}: a figures comment with no goal table right after it")
            i = first
            continue
        columns = [c.strip() for c in m.group(1).split("|")]
        if len(cells(lines[first])) - 1 != len(columns):
            errors.append(f"{first + 1}: {len(cells(lines[first])) - 1} columns after the goal, "
                          f"{len(columns)} directories in the figures comment")
        rows, j = [], first + 2
        while j < len(lines) and lines[j].startswith("|"):
            row, start = [], lines[j].index("|") + 1
            for k, text in enumerate(cells(lines[j])):
                if k > 0:
                    row.append((figures(text, start), j))
                start += len(text) + 1
            rows.append(row)
            j += 1
        tables.append((first + 1, columns, lines[i + 1:end], rows))
        i = j
    return tables, errors


def check_goals(text, bench):
    """Every goal-table figure against the number at its place on its report line: the
    errors, and each figure as (its doc line index, start, end, text, report lines, line index)."""
    tables, errors = goal_tables(text.split("\n"))
    tied_figures = []
    for first, columns, spec, rows in tables:
        if len(spec) != len(rows):
            errors.append(f"{first}: {len(rows)} rows, {len(spec)} lines in the figures comment above it")
            continue
        for spec_row, row in zip(spec, rows):
            specs = [s.strip() for s in spec_row.split(" | ")]
            if len(specs) == 1:
                specs *= len(row)
            if len(specs) != len(row) or len(row) > len(columns):
                errors.append(f"{row[0][1] + 1}: {len(row)} columns, {len(specs)} in its figures comment line")
                continue
            for column, (cell_spec, (found, doc_line)) in enumerate(zip(specs, row)):
                where, directory = doc_line + 1, columns[column]
                kept = report(bench, directory)
                if kept is None:
                    errors.append(f"{where}: no report.txt under {directory}")
                    continue
                tied = []
                for entry in cell_spec.split("; "):
                    label, eq, places = entry.rpartition(" = ")
                    if not eq or not re.fullmatch(r"\d+(, \d+)*", places):
                        errors.append(f"{where}: '{entry}' is not 'LABEL = PLACE, ...'")
                        continue
                    line = find_line(kept, label)
                    if isinstance(line, str):
                        errors.append(f"{where}: {line}")
                        continue
                    numbers = NUMBER.findall(kept[line])
                    tied += [(label, line, place, numbers[place - 1] if 0 < place <= len(numbers) else None)
                             for place in map(int, places.split(", "))]
                if len(tied) != len(found):
                    errors.append(f"{where}: column {column + 2} has {len(found)} figures, "
                                  f"its figures comment ties {len(tied)}")
                    continue
                for (figure, start, end), (label, line, place, number) in zip(found, tied):
                    if number is None:
                        errors.append(f"{where}: the line '{label}' has no number {place}")
                    elif not rounds_to(number, figure):
                        errors.append(f"{where}: {figure} is not number {place} of the line '{label}' "
                                      f"under {directory} ({number})")
                    tied_figures.append((doc_line, start, end, figure, kept, line))
    return [f"docs/benchmarks.md:{e}" for e in errors], tables, tied_figures


def kept_reports(bench):
    kept = []
    for path in glob.glob(os.path.join(bench, "**", "report.txt"), recursive=True):
        text = open(path, encoding="utf-8").read()
        shaped = os.path.join(os.path.dirname(path), "shaped-report.txt")
        kept.append(text)
        if os.path.exists(shaped):
            kept += [open(shaped, encoding="utf-8").read(), text + open(shaped, encoding="utf-8").read()]
    return kept


def quoted(lines):
    """Each plain ``` block (a report; ```sh blocks are commands): (its first line, its text)."""
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = lines.index("```", i + 1)
            if lines[i] == "```":
                blocks.append((i + 1, "\n".join(lines[i + 1:j]) + "\n"))
            i = j
        i += 1
    return blocks


def check_quoted(text, kept):
    blocks = quoted(text.split("\n"))
    bad = [f"docs/benchmarks.md:{line}: this report is in no report.txt under docs/benchmarks/"
           for line, block in blocks if not any(block in k for k in kept)]
    return bad, blocks


def splice(text, line, start, end, new):
    lines = text.split("\n")
    lines[line] = lines[line][:start] + new + lines[line][end:]
    return "\n".join(lines)


def self_test(text, bench):
    """Each change must be seen, at its own line: the changes missed, and how many were made."""
    missed, changed, copied = [], 0, 0

    def seen(doc_line, start, end, new):
        errors = check_goals(splice(text, doc_line, start, end, new), bench)[0]
        return any(e.startswith(f"docs/benchmarks.md:{doc_line + 1}:") for e in errors)

    for doc_line, start, end, figure, kept, line in check_goals(text, bench)[2]:
        at = f"docs/benchmarks.md:{doc_line + 1}: {figure}"
        # Every digit to every other value.
        for k, c in enumerate(figure):
            for d in "0123456789".replace(c, "") if c.isdigit() else "":
                new = figure[:k] + d + figure[k + 1:]
                changed += 1
                if not seen(doc_line, start, end, new):
                    missed.append(f"{at} changed to {new}")
        # The number of another line nearest to it that reads otherwise at the figure's digits.
        shown = [(f"{'+' if figure[0] == '+' and value(n) >= 0 else ''}{value(n):.{digits(figure)}f}", i)
                 for i, other in enumerate(kept) if i != line for n in NUMBER.findall(other)]
        shown = [(n, i) for n, i in shown if n != figure]
        if shown:
            new, i = min(shown, key=lambda s: abs(value(s[0]) - value(figure)))
            copied += 1
            if not seen(doc_line, start, end, new):
                missed.append(f"{at} copied as {new} from the line '{kept[i].strip()}'")
    kept = kept_reports(bench)
    lines = text.split("\n")
    blocks = quoted(lines)
    for line, block in blocks:
        m = re.search(r"\d(?=\D*$)", block)  # the block's last digit
        offset = len("\n".join(lines[:line])) + 1 + m.start()
        mutated = text[:offset] + str((int(m.group()) + 1) % 10) + text[offset + 1:]
        if f"docs/benchmarks.md:{line}: this report is in no report.txt under docs/benchmarks/" \
                not in check_quoted(mutated, kept)[0]:
            missed.append(f"docs/benchmarks.md:{line}: the quoted report with its last digit changed")
    return missed, changed, copied, len(blocks)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("check", "self-test"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    text = open(sys.argv[2], encoding="utf-8").read()
    bench = sys.argv[3]
    if sys.argv[1] == "check":
        errors, tables, _ = check_goals(text, bench)
        bad, blocks = check_quoted(text, kept_reports(bench))
        for e in bad + errors:
            print(e, file=sys.stderr)
        figures_tied = sum(len(f) for _, _, _, rows in tables for row in rows for f, _ in row)
        print(f"{len(blocks)} reports quoted, {len(blocks) - len(bad)} of them kept; "
              f"{len(tables)} goal tables, {figures_tied} figures tied to their report lines")
        sys.exit(1 if bad or errors or not blocks or len(tables) < 6 else 0)
    errors = check_goals(text, bench)[0]
    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    missed, changed, copied, reports = self_test(text, bench)
    for m in missed:
        print(f"not seen: {m}", file=sys.stderr)
    print(f"{changed} figures changed by one digit, {copied} copied from another line, "
          f"{reports} quoted reports changed: {changed + copied + reports - len(missed)} seen")
    sys.exit(1 if missed or not changed or not copied or not reports else 0)


if __name__ == "__main__":
    main()
