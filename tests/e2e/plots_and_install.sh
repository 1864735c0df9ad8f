#!/usr/bin/env bash
# The plotting script draws a schedule's regimes as a PNG, and `cmake --install`
# puts every program and man page under a prefix, where man -l renders each page
# (where man can render).
source "$(dirname "$0")/common.sh"
: "${ACC_BUILD_DIR:?set by ctest}"
cd "$WORK"

$ACC_PYTHON "$ACC_SOURCE/examples/synth_grads.py" -o grads.h5 --epochs 60 --decay-after 30
regime-detect grads.h5 -o sched.h5 -q
$ACC_PYTHON "$ACC_SOURCE/scripts/plot_regimes.py" grads.h5 sched.h5 -o regimes.png 2>/dev/null || fail "plot_regimes.py"
[ "$(head -c 8 regimes.png | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "regimes.png is not a PNG"
expect_exit 1 "sched.h5: not an accordion.grads file" -- $ACC_PYTHON "$ACC_SOURCE/scripts/plot_regimes.py" sched.h5 sched.h5

cmake --install "$ACC_BUILD_DIR" --prefix "$WORK/prefix" >/dev/null || fail "cmake --install"
render=1
man_renders || { render=0; echo "not rendering the installed pages: man -l cannot render a page here"; }
for page in "$ACC_SOURCE"/man/*.1; do
    name=$(basename "$page")
    tool=${name%.1}
    [ -x "prefix/bin/$tool" ] || fail "$tool is not installed"
    [ -f "prefix/share/man/man1/$name" ] || fail "man page $name is not installed"
    if [ "$render" = 1 ]; then
        warnings=$(MANWIDTH=80 man --warnings -l "prefix/share/man/man1/$name" 2>&1 >/dev/null || true)
        [ -z "$warnings" ] || fail "installed $name renders with warnings: $warnings"
        MANWIDTH=80 man -l "prefix/share/man/man1/$name" 2>/dev/null | grep -q "^NAME" || fail "installed $name does not render"
    fi
    "prefix/bin/$tool" --version | grep -q "Accordion toolkit" || fail "installed $tool --version"
done
finish
