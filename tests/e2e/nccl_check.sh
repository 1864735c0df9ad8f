#!/usr/bin/env bash
# The NCCL check of a CUDA build (cmake/AccNccl.cmake): nccl.h comes from the
# nvidia-nccl wheel beside pip's torch, and configure stops when the header's
# NCCL release is not the library's. No GPU and no real NCCL needed: a stand-in
# libnccl.so.2 reports the version it is built with.
source "$(dirname "$0")/common.sh"

# site DIR HEADER_VERSION LIBRARY_VERSION: a pip-like site-packages under DIR.
site() {
    local dir=$1 header=$2 library=$3 major minor patch
    mkdir -p "$dir/torch" "$dir/nvidia/nccl/include" "$dir/nvidia/nccl/lib"
    IFS=. read -r major minor patch <<<"$header"
    printf '#define NCCL_MAJOR %s\n#define NCCL_MINOR %s\n#define NCCL_PATCH %s\n' \
        "$major" "$minor" "$patch" >"$dir/nvidia/nccl/include/nccl.h"
    IFS=. read -r major minor patch <<<"$library"
    printf 'extern "C" int ncclGetVersion(int* v) { *v = %d; return 0; }\n' \
        $((major * 10000 + minor * 100 + patch)) >"$dir/nccl.cpp"
    c++ -shared -fPIC -o "$dir/nvidia/nccl/lib/libnccl.so.2" "$dir/nccl.cpp"
}

# said NAME PATTERN: whether configure's messages (CMake wraps them) match PATTERN.
said() { tr -s ' \n' '  ' <"$WORK/$1.log" | grep -Eq -- "$2"; }

# configure NAME SITE [CMAKE ARGS...]: configures the check; output in $WORK/NAME.log.
configure() {
    local name=$1 dir=$2
    shift 2
    cmake -S "$ACC_SOURCE/tests/cmake/nccl_check" -B "$WORK/$name" "-DACC_FAKE_TORCH=$dir/torch" "$@" \
        >"$WORK/$name.log" 2>&1
}

site "$WORK/same" 2.28.9 2.28.9
if configure same "$WORK/same"; then
    said same "NCCL 2.28.9: header $WORK/same/nvidia/nccl/include, library $WORK/same/nvidia/nccl/lib/libnccl.so.2" || fail "the wheel's header and library were not the ones found: $(grep NCCL "$WORK/same.log")"
else
    fail "configure failed with a matching header and library:"
    cat "$WORK/same.log" >&2
fi

site "$WORK/other" 2.27.5 2.28.9
if configure other "$WORK/other"; then
    fail "configure accepted NCCL 2.27.5's header for a 2.28.9 library"
else
    said other "NCCL mismatch: .*nccl.h is NCCL 2.27.5 but .*libnccl.so.2 is 2.28.9" ||
        { fail "the mismatch is not named:"; cat "$WORK/other.log" >&2; }
fi

# A header given by hand is checked the same way.
if configure chosen "$WORK/same" "-DACC_NCCL_INCLUDE_DIR=$WORK/other/nvidia/nccl/include"; then
    fail "configure accepted -DACC_NCCL_INCLUDE_DIR of another NCCL release"
else
    said chosen "NCCL mismatch" || { fail "no mismatch message:"; cat "$WORK/chosen.log" >&2; }
fi

finish
