# Sourced by the benchmark scripts, from the source tree: $python (the Python with
# h5py), $tmp (a scratch directory, removed on exit) and $raw, the directory where a
# benchmark keeps its raw data: every measurement its report is made from, and the
# report itself (report.txt). BENCH_RAW=DIR keeps them in DIR (made if needed);
# without it they go with $tmp. BENCH_FROM=DIR measures nothing: the report is
# made again from the raw data a run kept in DIR and printed, DIR left as it is
# (tests/e2e/benchmark_reports.sh checks so every report under docs/benchmarks/).
#   bench_cleanup        the scratch directory gone (for the script's EXIT trap)
#   bench_measuring      true unless BENCH_FROM is set: `if bench_measuring; then ...`
#   ... | bench_report [NAME]   the report on stdout and in $raw/NAME (report.txt)
source scripts/python.sh
python=$(acc_python)
[ -z "${BENCH_RAW:-}" ] || [ ! -e "$BENCH_RAW" ] || [ -d "$BENCH_RAW" ] ||
    { echo "$(basename "$0"): error: BENCH_RAW=$BENCH_RAW: not a directory" >&2; exit 2; }
[ -z "${BENCH_FROM:-}" ] || [ -z "${BENCH_RAW:-}" ] ||
    { echo "$(basename "$0"): error: BENCH_FROM and BENCH_RAW: give one (BENCH_FROM reads a run's raw data, BENCH_RAW keeps a new run's)" >&2; exit 2; }
[ -z "${BENCH_FROM:-}" ] || [ -d "$BENCH_FROM" ] ||
    { echo "$(basename "$0"): error: BENCH_FROM=$BENCH_FROM: not a directory" >&2; exit 2; }
tmp=$(mktemp -d)
if [ -n "${BENCH_FROM:-}" ]; then
    raw=$(cd "$BENCH_FROM" && pwd)
elif [ -n "${BENCH_RAW:-}" ]; then
    mkdir -p "$BENCH_RAW"
    raw=$(cd "$BENCH_RAW" && pwd)
else
    raw=$tmp/raw
    mkdir -p "$raw"
fi
bench_cleanup() { rm -rf "$tmp"; }
bench_measuring() { [ -z "${BENCH_FROM:-}" ]; }
bench_report() {
    if bench_measuring; then tee "$raw/${1:-report.txt}"; else cat; fi
}
# bench_need FILE...: in BENCH_FROM's directory, each raw file the report reads.
bench_need() {
    local f
    for f; do
        [ -e "$raw/$f" ] || { echo "$(basename "$0"): error: BENCH_FROM=$BENCH_FROM: no $f there" >&2; exit 1; }
    done
}
