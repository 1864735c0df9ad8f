#!/usr/bin/env bash
# How the programs find and bind their shared libraries. pip's libtorch_cpu.so
# exports its own copy of std::filesystem; the dynamic linker binds a symbol to
# the first library in load order that defines it, so every program that links
# LibTorch must list libstdc++ before it (cmake/AccTorch.cmake). Installed
# programs must find every library without LD_LIBRARY_PATH (install RPATH).
source "$(dirname "$0")/common.sh"
: "${ACC_BUILD_DIR:?set by ctest}"
cd "$WORK"
command -v readelf >/dev/null || { echo "skip: readelf (binutils) is not installed"; exit 77; }

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# A compiler may link libstdc++ statically: then no program lists it, and its
# functions are resolved inside each program instead of bound at run time.
checked=0
static_stdcxx=1
for program in "$ACC_BIN"/*; do
    [ -x "$program" ] && head -c 4 "$program" | grep -q ELF || continue
    list=$(needed "$program")
    torch_at=$(echo "$list" | grep -nE '^lib(torch|c10)' | head -1 | cut -d: -f1 || true)
    [ -n "$torch_at" ] || continue
    stdcxx_at=$(echo "$list" | grep -n '^libstdc++' | head -1 | cut -d: -f1 || true)
    checked=$((checked + 1))
    [ -z "$stdcxx_at" ] || static_stdcxx=0
    if [ -n "$stdcxx_at" ] && [ "$stdcxx_at" -gt "$torch_at" ]; then
        fail "$(basename "$program") lists LibTorch before libstdc++: $(echo $list)"
    fi
done
[ "$checked" -ge 5 ] || fail "only $checked programs link LibTorch in $ACC_BIN"
[ "$static_stdcxx" = 1 ] && echo "libstdc++ is linked statically: no program lists it"

# The std::filesystem functions grad-dump calls are bound to libstdc++'s copy
# (or, with a static libstdc++, to none: they are the program's own).
LD_BIND_NOW=1 LD_DEBUG=bindings LD_DEBUG_OUTPUT="$WORK/bind" grad-dump --version >/dev/null
bindings=$(cat "$WORK"/bind.* | grep -E "binding file [^ ]*grad-dump .*symbol \`_ZN(K)?St10filesystem" || true)
[ -n "$bindings" ] || [ "$static_stdcxx" = 1 ] ||
    fail "grad-dump binds no std::filesystem function (LD_DEBUG=bindings)"
wrong=$(echo "$bindings" | grep -v '^$' | grep -v ' to [^ ]*libstdc++\.so' || true)
[ -z "$wrong" ] || fail "std::filesystem bound outside libstdc++: $(echo "$wrong" | head -3)"

# The libraries linked are those of the LibTorch configured, not another one's
# (pip's TorchConfig.cmake searches the system's directories first, where
# Debian's LibTorch may be): both lie under its prefix, Torch_DIR/../../.. as
# TorchConfig.cmake computes it.
prefix=$(realpath -m "$(cmake_cached Torch_DIR)/../../..")
for variable in TORCH_LIBRARY c10_LIBRARY; do
    library=$(realpath -m "$(cmake_cached "$variable")")
    case $library in
    "$prefix"/*) ;;
    *) fail "$variable is $library, outside the configured LibTorch ($prefix)" ;;
    esac
done

# Installed programs start with no LD_LIBRARY_PATH: every library is found.
cmake --install "$ACC_BUILD_DIR" --prefix "$WORK/prefix" >/dev/null || fail "cmake --install"
for tool in grad-dump train-dist comm-profile compress-bench regime-detect; do
    missing=$(env -u LD_LIBRARY_PATH ldd "prefix/bin/$tool" | grep 'not found' || true)
    [ -z "$missing" ] || fail "installed $tool: $missing"
    env -u LD_LIBRARY_PATH "prefix/bin/$tool" --version | grep -q "Accordion toolkit" || fail "installed $tool --version"
done
finish
