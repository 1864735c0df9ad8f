#!/usr/bin/env bash
# What a newcomer sees from the set-up scripts: scripts/build.sh says what it
# does and shows every error (cmake's, the compiler's), examples/quickstart.sh
# hides none of the build's output, and examples/pipeline.sh lets the programs
# report progress on a terminal but keeps them quiet in a pipe. The programs
# are stand-ins here (a fake cmake, stub tools), so this takes a second.
source "$(dirname "$0")/common.sh"
cd "$WORK"
mkdir -p tree/scripts tree/examples fake stubs
cp "$ACC_SOURCE/scripts/build.sh" "$ACC_SOURCE/scripts/torch-choice.sh" "$ACC_SOURCE/scripts/python.sh" tree/scripts/
cp "$ACC_SOURCE/examples/quickstart.sh" "$ACC_SOURCE/examples/pipeline.sh" tree/examples/

# A cmake that fails to configure, printing on stdout as cmake does.
cat >fake/cmake <<'SH'
#!/usr/bin/env bash
if [ "$1" = -S ]; then
    [ -n "${FAKE_CONFIGURE_FAILS:-}" ] || exit 0
    echo "-- Could NOT find HDF5 (missing: HDF5_LIBRARIES)"
    echo "CMake Error at CMakeLists.txt:12 (find_package): HDF5 is required" >&2
    exit 1
fi
echo "[1/3] Building CXX object lib/io/grads.cpp.o"
[ -z "${FAKE_BUILD_WORKS:-}" ] || exit 0
echo "FAILED: lib/io/grads.cpp.o"
echo "lib/io/grads.cpp:7:1: error: expected ';' before '}' token"
exit 1
SH
chmod +x fake/cmake
export PATH="$WORK/fake:$PATH"

FAKE_CONFIGURE_FAILS=1 ACC_BUILD_DIR="$WORK/b1" bash tree/scripts/build.sh >out 2>&1 && fail "build.sh: a failed configure exited 0"
grep -q "Could NOT find HDF5" out || { fail "build.sh hides what cmake printed when configuring failed"; cat out >&2; }
grep -q "CMake Error at CMakeLists.txt:12" out || fail "build.sh hides cmake's error"
grep -q "configuring $WORK/b1 failed" out || fail "build.sh does not say that configuring failed"

ACC_BUILD_DIR="$WORK/b2" bash tree/scripts/build.sh >out 2>&1 && fail "build.sh: a failed build exited 0"
grep -q "build.sh: configuring" out || { fail "build.sh does not say when it configures"; cat out >&2; }
grep -q "build.sh: building" out || fail "build.sh does not say when it builds"
grep -q "\[1/3\] Building CXX object" out || fail "build.sh hides the build's progress lines"
grep -q "grads.cpp:7:1: error: expected ';'" out || fail "build.sh hides the compiler's error"
grep -q "the build failed" out || fail "build.sh does not say that the build failed"

# The quickstart with a no-op set-up and the failing build: the compiler's
# message must reach the user.
printf '#!/usr/bin/env bash\nexit 0\n' >tree/scripts/setup.sh
chmod +x tree/scripts/setup.sh
ACC_BUILD_DIR="$WORK/b3" bash tree/examples/quickstart.sh >out 2>&1 && fail "quickstart.sh: a failed build exited 0"
grep -q "grads.cpp:7:1: error: expected ';'" out || { fail "quickstart.sh hides the compiler's error"; cat out >&2; }
grep -q "\[1/3\] Building CXX object" out || fail "quickstart.sh hides the build's progress"

# test.sh: each step said, the build's progress shown, then ctest on the default suite,
# then the Python package's tests (a stub here).
cp "$ACC_SOURCE/scripts/test.sh" tree/scripts/
printf '#!/usr/bin/env bash\necho "test-python.sh $*"\n' >tree/scripts/test-python.sh
chmod +x tree/scripts/test-python.sh
printf '#!/usr/bin/env bash\necho "ctest $*"\n' >fake/ctest
chmod +x fake/ctest
FAKE_BUILD_WORKS=1 ACC_BUILD_DIR="$WORK/b5" bash tree/scripts/test.sh >out 2>&1 || { fail "test.sh"; cat out >&2; }
grep -q "test.sh: checking the Debian packages" out || { fail "test.sh does not say that it checks the packages"; cat out >&2; }
grep -q "\[1/3\] Building CXX object" out || fail "test.sh hides the build's progress"
grep -q "test.sh: running the default test suite" out || fail "test.sh does not say what it runs"
grep -q "^ctest .*-LE slow" out || fail "test.sh does not run the default suite"
grep -q "^test-python.sh --torch debian" out || fail "test.sh does not test the Python package"

# pipeline.sh: -q in a pipe, progress on a terminal. Stub programs record their
# arguments; the comparison then fails on their empty files, which is fine here.
mkdir -p b4/bin
for tool in grad-dump regime-detect train-dist; do
    printf '#!/usr/bin/env bash\necho "%s $*" >>"%s/calls"\n' "$tool" "$WORK" >"b4/bin/$tool"
    chmod +x "b4/bin/$tool"
done
ACC_BUILD_DIR="$WORK/b4" bash tree/examples/pipeline.sh --out "$WORK/p1" >out 2>&1 || true
grep -q "^grad-dump .* -q" calls || { fail "pipeline.sh in a pipe: grad-dump is not quiet"; cat calls >&2; }
grep -q "^train-dist .* -q" calls || fail "pipeline.sh in a pipe: train-dist is not quiet"
rm calls
if script -qec true /dev/null >/dev/null 2>&1; then
    ACC_BUILD_DIR="$WORK/b4" script -qec "bash tree/examples/pipeline.sh --out $WORK/p2" /dev/null >out 2>&1 </dev/null || true
    grep -q "^grad-dump " calls || { fail "pipeline.sh on a terminal: grad-dump did not run"; cat out >&2; }
    if grep -q -- " -q" calls; then fail "pipeline.sh on a terminal keeps the programs quiet:"; cat calls >&2; fi
else
    echo "script(1) cannot open a pseudo-terminal here; the terminal case is not checked"
fi
finish
