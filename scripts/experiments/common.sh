# Sourced by the studies in scripts/experiments: $here (the source tree), $python
# (the Python with h5py), the shaped link (scripts/shaped-link.sh, removed on exit)
# and complete FILE.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$here/scripts/python.sh"
source "$here/scripts/shaped-link.sh"
trap shaped_link_down EXIT
python=$(acc_python)

# complete FILE: a metrics or gradient-statistics file whose program finished it.
complete() {
    [ -f "$1" ] && "$python" -c "import h5py, sys; sys.exit(0 if h5py.File(sys.argv[1], 'r').attrs.get('complete', 0) else 1)" \
        "$1" 2>/dev/null
}
