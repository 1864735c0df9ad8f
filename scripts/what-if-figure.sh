#!/usr/bin/env bash
# The what-if figure of docs/results.md ("Where compression pays, predicted"): compress-bench
# --what-if over ResNet-18's and GPT-2 medium's shapes with PowerSGD rank 4, Top-k 1% and fp16,
# on 8 to 1,024 workers over links of 0.1 to 400 Gbit/s; its raw data (one CSV, a model and a
# commit column added), the figure and the break-even table.
#
#   scripts/what-if-figure.sh [BIN_DIR] [OUT_DIR]     (defaults: build/bin, docs/results)
#
# Writes OUT_DIR/what-if.csv and OUT_DIR/what-if.png and prints the break-even table
# (Markdown) on stdout. Settings (docs/results.md says why): alpha 10 us per ring step, compute
# 30 ms per step for ResNet-18 and 150 ms for GPT-2 medium, encode and decode left out (0).
# Takes a few seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/python.sh"
python=$(acc_python)
bin=${1:-$here/build/bin}
out=${2:-$here/docs/results}
[ -x "$bin/compress-bench" ] || { echo "what-if-figure.sh: error: $bin/compress-bench: not built" >&2; exit 2; }
mkdir -p "$out"
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
links=0.1,0.25,0.5,1,2.5,5,10,25,50,100,200,400
levels=powersgd:4,topk:0.01,fp16
"$bin/compress-bench" -q --what-if --shapes resnet18 --compute-ms 30 --alpha 10e-6 --links "$links" \
    --compressors "$levels" --csv >"$work/resnet18.csv"
"$bin/compress-bench" -q --what-if --shapes gpt2-medium --compute-ms 150 --alpha 10e-6 --links "$links" \
    --compressors "$levels" --csv >"$work/gpt2-medium.csv"
"$python" - "$commit" "$work/resnet18.csv" "$work/gpt2-medium.csv" >"$work/what-if.csv" <<'PY'
import csv, os, sys
commit, paths = sys.argv[1], sys.argv[2:]
out = None
for path in paths:
    model = os.path.basename(path)[:-len(".csv")]
    for row in csv.DictReader(open(path)):
        if out is None:
            out = csv.DictWriter(sys.stdout, ["model", "commit"] + list(row), lineterminator="\n")
            out.writeheader()
        out.writerow({"model": model, "commit": commit, **row})
PY
mv "$work/what-if.csv" "$out/what-if.csv"
"$python" "$here/scripts/plot_what_if.py" "$out/what-if.csv" -o "$out/what-if.png" --worlds 8,32,128,512,1024 --table
