# Sourced by the benchmark scripts, from the source tree: $python (the Python with
# h5py), $tmp (a scratch directory, removed on exit) and $raw, the directory where a
# benchmark keeps its raw data: every measurement its report is made from, and the
# report itself (report.txt). BENCH_RAW=DIR keeps them in DIR (made if needed);
# without it they go with $tmp.
#   bench_cleanup        the scratch directory gone (for the script's EXIT trap)
#   ... | bench_report   the report on stdout and in $raw/report.txt
source scripts/python.sh
python=$(acc_python)
[ -z "${BENCH_RAW:-}" ] || [ ! -e "$BENCH_RAW" ] || [ -d "$BENCH_RAW" ] ||
    { echo "$(basename "$0"): error: BENCH_RAW=$BENCH_RAW: not a directory" >&2; exit 2; }
tmp=$(mktemp -d)
if [ -n "${BENCH_RAW:-}" ]; then
    mkdir -p "$BENCH_RAW"
    raw=$(cd "$BENCH_RAW" && pwd)
else
    raw=$tmp/raw
    mkdir -p "$raw"
fi
bench_cleanup() { rm -rf "$tmp"; }
bench_report() { tee "$raw/report.txt"; }
