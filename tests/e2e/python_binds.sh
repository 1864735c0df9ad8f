#!/usr/bin/env bash
# The Python package binds the library: no message of the run plan, Accordion's rule,
# schedules or GraVAC, and no default of theirs, is written in python/accordion too
# (tests/e2e/python_binds.py). The check must catch a copy made on purpose.
source "$(dirname "$0")/common.sh"
check="$ACC_SOURCE/tests/e2e/python_binds.py"
"$ACC_PYTHON" "$check" "$ACC_SOURCE" || fail "the package repeats the library (above)"

# Probes: a copied message, and a literal default.
cat >"$WORK/probe.py" <<'PY'
def levels(eta=0.5):
    raise ValueError(f"{eta}: (extend_last=True) repeats its last epoch")
PY
"$ACC_PYTHON" "$check" "$ACC_SOURCE" "$WORK/probe.py" 2>"$WORK/err" && fail "the check missed the probe's copies"
grep -q "probe.py:2: the library's message" "$WORK/err" || fail "the check missed the probe's message: $(cat "$WORK/err")"
grep -q "probe.py:1: eta= has a literal default" "$WORK/err" || fail "the check missed the probe's default: $(cat "$WORK/err")"
[ "$failures" -eq 0 ] || exit 1
echo "python_binds: ok"
