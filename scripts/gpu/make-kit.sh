#!/usr/bin/env bash
# Puts the GPU kit inside the checkout, so that it is copied to a GPU machine with
# the checkout (docs/gpu.md, "The kit").
#   scripts/gpu/make-kit.sh [--with-data] KIT_SOURCE [DEST]
# KIT_SOURCE is a GPU kit directory: Debian 12 .deb files of the libraries the
# machine lacks (debs/), Gloo's public headers (gloo/include) and env.sh, which
# unpacks them there and sets CMAKE_ARGS. DEST (default .gpu-kit, a folder inside
# the checkout, named from its root) gets a copy of the three. The short GPU run
# trains on synthetic data, so the kit holds no data set; --with-data adds
# Fashion-MNIST from $FASHION_MNIST (default /usr/share/datasets/fashion-mnist) as
# DEST/data/fashion-mnist, which the second run's default suite reads (env.sh puts
# it in place on a machine without it). DEST goes into git's info/exclude, so that
# it stays out of `git status` (a copy of the checkout made from git's list of
# files must add it). The script says the size of what is to be copied (the
# checkout's files and DEST) and prints the steps: what to copy to the GPU
# machine, the command to run there, and the folder to copy back.
set -euo pipefail

say() { echo "make-kit: $*" >&2; }
die() {
    echo "make-kit: error: $*" >&2
    exit 1
}
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

with_data=
if [ "${1:-}" = --with-data ]; then
    with_data=1
    shift
fi
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ -z "$1" ] || [[ $1 == -* ]]; then
    echo "usage: scripts/gpu/make-kit.sh [--with-data] KIT_SOURCE [DEST]   (DEST defaults to .gpu-kit)" >&2
    exit 2
fi
what="a GPU kit directory holds env.sh, debs/*.deb and gloo/include"
src=$1
[ -e "$src" ] || die "$src: no such directory ($what)"
[ -d "$src" ] || die "$src: not a directory ($what)"
src=$(cd "$src" && pwd)
[ -f "$src/env.sh" ] || die "$src/env.sh: missing, so $src is not a GPU kit ($what)"
compgen -G "$src/debs/*.deb" >/dev/null || die "$src/debs: no .deb files, so $src is not a GPU kit ($what)"
[ -d "$src/gloo/include" ] || die "$src/gloo/include: missing, so $src is not a GPU kit ($what)"
fashion=
if [ -n "$with_data" ]; then
    fashion=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
    [ -d "$fashion" ] || die "$fashion: no Fashion-MNIST there (--with-data; FASHION_MNIST names another place)"
    fashion=$(cd "$fashion" && pwd)
fi

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
    die "$root: not a git checkout (the kit is kept out of git's view through its info/exclude)"

# The kit is copied with the checkout, so DEST must be a folder inside it.
dest=$(realpath -m --relative-to="$root" "${2:-.gpu-kit}")
case $dest in
. | .. | ../* | .git | .git/*) die "${2:-.gpu-kit}: DEST must be a new folder inside the checkout ($root)" ;;
esac
[ -z "$(git ls-files -- "$dest" | head -1)" ] || die "$dest: git tracks files there; choose another DEST"
if [ -e "$dest" ] && [ ! -f "$dest/env.sh" ] && [ -n "$(ls -A "$dest" 2>/dev/null || echo file)" ]; then
    die "$dest: exists and is not a GPU kit; remove it or choose another DEST"
fi

# The size of what is to be copied: the checkout's files and the kit.
bytes() { du -sb "$1" | cut -f1; }
tree=$({ git ls-files -z -co --exclude-standard -- . ":(exclude)$dest" | du -cb --files0-from=- 2>/dev/null |
    tail -1 | cut -f1; } || true)
kit=$(bytes "$src")
data=0
[ -z "$fashion" ] || data=$(bytes "$fashion")
total=$((${tree:-0} + kit + data))
sizes="the kit $(mib "$kit")${fashion:+, Fashion-MNIST $(mib "$data")}, the checkout's files $(mib "${tree:-0}")"

# Copied under a temporary name and renamed, so that an interrupted copy leaves no half kit.
tmp=$dest.tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp"
cp -R "$src/env.sh" "$src/debs" "$src/gloo" "$tmp/"
if [ -n "$fashion" ]; then
    mkdir -p "$tmp/data"
    cp -R "$fashion" "$tmp/data/fashion-mnist"
fi
chmod -R u+w "$tmp" # the source may be read-only; a later run must be able to replace the copy
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
mv "$tmp" "$dest"

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/$dest/" "$exclude" 2>/dev/null || echo "/$dest/" >>"$exclude"

say "$dest: $(mib "$total") to copy with the checkout ($sizes)"
command=scripts/gpu/run-all.sh
[ -z "$with_data" ] || command+=" second"
[ "$dest" = .gpu-kit ] || command="ACC_GPU_KIT=$dest $command"
# The steps: copy the checkout there, run the command from its root, copy the results back.
echo "copy: the checkout with $dest"
echo "command: $command"
echo "copy back: gpu-results/"
