# Shared helpers for the end-to-end tests. Each test script sources this file.
# CTest sets ACC_BIN (built programs), ACC_SOURCE (source tree) and ACC_PYTHON.
set -euo pipefail

: "${ACC_BIN:?set by ctest}" "${ACC_SOURCE:?set by ctest}"
# CTest passes CMake's ACC_PYTHON; run by hand, the scripts' choice applies.
source "$ACC_SOURCE/scripts/python.sh"
ACC_PYTHON=$(acc_python)
export PATH="$ACC_BIN:$PATH"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/acc-e2e-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# expect_exit CODE PATTERN -- COMMAND...: runs COMMAND, checks its exit code and
# that its stderr matches the extended regular expression PATTERN.
expect_exit() {
    local want=$1 pattern=$2
    shift 3
    local got=0
    "$@" >"$WORK/out" 2>"$WORK/err" || got=$?
    if [ "$got" != "$want" ]; then
        fail "exit $got, expected $want: $*"
        sed 's/^/    /' "$WORK/err" >&2
    elif ! grep -Eq -- "$pattern" "$WORK/err"; then
        fail "stderr of '$*' does not match /$pattern/:"
        sed 's/^/    /' "$WORK/err" >&2
    fi
}

# gpu_present: true when nvidia-smi shows a GPU here; then --device cuda may
# run (in a CUDA build), and the checks that it is refused are skipped.
gpu_present() {
    command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

# cmake_cached VARIABLE: its value in the build's CMakeCache.txt (ACC_BUILD_DIR), or nothing.
cmake_cached() { sed -n "s/^$1:[A-Z]*=//p" "${ACC_BUILD_DIR:?set by ctest}/CMakeCache.txt"; }

# cmake_cuda_kernels: the architectures of the build's CUDA kernels as the programs and the
# Python package name them ("75-real,80-real,..."), or nothing in a build without them.
cmake_cuda_kernels() {
    [ "$(cmake_cached ACC_CUDA_KERNELS)" != ON ] || cmake_cached ACC_CUDA_ARCHITECTURES | tr ';' ','
}

finish() {
    if [ "$failures" -gt 0 ]; then
        echo "$failures check(s) failed" >&2
        exit 1
    fi
    echo "all checks passed"
}

# wait_for_line FILE PATTERN [SECONDS]: waits (default 30 s) until a line of FILE
# matches the extended regular expression PATTERN; returns 1 if none does in time.
wait_for_line() {
    local file=$1 pattern=$2 polls=$((${3:-30} * 20))
    for _ in $(seq "$polls"); do
        grep -qE -- "$pattern" "$file" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# free_port: a TCP port on 127.0.0.1 for multi-process tests, held until this
# script exits by a process that keeps it bound (SO_REUSEADDR, not listening). A
# connection to it is refused as to a free port and a rank's store can open
# there, but no other socket gets it as an ephemeral port meanwhile: a port
# merely found free could go to a concurrent test's Gloo pair, and a rank that
# retries to reach its store there would connect into that pair instead.
free_port() {
    "$ACC_PYTHON" - "$$" <<'PY'
import os, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
if os.fork():
    os._exit(0)
os.setsid()
quiet = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(quiet, fd)
owner, end = int(sys.argv[1]), time.monotonic() + 3600
while time.monotonic() < end:
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        break
    time.sleep(0.5)
PY
}

# memory_limit_kib EXTRA_KIB: a virtual memory limit (ulimit -v) that leaves a
# program of this build EXTRA_KIB beyond what its libraries map. That part is
# measured, not assumed: a CUDA LibTorch maps several GB of libraries before
# main. The sample is comm-profile's rank 0 waiting for a peer that never comes.
memory_limit_kib() {
    local extra=$1 pid vm=0
    comm-profile --world-size 2 --rank 0 --master-port "$(free_port)" --timeout 30 -q >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 200); do
        grep -q libtorch "/proc/$pid/maps" 2>/dev/null && break
        sleep 0.05
    done
    sleep 0.5  # the dynamic linker maps every library before main
    vm=$(awk '/^VmSize:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo $((vm + extra))
}

# use_shaped_link: for the tests over scripts/shaped-link.sh. Skips the test
# (exit 77) where it cannot make network namespaces; otherwise loads the script
# and removes the link, the test's background jobs and $WORK on every exit path.
skip() { echo "SKIP: $*"; exit 77; }

# man_renders: whether `man -l` renders a page here; some images have no man, or
# one that only says the system was minimized.
man_renders() {
    local probe=$WORK/probe.1
    printf '.TH PROBE 1\n.SH NAME\nprobe \\- a page\n' >"$probe"
    MANWIDTH=80 man -l "$probe" 2>/dev/null | grep -q "^NAME"
}
use_shaped_link() {
    [ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
    command -v ip >/dev/null && command -v tc >/dev/null || skip "needs ip and tc (iproute2)"
    source "$ACC_SOURCE/scripts/shaped-link.sh"
    trap shaped_link_cleanup EXIT
}
shaped_link_cleanup() {
    kill -KILL $(jobs -p) 2>/dev/null || true
    shaped_link_down
    rm -rf "$WORK"
}
