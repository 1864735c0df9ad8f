#!/usr/bin/env bash
# The toolkit's CUDA kernels run on every GPU the configured LibTorch runs on. For each
# architecture sm_XY LibTorch was built for, ACC_CUDA_ARCHITECTURES holds code for the
# same major version at a minor of at most Y (which that GPU runs), or PTX of an
# architecture at most XY (which its driver compiles at load time). A GPU left out
# would take the ATen operations, slower, with a warning.
source "$(dirname "$0")/common.sh"
: "${ACC_BUILD_DIR:?set by ctest}"

if [ "$(cmake_cached ACC_CUDA_KERNELS)" != ON ]; then
    echo "skip: built without the CUDA kernels (ACC_CUDA_KERNELS)"
    exit 77
fi

# LibTorch's architectures, from the Python torch of the same prefix (pip's build).
prefix=$(realpath -m "$(cmake_cached Torch_DIR)/../../..")
torch_dir=$("$ACC_PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null || true)
if [ -z "$torch_dir" ] || [ "$(realpath -m "$torch_dir")" != "$prefix" ]; then
    echo "skip: $ACC_PYTHON has no torch at the configured LibTorch's prefix ($prefix)"
    exit 77
fi
torch_architectures=$("$ACC_PYTHON" -c 'import torch; print(torch._C._cuda_getArchFlags())')
ours=$(cmake_cached ACC_CUDA_ARCHITECTURES)
echo "LibTorch: $torch_architectures; the toolkit's kernels: $ours"
[ -n "$torch_architectures" ] || fail "LibTorch names no CUDA architecture"

uncovered=$(
    "$ACC_PYTHON" - "$torch_architectures" "$ours" <<'PY'
import re, sys

def entries(text):
    # CMake's forms: 90 (code and PTX), 90-real (code), 90-virtual (PTX); 90a runs on 9.0 only.
    for item in filter(None, text.split(";")):
        m = re.fullmatch(r"(\d+)([af]?)(-real|-virtual)?", item.strip())
        if not m:
            sys.exit(f"unreadable architecture {item!r}")
        yield int(m.group(1)), m.group(2), m.group(3) != "-virtual", m.group(3) != "-real"

def runs_on(gpu, ours):
    for arch, variant, code, ptx in ours:
        if variant:
            if code and arch == gpu:
                return True
            continue
        if code and arch // 10 == gpu // 10 and arch <= gpu:
            return True
        if ptx and arch <= gpu:
            return True
    return False

ours = list(entries(sys.argv[2]))
gpus = [int(re.sub(r"[^0-9]", "", a)) for a in sys.argv[1].split() if a.startswith("sm_")]
print(" ".join(f"sm_{g}" for g in gpus if not runs_on(g, ours)))
PY
) || fail "could not compare the architectures"
[ -z "$uncovered" ] || fail "the kernels cannot run on $uncovered, where LibTorch runs (ACC_CUDA_ARCHITECTURES=$ours)"
finish
