#!/usr/bin/env bash
# Installs everything the toolkit needs from Debian 12's packages. Idempotent:
# when every package is present it only checks, in well under a second.
set -euo pipefail

packages=(
    # build
    g++ cmake ninja-build ccache pkg-config
    # libraries
    libtorch-dev libgloo-dev libhdf5-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
    zlib1g-dev libgtest-dev googletest
    # data: Fashion-MNIST under /usr/share/datasets/fashion-mnist
    dataset-fashion-mnist
    # tests and examples: readers nobody here wrote, PyTorch references, man pages
    python3 python3-torch python3-h5py python3-numpy python3-matplotlib hdf5-tools iproute2 man-db groff-base
    # the Python package (python/): installed into a venv, tested with pytest
    python3-venv python3-pip python3-pytest
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null; then
    sudo=(sudo)
else
    echo "setup: error: these packages are missing and installing them needs root: ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
