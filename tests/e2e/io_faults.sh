#!/usr/bin/env bash
# Writers under faults and readers of foreign files: a disk that fills up ends the
# program with one error line (exit 1, never a crash) and leaves the previous
# file whole and resumable (grad-dump's statistics, train-dist's checkpoint and
# metrics); a temporary file is never written through a planted
# link, and what a killed run left behind goes at the next start; h5py's
# fixed-length strings read whole. The tmpfs cases need root and say so when
# skipped.
source "$(dirname "$0")/common.sh"
synth="$ACC_PYTHON $ACC_SOURCE/examples/synth_grads.py"
cd "$WORK"
$synth -o good.h5 --model tiny --epochs 30

# limited BLOCKS COMMAND...: COMMAND may not grow a file past BLOCKS KiB (EFBIG,
# as on a full disk); any user can set this limit.
limited() {
    local blocks=$1
    shift
    (trap '' XFSZ; ulimit -f "$blocks"; exec "$@")
}
mkdir small
expect_exit 1 "^regime-detect: error: small/s.h5: .*File too large" -- limited 4 regime-detect good.h5 -o small/s.h5 -q
[ -z "$(ls -A small)" ] || fail "a failed write left files behind: $(ls -A small)"

# A link planted at the name the temporary file once had (.<name>.tmp-<pid>-0,
# predictable from the process id, which exec keeps) is not written through, and
# one left by a process that is gone is removed.
mkdir links
echo precious >links/victim
sleep 0 &
dead=$!
wait "$dead"
ln -s victim "links/.s.h5.tmp-$dead-0"
bash -c 'for n in 0 1 2 3; do ln -s victim "links/.s.h5.tmp-$$-$n"; done; exec regime-detect good.h5 -o links/s.h5 -q' ||
    fail "regime-detect with planted links"
[ "$(cat links/victim)" = precious ] || fail "the link's target was overwritten"
[ -f links/s.h5 ] && [ ! -L links/s.h5 ] || fail "links/s.h5 is not a plain file: $(ls -l links)"
[ ! -L "links/.s.h5.tmp-$dead-0" ] || fail "a dead run's temporary link was left"

# Only regular files or new names are outputs: a FIFO, or a link to a device,
# stays what it was (the finished file is renamed over the name).
mkfifo special.fifo
expect_exit 1 "^regime-detect: error: special.fifo: is not a regular file \(a device, FIFO or socket\)" -- \
    regime-detect good.h5 -o special.fifo -q
[ -p special.fifo ] || fail "the FIFO was replaced: $(ls -l special.fifo)"
ln -s /dev/null null.link
expect_exit 1 "^regime-detect: error: null.link: is not a regular file" -- regime-detect good.h5 -o null.link -q
[ -L null.link ] && [ -c /dev/null ] || fail "the link to /dev/null was replaced: $(ls -l null.link)"
expect_exit 1 "^comm-profile: error: special.fifo: is not a regular file" -- comm-profile -e 64 -n 1 -w 0 -q -o special.fifo
[ -p special.fifo ] || fail "comm-profile replaced the FIFO"

# Fixed-length strings (h5py's "S" type, np.bytes_ attributes) keep their last character.
$ACC_PYTHON - <<'PY' || fail "writing fixed.h5 with h5py"
import h5py, numpy as np
with h5py.File("fixed.h5", "w") as f:
    f.attrs["format"] = np.bytes_("accordion.grads")
    f.attrs["format_version"] = np.bytes_("1.0")
    f["parameters/name"] = np.array([b"fc1.weight", b"fc1.bias"], dtype="S")
    f["parameters/ndim"] = np.array([2, 1], dtype=np.int32)
    f["parameters/shape"] = np.array([[32, 16], [32, 0]], dtype=np.int64)
    f["parameters/numel"] = np.array([512, 32], dtype=np.int64)
    f["epochs/norm"] = np.linspace(1, 2, 24).reshape(12, 2)
    f["epochs/lr"] = np.full(12, 0.1)
    f["epochs/steps"] = np.full(12, 10, dtype=np.int64)
PY
regime-detect fixed.h5 --interval 2 -o fixed-sched.h5 -q 2>fixed.err || fail "fixed-length strings: $(cat fixed.err)"
$ACC_PYTHON - <<'PY' || fail "the schedule made from fixed.h5 lost characters"
import h5py
with h5py.File("fixed-sched.h5", "r") as f:
    names = [n.decode() for n in f["parameters/name"][:]]
    assert names == ["fc1.weight", "fc1.bias"], names
PY

# Two runs given one output: the second stops at once and names the first, which
# finishes its file whole (epoch rows 0 1 2, complete).
wait_for_lock() {  # wait_for_lock LOCKFILE PID: until run PID has written its line there
    for _ in $(seq 600); do
        [ -s "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || { fail "the run ended before its lock file $1 was seen"; return 1; }
        sleep 0.05
    done
    fail "no lock file $1 appeared"
    return 1
}
# The first run is stopped (SIGSTOP) while the others try, so that it is sure to hold its outputs.
run=(--model mlp --epochs 3 --train-samples 512 --test-samples 64 --threads 1 -q)
grad-dump "${run[@]}" --seed 1 -o c.h5 &
first=$!
wait_for_lock .c.h5.lock "$first"
kill -STOP "$first"
expect_exit 1 "^grad-dump: error: c.h5: is being written by grad-dump \(process $first on [^,]+, started [0-9-]+ [0-9:]+ UTC\); wait until that run ends, or write to another name$" -- \
    grad-dump "${run[@]}" --seed 2 -o c.h5
kill -CONT "$first"
wait "$first" || fail "the first grad-dump run failed"
$ACC_PYTHON - <<'PY' || fail "the first run's file was damaged by the second"
import h5py
with h5py.File("c.h5", "r") as f:
    assert list(f["epochs/epoch"][:]) == [0, 1, 2] and f.attrs["complete"] == 1, (list(f["epochs/epoch"][:]), dict(f.attrs))
PY
[ ! -e .c.h5.lock ] || fail "the lock file was left: $(ls -A)"
train=(--model mlp --hidden-size 16 --dataset synthetic --train-samples 64 --test-samples 16 --batch-size 16
       --threads 1 --epochs 2 --compress topk:0.5 -q)
# The first run is long enough that its lock is seen on a loaded machine too.
train-dist --model mlp --hidden-size 16 --dataset synthetic --train-samples 4096 --test-samples 16 --batch-size 16 \
    --threads 1 --epochs 2 --compress topk:0.5 -q --metrics m.h5 &
first=$!
wait_for_lock .m.h5.lock "$first"
kill -STOP "$first"
expect_exit 1 "^train-dist: error: m.h5: is being written by train-dist \(process $first on" -- \
    train-dist "${train[@]}" --metrics m.h5 --seed 9
# Its checkpoint is held too, whichever program asks.
expect_exit 1 "^grad-dump: error: m.ckpt.h5: is being written by train-dist \(process $first on" -- \
    grad-dump "${run[@]}" -o other.h5 --checkpoint m.ckpt.h5
kill -CONT "$first"
wait "$first" || fail "the first train-dist run failed"

# A file that is not HDF5, or is read-only, is kept unless --force says otherwise.
echo "my notes" >notes.h5
expect_exit 1 "^regime-detect: error: notes.h5: exists and is not an HDF5 file; choose another name or give --force to replace it$" -- \
    regime-detect good.h5 -o notes.h5
[ "$(cat notes.h5)" = "my notes" ] || fail "notes.h5 was replaced"
expect_exit 1 "^compress-bench: error: notes.h5: exists and is not an HDF5 file" -- \
    compress-bench --shapes resnet18 --compressors none --world 2 --reps 1 -o notes.h5
expect_exit 1 "^comm-profile: error: notes.h5: exists and is not an HDF5 file" -- comm-profile -e 64 -n 1 -w 0 -o notes.h5
expect_exit 1 "^train-dist: error: notes.h5: exists and is not an HDF5 file" -- train-dist "${train[@]}" --metrics notes.h5
expect_exit 1 "^grad-dump: error: notes.h5: exists and is not an HDF5 file" -- grad-dump "${run[@]}" -o notes.h5
[ "$(cat notes.h5)" = "my notes" ] || fail "notes.h5 was replaced"
regime-detect good.h5 -o notes.h5 --force -q || fail "regime-detect --force over a file that is not HDF5"
regime-detect good.h5 -o kept.h5 -q && chmod 0444 kept.h5
expect_exit 1 "^regime-detect: error: kept.h5: exists and is read-only; make it writable or give --force to replace it$" -- \
    regime-detect good.h5 -o kept.h5
regime-detect good.h5 -o kept.h5 --force -q || fail "regime-detect --force over a read-only file"
: >empty.h5
regime-detect good.h5 -o empty.h5 -q || fail "an empty file is an output like a new name"

if [ "$(id -u)" != 0 ]; then
    echo "SKIP: the full-disk cases mount a tmpfs and need root"
    finish
    exit 0
fi
mkdir full
mount -t tmpfs -o size=2m tmpfs full
trap 'umount "$WORK/full" 2>/dev/null; rm -rf "$WORK"' EXIT
# Room for the file to be created but not written out: its close fails.
dd if=/dev/zero of=full/filler bs=64k 2>/dev/null || true
truncate -s -8K full/filler
expect_exit 1 "^regime-detect: error: full/s.h5: cannot close the file \(No space left on device\)$" -- \
    regime-detect good.h5 -o full/s.h5 -q
[ "$(ls -A full)" = filler ] || fail "a failed write on a full disk left files behind: $(ls -A full)"

# grad-dump's disk fills up while it appends an epoch: the epochs before stay
# readable, and --resume continues once there is room again.
rm full/filler
mount -o remount,size=4m tmpfs full
args=(--model mlp --hidden-size 256 --train-samples 256 --test-samples 64 --batch-size 64 --epochs 4 --threads 1
      --seed 3 --snapshot-epochs 0,1,2,3)
expect_exit 1 "^grad-dump: error: full/g(\.ckpt)?\.h5: .*No space left on device" -- grad-dump "${args[@]}" -o full/g.h5 -q
$ACC_PYTHON - <<'PY' || fail "the file of the run that hit the full disk is not valid"
import h5py
with h5py.File("full/g.h5", "r") as f:
    assert f.attrs["complete"] == 0
    epochs = f["epochs/norm"].shape[0]
    assert 1 <= epochs < 4, epochs
    assert sorted(f["snapshots"]) == [f"epoch_{e}" for e in range(epochs)], list(f["snapshots"])
    for e in range(epochs):
        assert f[f"snapshots/epoch_{e}"].attrs["epoch"] == e
PY
regime-detect full/g.h5 --interval 1 -o partial-sched.h5 -q || fail "regime-detect cannot read the partial file"
ls -A full | grep -q '\.tmp-' && fail "temporary files were left on the full disk: $(ls -A full)"
mount -o remount,size=64m tmpfs full
grad-dump "${args[@]}" -o full/g.h5 --resume -q 2>resume.err || fail "--resume after freeing space: $(cat resume.err)"
$ACC_PYTHON - <<'PY' || fail "the resumed run's file"
import h5py
with h5py.File("full/g.h5", "r") as f:
    assert f.attrs["complete"] == 1 and f["epochs/norm"].shape[0] == 4
    assert sorted(f["snapshots"]) == [f"epoch_{e}" for e in range(4)], list(f["snapshots"])
PY

# Whichever write the full disk stops, the statistics file and the checkpoint stay
# at the same epoch (the checkpoint is written first, put in place last), so
# --resume always continues; with small disks the first checkpoint is what fails.
for size in 1m 2m 3m 5m; do
    umount full
    mount -t tmpfs -o "size=$size" tmpfs full
    grad-dump "${args[@]}" -o full/g.h5 -q 2>/dev/null || true
    $ACC_PYTHON - <<'PY' || fail "$size: the statistics file and the checkpoint disagree"
import os, h5py
rows = 0
if os.path.exists("full/g.h5"):
    with h5py.File("full/g.h5", "r") as f:
        rows = f["epochs/norm"].shape[0]
if os.path.exists("full/g.ckpt.h5"):
    with h5py.File("full/g.ckpt.h5", "r") as f:
        assert f.attrs["epoch"] == rows, (int(f.attrs["epoch"]), rows)
else:
    assert rows == 0, f"{rows} epochs in the file and no checkpoint"
PY
    if [ -e full/g.ckpt.h5 ]; then
        mount -o remount,size=64m tmpfs full
        grad-dump "${args[@]}" -o full/g.h5 --resume -q 2>resume.err || fail "$size: --resume: $(cat resume.err)"
    fi
done

# train-dist: the first checkpoint (6.9 MB) fits, the second cannot be written
# beside it; the first stays, with the metrics, and --resume finishes the run.
umount full
mount -t tmpfs -o size=7m tmpfs full
args=(--model mlp --hidden-size 256 --dataset synthetic --train-samples 64 --test-samples 16 --batch-size 16
      --threads 1 --epochs 3 --seed 2 --metrics full/m.h5 --checkpoint-dir full -q)
expect_exit 1 "^train-dist: error: full/m.ckpt.h5: .*No space left on device" -- train-dist "${args[@]}"
ls -A full | grep -q '\.tmp-' && fail "temporary files were left on the full disk: $(ls -A full)"
mount -o remount,size=64m tmpfs full
train-dist "${args[@]}" --resume 2>resume-dist.err || fail "train-dist --resume after freeing space: $(cat resume-dist.err)"
$ACC_PYTHON - <<'PY' || fail "the resumed train-dist run's metrics"
import h5py
with h5py.File("full/m.h5", "r") as f:
    assert f.attrs["complete"] == 1 and list(f["epochs/epoch"][:]) == [0, 1, 2], list(f["epochs/epoch"][:])
PY
finish
