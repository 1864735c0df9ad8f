#!/usr/bin/env bash
# Progress on a terminal, quiet in a pipe: every long-running program draws a
# live status line ("\r\033[K...") when stderr is a terminal (a pseudo-terminal
# from script(1) here), through the --nproc launcher too, and none in a pipe
# or with -q.
source "$(dirname "$0")/common.sh"
cd "$WORK"
if ! script -qec true /dev/null >/dev/null 2>&1; then
    echo "script(1) cannot open a pseudo-terminal here; skipping"
    exit 77
fi
clear=$'\r\033[K'
small=(--model mlp --epochs 2 --train-samples 1000 --test-samples 200 --threads 1 --batch-size 100)
# on_terminal NAME COMMAND...: runs COMMAND with stderr on a pseudo-terminal; its output in NAME.tty.
on_terminal() {
    local name=$1
    shift
    script -qec "$(printf '%q ' "$@")" /dev/null >"$name.tty" 2>&1 </dev/null || fail "$name on a terminal exited $?"
}
# expect_live NAME PATTERN: the live line matching PATTERN was drawn.
expect_live() {
    grep -aqF "$clear$2" "$1.tty" || { fail "$1: no live line '$2' on a terminal"; cat -v "$1.tty" | tail -5 >&2; }
}
in_pipe() {
    local name=$1
    shift
    "$@" >"$name.out" 2>"$name.err" || fail "$name in a pipe exited $?"
    if grep -aq $'\033\[K' "$name.err"; then fail "$name draws a live line into a pipe"; fi
}

on_terminal grad-dump grad-dump "${small[@]}" -o g1.h5
expect_live grad-dump "epoch 1 (2/2)  step 10/10  loss "
grep -aq "images/s" grad-dump.tty || fail "grad-dump: no rate in the live line"
in_pipe grad-dump-pipe grad-dump "${small[@]}" -o g2.h5
on_terminal grad-dump-q grad-dump "${small[@]}" -q -o g3.h5
if grep -aqF "$clear" grad-dump-q.tty; then fail "grad-dump -q draws a live line"; fi

# Two ranks: the launcher reads the ranks' pipes and passes rank 0's line on.
on_terminal grad-dump-2 grad-dump --nproc 2 "${small[@]}" -o g4.h5
expect_live grad-dump-2 "epoch 1 (2/2)  step 5/5  loss "
on_terminal train-dist train-dist --nproc 2 "${small[@]}" --compress powersgd:1
expect_live train-dist "epoch 1 (2/2)  step 5/5  loss "
in_pipe train-dist-pipe train-dist --nproc 2 "${small[@]}" --compress powersgd:1

bench=(compress-bench --shapes lstm --world 4,16 --compressors powersgd:1,topk:0.01 --reps 1 --alpha 1e-5 --bandwidth 1e9)
on_terminal compress-bench "${bench[@]}"
expect_live compress-bench "powersgd:1 W=4  item 1/4"
expect_live compress-bench "topk:0.01 W=16  item 4/4"
in_pipe compress-bench-pipe "${bench[@]}"

on_terminal comm-profile comm-profile --nproc 2 -b 4K -e 16K -n 2 -w 1
expect_live comm-profile "allreduce 4 KiB  item 1/"
in_pipe comm-profile-pipe comm-profile --nproc 2 -b 4K -e 16K -n 2 -w 1
finish
