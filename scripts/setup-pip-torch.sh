#!/usr/bin/env bash
# The GPU users' LibTorch: pip's torch wheel (CUDA 13.0, NCCL 2.28.9 from its
# nvidia-* wheels) in a virtual environment of its own. Idempotent: when the
# environment already holds the pinned torch it only checks (about a second).
# Prints the environment's python on stdout; everything else goes to stderr.
#
#   scripts/setup-pip-torch.sh            set up (or check) and print its python
#
# The environment also gets h5py, numpy and matplotlib: the pip build's tests
# use its python, so that torchrun and the PyTorch references they compare with
# are the torch the programs were built against (TCPStore's wire protocol is
# not the same in 1.13 and 2.x).
#
# Environment: ACC_TORCH_VENV (where the environment lives; default
# ~/.cache/accordion/torch-2.11.0-cu130, kept between builds and clones: the
# wheels are about 4.7 GB installed), ACC_PIP_TORCH (the pinned requirement).
set -euo pipefail
cd "$(dirname "$0")/.."

# torch 2.11.0 is the first release whose default Linux wheel is built for
# CUDA 13.0 (the machines' toolkit) with NCCL 2.28.9 (the toolkit's NCCL too).
pin=${ACC_PIP_TORCH:-torch==2.11.0}
want=${pin#torch==}
venv=${ACC_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/accordion/torch-${want}-cu130}
py="$venv/bin/python"

installed() {
    [ -x "$py" ] && "$py" - "$want" 2>/dev/null <<'EOF'
import sys, torch, h5py, numpy, matplotlib
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] and torch.version.cuda else 1)
EOF
}

if installed; then
    echo "$py"
    exit 0
fi

base=$(command -v python3 || true)
[ -n "$base" ] || { echo "setup-pip-torch: error: python3 not found (apt-get install python3 python3-venv)" >&2; exit 1; }
if ! "$base" -c 'import ensurepip, venv' 2>/dev/null; then
    # Debian's python3 makes virtual environments only with python3-venv.
    echo "setup-pip-torch: installing python3-venv (Debian's python3 needs it for virtual environments)" >&2
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q >&2
    "${sudo[@]}" apt-get install -y -q --no-install-recommends python3-venv >&2
fi

echo "setup-pip-torch: installing $pin (CUDA 13.0 wheel with its nvidia-* wheels, about 4.7 GB) into $venv" >&2
start=$(date +%s)
# A half-made environment (an interrupted install) is made anew.
rm -rf "$venv"
if ! mkdir -p "$(dirname "$venv")" 2>/dev/null || ! "$base" -m venv "$venv" >&2; then
    echo "setup-pip-torch: error: $venv: cannot make a virtual environment there (ACC_TORCH_VENV chooses another place)" >&2
    exit 1
fi
if ! "$py" -m pip install -q --disable-pip-version-check "$pin" h5py numpy matplotlib >&2; then
    echo "setup-pip-torch: error: pip could not install $pin (above); is PyPI reachable?" >&2
    exit 1
fi
if ! installed; then
    echo "setup-pip-torch: error: $venv has no CUDA build of torch $want after installing it" >&2
    exit 1
fi
echo "setup-pip-torch: $("$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))') in $(( $(date +%s) - start )) s" >&2
echo "$py"
