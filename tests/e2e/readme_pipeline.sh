#!/usr/bin/env bash
# The README's pipeline, run as written: the block of commands under "The
# pipeline" is taken from README.md and run in order, with small settings
# substituted in (fewer epochs and samples, a short comm-profile sweep, one
# repetition) so that it takes seconds; every substitution must match, so a
# change of the README's commands shows here. Then a one-rank comm-profile:
# it warns that it measures no network, and compress-bench refuses its file.
source "$(dirname "$0")/common.sh"
cd "$WORK"
"$ACC_PYTHON" - "$ACC_SOURCE/README.md" >pipeline.sh <<'PY'
import re, sys
text = open(sys.argv[1]).read()
section = text[text.index("## The pipeline"):]
section = section[: section.index("\n## ", 1)]
blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
assert any('export PATH="$PWD/build/bin:$PATH"' in b for b in blocks), "no PATH line in the section"
block = next(b for b in blocks if "grad-dump" in b)
lines = [re.sub(r"\s+#.*$", "", line).rstrip() for line in block.replace("\\\n", " ").splitlines()]
script = "\n".join(line for line in lines if line) + "\n"
small = [  # (README text, replacement, how many times it must occur)
    ("--epochs 12", "--epochs 4 --train-samples 1000 --test-samples 200 --threads 1", 2),
    ("--lr-decay-epochs 8", "--lr-decay-epochs 3", 2),
    ("--snapshot-epochs 0,8", "--snapshot-epochs 0,3", 1),
    ("-o comm.h5", "-b 4K -e 64K -n 3 -w 1 -o comm.h5", 1),
    ("--world 4,16,64", "--world 4,16,64 --reps 1", 1),
]
for old, new, count in small:
    assert script.count(old) == count, f"the README's pipeline no longer has {count} x '{old}':\n{script}"
    script = script.replace(old, new)
commands = [line.split()[0] for line in script.splitlines()]
assert commands == ["grad-dump", "regime-detect", "train-dist", "comm-profile", "compress-bench"], commands
print("set -euo pipefail")
for line in script.splitlines():
    print(f"echo '+ {line}' >&2")
    print(line)
PY
[ -s pipeline.sh ] || { fail "could not take the pipeline from README.md"; finish; }
bash pipeline.sh >out 2>err || { fail "the README's pipeline does not run"; cat pipeline.sh err >&2; }
for f in grads.h5 sched.h5 run.h5 comm.h5; do [ -s "$f" ] || fail "$f was not written"; done
grep -q "measures no network" err && fail "comm-profile warned on the README's 2 ranks"
grep -Eq "^ +powersgd:1 +4 " err || { fail "compress-bench printed no row for powersgd:1 on 4 workers"; cat err >&2; }
grep -q "critical" err || fail "regime-detect printed no summary"

# One rank: a warning on stderr, one line, saying how to get a real profile.
comm-profile -b 4K -e 16K -n 2 -w 1 -o one.h5 >out 2>err || fail "comm-profile on one rank failed"
[ "$(grep -c "warning: one rank measures no network" err)" = 1 ] || { fail "no one-line warning on a one-rank profile"; cat err >&2; }
grep -q -- "--nproc 2.*torchrun" err || fail "the warning does not say how to get a real profile"
comm-profile -q -b 4K -e 16K -n 2 -w 1 >out 2>err
grep -q "measures no network" err || fail "-q hides the one-rank warning"
expect_exit 1 "one.h5" -- compress-bench --shapes resnet18 --comm one.h5 --world 4
finish
