#!/usr/bin/env bash
# Every program with a man page: each long option of its --help appears in the
# page, and the page renders under man -l without warnings (where man can render).
source "$(dirname "$0")/common.sh"
render=1
man_renders || { render=0; echo "not rendering the pages: man -l cannot render a page here"; }
pages=0
for page in "$ACC_SOURCE"/man/*.1; do
    tool=$(basename "$page" .1)
    [ -x "$ACC_BIN/$tool" ] || { fail "man/$tool.1 has no program $tool"; continue; }
    pages=$((pages + 1))
    for option in $("$tool" --help | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u); do
        # roff writes a dash as \- ; accept both spellings.
        escaped=$(printf '%s' "$option" | sed 's/-/\\\\-/g')
        grep -qE -- "($escaped|$option)([^a-z0-9-]|\$)" "$page" || fail "man/$tool.1 does not document $option"
    done
    [ "$render" = 1 ] || continue
    warnings=$(MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null || true)
    [ -z "$warnings" ] || fail "man/$tool.1 renders with warnings: $warnings"
    rendered=$(MANWIDTH=80 man -l "$page" 2>/dev/null)
    for section in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" EXAMPLES "SEE ALSO"; do
        grep -q "^$section" <<<"$rendered" || fail "man/$tool.1 has no $section section"
    done
done
[ "$pages" -gt 0 ] || fail "no man pages found"
finish
