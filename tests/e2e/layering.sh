#!/usr/bin/env bash
# The layers of docs/architecture.md, checked on the sources and the built
# libraries: tools (each program's main and driver) -> lib/app (what several front
# ends share) -> areas -> base. Nothing under lib/ nor the Python package's bindings
# includes a program's driver, nor does one program's driver another's; an area never
# includes lib/app, nor does a unit test of an area (each is named for its area);
# comm and train do not include each other; exchange, but for the trainer's hooks
# in lib/exchange/trainer, includes neither train nor io; compress does not include
# comm; only lib/app and lib/cli (and tools) see CLI11, neither the areas nor the
# Python package's bindings (python/csrc); HDF5's headers reach only lib/io, lib/app and the trainer's
# checkpoints, LibTorch's none of the areas listed without it (through the project's
# own headers too); the areas' libraries hold no CLI11 code.
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
forbid "an area includes lib/app" 'app/' "${area_files[@]}"

# Each program's own code is in tools/<program>/ and is included from there only.
programs=()
for dir in tools/*/; do programs+=("$(basename "$dir")"); done
[ "${#programs[@]}" -ge 5 ] || fail "found only ${#programs[@]} programs under tools/"
tool_pattern="($(IFS='|'; echo "${programs[*]}"))/"
mapfile -t shared_files < <(sources lib python/csrc)
forbid "lib/ and the Python bindings include no program's driver (tools/)" "$tool_pattern" "${shared_files[@]}"
for program in "${programs[@]}"; do
    others=$(printf '%s\n' "${programs[@]}" | grep -vx "$program" | paste -sd'|')
    mapfile -t own < <(sources "tools/$program")
    [ "${#own[@]}" -ge 1 ] || fail "tools/$program holds no sources"
    forbid "a program's driver includes another program's" "($others)/" "${own[@]}"
done

# The unit tests mirror the layout: tests/unit/test_<area>[_<topic>].cpp tests
# lib/<area>, test_tool_<program>_<topic>.cpp a program's driver (tools/<program>,
# its dashes as underscores); only test_app_* and test_tool_* include lib/app or a driver.
for file in tests/unit/test_*.cpp; do
    name=${file#tests/unit/test_}
    name=${name%.cpp}
    if [ "${name%%_*}" = tool ]; then
        found=
        for program in "${programs[@]}"; do
            case "${name#tool_}" in "${program//-/_}" | "${program//-/_}"_*) found=1 ;; esac
        done
        [ -n "$found" ] || fail "$file: not named test_tool_<program>[_<topic>] for a program under tools/"
    else
        [ -d "lib/${name%%_*}" ] || fail "$file: not named test_<area>[_<topic>] for an area under lib/"
    fi
done
mapfile -t area_tests < <(sources tests/unit tests/support | grep -v '^tests/unit/test_\(app\|tool\)_')
[ "${#area_tests[@]}" -ge 20 ] || fail "found only ${#area_tests[@]} unit tests of the areas"
forbid "a test of an area includes lib/app or a driver" "app/|$tool_pattern" "${area_tests[@]}"

mapfile -t comm_files < <(sources lib/comm)
mapfile -t train_files < <(sources lib/train)
forbid "comm includes train" 'train/' "${comm_files[@]}"
forbid "train includes comm" 'comm/' "${train_files[@]}"
# lib/exchange's own library serves the Python package's build, which has neither
# the trainer nor the file formats; only the trainer's hooks (lib/exchange/trainer) use them.
mapfile -t exchange_files < <(sources lib/exchange | grep -v '^lib/exchange/trainer/')
[ "${#exchange_files[@]}" -ge 4 ] || fail "found only ${#exchange_files[@]} sources in lib/exchange outside trainer/"
forbid "lib/exchange (outside trainer/) includes train or io" 'train/|io/|exchange/trainer/' "${exchange_files[@]}"

mapfile -t compress_files < <(sources lib/compress)
[ "${#compress_files[@]}" -ge 10 ] || fail "found only ${#compress_files[@]} sources in lib/compress"
forbid "compress includes comm" 'comm/' "${compress_files[@]}"

mapfile -t no_cli < <(sources "${areas[@]}" python/csrc | grep -v '^lib/cli/')
forbid "only lib/app, lib/cli and tools use CLI11" 'CLI/|cli/tool\.hpp' "${no_cli[@]}"

# What reaches a file through the project's own headers counts as included: HDF5's
# headers reach only lib/io, lib/app and the trainer's checkpoints (lib/train/trainer.cpp);
# LibTorch's reach none of the areas (or parts of one) that the architecture lists
# without it.
declare -A direct_includes
# includes_of FILE: the headers FILE names in its #include lines, one a line, but for
# those in its ACC_COMPRESS_DEVICE sections: the LibTorch-free compressor library is
# compiled without them (the device codecs' library compiles them).
includes_of() {
    if [ -z "${direct_includes[$1]+set}" ]; then
        direct_includes[$1]=$(awk '
            /^[[:space:]]*#[[:space:]]*if/ { if (skip) depth++; else if ($0 ~ /^[[:space:]]*#[[:space:]]*ifdef[[:space:]]+ACC_COMPRESS_DEVICE/) { skip = 1; depth = 1 } }
            /^[[:space:]]*#[[:space:]]*endif/ { if (skip && --depth == 0) { skip = 0; next } }
            !skip && match($0, /^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^>"]+[>"]/) {
                line = substr($0, RSTART, RLENGTH); sub(/^[^<"]*[<"]/, "", line); sub(/[>"]$/, "", line); print line }' "$1")
    fi
    [ -z "${direct_includes[$1]}" ] || printf '%s\n' "${direct_includes[$1]}"
}
# reached FILE: every header FILE includes directly or through the project's headers
# (those under lib/), as "HEADER<TAB>the chain of project headers it came through".
reached() {
    local -A seen=()
    local queue=("$1") chains=("") file chain header
    while [ "${#queue[@]}" -gt 0 ]; do
        file=${queue[0]} chain=${chains[0]}
        queue=("${queue[@]:1}") chains=("${chains[@]:1}")
        while IFS= read -r header; do
            [ -n "$header" ] || continue
            [ -z "${seen[$header]+set}" ] || continue
            seen[$header]=1
            printf '%s\t%s\n' "$header" "$chain"
            if [ -f "lib/$header" ]; then
                queue+=("lib/$header") chains+=("${chain:+$chain -> }$header")
            fi
        done < <(includes_of "$file")
    done
}
# forbid_reach RULE PATTERN FILES...: every file that a header matching PATTERN reaches breaks RULE.
forbid_reach() {
    local rule=$1 pattern=$2
    shift 2
    local file hit
    for file in "$@"; do
        [ -f "$file" ] || continue
        hit=$(reached "$file" | grep -E "^($pattern)"$'\t' | head -1) || true
        [ -z "$hit" ] || fail "$file: $rule (${hit%%$'\t'*} through ${hit#*$'\t'})"
    done
}
hdf5_headers='hdf5\.h|H5[A-Za-z]*\.h'
torch_headers='torch/[^\t]*|ATen/[^\t]*|c10/[^\t]*|c10d/[^\t]*'
mapfile -t no_hdf5 < <(sources "${areas[@]}" | grep -v '^lib/io/' | grep -vx 'lib/train/trainer.cpp')
forbid "only lib/io and lib/app include HDF5's headers" "$hdf5_headers" "${no_hdf5[@]}"
forbid_reach "HDF5's headers reach it; only lib/io, lib/app and lib/train/trainer.cpp may see them" \
    "$hdf5_headers" "${no_hdf5[@]}"
mapfile -t no_torch < <(sources lib/base lib/cli lib/io lib/perf lib/regime lib/plan lib/comm/rendezvous.* lib/comm/launch.* \
    lib/comm/backend.hpp lib/compress/spec.* lib/compress/registry.cpp lib/compress/kernels.* lib/compress/codecs.* \
    lib/compress/options.hpp lib/compress/compressors/*_options.hpp \
    lib/train/config.* lib/train/model_table.*)
[ "${#no_torch[@]}" -ge 40 ] || fail "found only ${#no_torch[@]} sources that must not see LibTorch"
forbid_reach "LibTorch's headers reach it; docs/architecture.md lists it without LibTorch" "$torch_headers" "${no_torch[@]}"

# A compressor is named in its own file: outside lib/compress/compressors/, the C++
# code writes no compressor's name as a string (a level such as "topk" or
# "powersgd:2"), but for Accordion's default levels and train-dist --auto's default
# candidates in lib/compress/spec.hpp. ("none"
# is left out: it also names other settings' absence; the level is
# compress::no_compression().)
mapfile -t compressor_names < <(sed -nE 's/^[[:space:]]*c\.name = "([a-z0-9]+)";.*/\1/p' lib/compress/compressors/*.cpp |
    grep -vx none)
[ "${#compressor_names[@]}" -ge 9 ] || fail "found only ${#compressor_names[@]} compressors' names in lib/compress/compressors"
name_pattern="\"($(IFS='|'; echo "${compressor_names[*]}"))(:[A-Za-z0-9.]*)?\""
named=$(find lib tools python/csrc -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) -not -path 'lib/compress/compressors/*' -print0 |
    xargs -0 grep -nE "$name_pattern" | sed -E 's#//.*##' | grep -E "$name_pattern" || true)
expected=$(printf '%s\n' 'lib/compress/spec.hpp:inline const Spec kDefaultLow{"powersgd", 2};' \
    'lib/compress/spec.hpp:inline const Spec kDefaultHigh{"powersgd", 1};' \
    'lib/compress/spec.hpp:inline const std::vector<Spec> kDefaultAutoLevels{{"powersgd", 1}, {"powersgd", 2}, {"powersgd", 4}, {"topk", 0.01}};')
[ "$(sed -E 's/^([^:]+):[0-9]+:/\1:/' <<<"$named")" = "$expected" ] ||
    fail "compressor names written outside lib/compress/compressors (only Accordion's defaults may be): $named"

# The rule must see a violation where there is one.
probe="$WORK/lib/train/probe.cpp"
mkdir -p "$(dirname "$probe")"
printf '#include "comm/collectives.hpp"\n' >"$probe"
before=$failures
forbid "probe" 'comm/' "$probe" 2>/dev/null
[ "$failures" -eq $((before + 1)) ] || fail "the include check does not see an include"
printf '#include "io/metrics.hpp"\n#include "train/trainer.hpp"\n' >"$probe"
forbid_reach "probe" 'torch/torch\.h' "$probe" 2>/dev/null
[ "$failures" -eq $((before + 2)) ] || fail "the check of what reaches a file does not see torch/torch.h through train/trainer.hpp"
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
