#!/usr/bin/env bash
# The layers of docs/architecture.md, checked on the sources and the built
# libraries: tools -> lib/app (drivers, options) -> areas -> base. An area never
# includes a driver, nor does a unit test of an area (each is named for its area);
# comm and train do not include each other; exchange, but for the trainer's hooks
# in lib/exchange/trainer, includes neither train nor io; only lib/app and lib/cli
# (and tools) see CLI11; only lib/io (and lib/app) include HDF5's headers; the
# areas' libraries hold no CLI11 code.
source "$(dirname "$0")/common.sh"
: "${ACC_BUILD_DIR:?set by ctest}"
cd "$ACC_SOURCE"

# Files that still break a rule, each with the reason; an entry whose file is gone is ignored.
allowed=()

is_allowed() {
    local f
    for f in "${allowed[@]}"; do [ "$1" = "$f" ] && return 0; done
    return 1
}

# forbid RULE PATTERN FILES...: every file that includes a header matching PATTERN breaks RULE.
forbid() {
    local rule=$1 pattern=$2
    shift 2
    local file
    for file in "$@"; do
        [ -f "$file" ] || continue
        is_allowed "$file" && continue
        if grep -Eq "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($pattern)" "$file"; then
            fail "$file: $rule ($(grep -Em1 "#[[:space:]]*include[[:space:]]*[<\"]($pattern)" "$file"))"
        fi
    done
}

sources() { find "$@" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) 2>/dev/null | sort; }

areas=()
for dir in lib/*/; do
    area=$(basename "$dir")
    [ "$area" = app ] || areas+=("lib/$area")
done
[ "${#areas[@]}" -ge 8 ] || fail "found only ${#areas[@]} areas under lib/"

mapfile -t area_files < <(sources "${areas[@]}")
[ "${#area_files[@]}" -ge 50 ] || fail "found only ${#area_files[@]} source files in the areas"
forbid "an area includes a driver (lib/app)" 'app/' "${area_files[@]}"

# The unit tests mirror the areas: tests/unit/test_<area>[_<topic>].cpp tests
# lib/<area>, and only the tests of lib/app (test_app_*) include a driver.
for file in tests/unit/test_*.cpp; do
    name=${file#tests/unit/test_}
    name=${name%.cpp}
    [ -d "lib/${name%%_*}" ] || fail "$file: not named test_<area>[_<topic>] for an area under lib/"
done
mapfile -t area_tests < <(sources tests/unit tests/support | grep -v '^tests/unit/test_app_')
[ "${#area_tests[@]}" -ge 20 ] || fail "found only ${#area_tests[@]} unit tests of the areas"
forbid "a test of an area includes a driver (lib/app)" 'app/' "${area_tests[@]}"

mapfile -t comm_files < <(sources lib/comm)
mapfile -t train_files < <(sources lib/train)
forbid "comm includes train" 'train/' "${comm_files[@]}"
forbid "train includes comm" 'comm/' "${train_files[@]}"
# lib/exchange's own library serves the Python package's build, which has neither
# the trainer nor the file formats; only the trainer's hooks (lib/exchange/trainer) use them.
mapfile -t exchange_files < <(sources lib/exchange | grep -v '^lib/exchange/trainer/')
[ "${#exchange_files[@]}" -ge 4 ] || fail "found only ${#exchange_files[@]} sources in lib/exchange outside trainer/"
forbid "lib/exchange (outside trainer/) includes train or io" 'train/|io/|exchange/trainer/' "${exchange_files[@]}"

mapfile -t no_cli < <(sources "${areas[@]}" | grep -v '^lib/cli/')
forbid "only lib/app, lib/cli and tools use CLI11" 'CLI/|cli/tool\.hpp' "${no_cli[@]}"

mapfile -t no_hdf5 < <(sources "${areas[@]}" | grep -v '^lib/io/')
forbid "only lib/io and lib/app include HDF5's headers" 'hdf5\.h|H5[A-Za-z]*\.h' "${no_hdf5[@]}"

# The rule must see a violation where there is one.
probe="$WORK/lib/train/probe.cpp"
mkdir -p "$(dirname "$probe")"
printf '#include "comm/collectives.hpp"\n' >"$probe"
before=$failures
forbid "probe" 'comm/' "$probe" 2>/dev/null
[ "$failures" -eq $((before + 1)) ] || fail "the include check does not see an include"
failures=$before

# The areas' libraries, as built, hold no CLI11 code (what a link line would pull in).
command -v nm >/dev/null || { echo "skip: nm (binutils) is not installed"; exit 77; }
checked=0
shopt -s nullglob
for lib in "$ACC_BUILD_DIR"/lib/*/libacc_*.a "$ACC_BUILD_DIR"/lib/*/*/libacc_*.a; do
    case "$lib" in */lib/app/* | */lib/cli/*) continue ;; esac
    checked=$((checked + 1))
    if nm -C "$lib" 2>/dev/null | grep -q ' CLI::'; then
        fail "$(basename "$lib") holds CLI11 code"
    fi
done
[ "$checked" -ge 8 ] || fail "only $checked area libraries found under $ACC_BUILD_DIR/lib"

[ "$failures" -eq 0 ] || exit 1
echo "layering: ok ($checked area libraries, ${#area_files[@]} area sources)"
