# Sourced by the scripts and the end-to-end tests: acc_python prints the Python 3
# that has the modules they need (h5py; torch for the comparisons with PyTorch).
# $ACC_PYTHON when set (CMake's -DACC_PYTHON does the same for the tests), else
# the first python3 on PATH that imports both, else Debian's /usr/bin/python3
# (python3-h5py, python3-torch), which a virtual environment may shadow on PATH.
acc_python() {
    if [ -n "${ACC_PYTHON:-}" ]; then
        echo "$ACC_PYTHON"
        return
    fi
    local candidate
    for candidate in "$(command -v python3 || true)" /usr/bin/python3; do
        if [ -x "$candidate" ] && "$candidate" -c 'import h5py, torch' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    command -v python3 || echo /usr/bin/python3
}
