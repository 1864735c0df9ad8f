#!/usr/bin/env bash
# tests/unit/CMakeLists.txt runs a unit-test program that links LibTorch as one ctest
# test and labels the others torch_independent, which CI's second build skips: each
# program's label must say what it links (its ELF NEEDED entries). A program labelled
# torch_independent that loads LibTorch would go untested against pip's torch.
source "$(dirname "$0")/common.sh"
: "${ACC_BUILD_DIR:?set by ctest}"
list=$ACC_BUILD_DIR/tests/unit/unit-programs.tsv
[ -s "$list" ] || fail "$list: missing or empty (written when CMake generates the build)"
command -v readelf >/dev/null || fail "readelf (binutils) is needed to read what the programs link"
free=0 torch=0
while IFS=$'\t' read -r kind program; do
    [ -n "$kind" ] || continue
    [ -x "$program" ] || { fail "$program: listed in $list but not built"; continue; }
    if readelf -d "$program" | grep -Eq 'NEEDED.*\[lib(torch|torch_cpu|c10)\.so'; then links=libtorch; else links=none; fi
    case $kind:$links in
    libtorch:libtorch) torch=$((torch + 1)) ;;
    torch_independent:none) free=$((free + 1)) ;;
    torch_independent:libtorch) fail "$(basename "$program") links LibTorch but is labelled torch_independent: give it LIBTORCH in tests/unit/CMakeLists.txt" ;;
    libtorch:none) fail "$(basename "$program") does not link LibTorch: drop LIBTORCH in tests/unit/CMakeLists.txt, so that its cases run one by one" ;;
    *) fail "$list: unknown kind '$kind'" ;;
    esac
done <"$list"
[ "$torch" -gt 0 ] && [ "$free" -gt 0 ] || fail "$list: $torch programs with LibTorch and $free without; expected some of each"
echo "unit_labels: $torch unit-test programs link LibTorch, $free do not"
finish
