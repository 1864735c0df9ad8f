#!/usr/bin/env bash
# comm-profile under Debian's torchrun (--no_python): ranks take their
# rendezvous from torchrun's environment and join the store its agent hosts.
source "$(dirname "$0")/common.sh"
cd "$WORK"
"$ACC_PYTHON" -c 'import torch.distributed.run' 2>/dev/null || { echo "SKIP: no torch.distributed.run in $ACC_PYTHON"; exit 77; }
port=$(free_port)
got=0
# The form the manual gives, which torchrun 1.13 and 2.x both accept: the ranks'
# standard error is copied with a prefix, standard output is left alone.
"$ACC_PYTHON" -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2 --master_port "$port" \
    --log_dir "$WORK/logs" --no_python "$ACC_BIN/comm-profile" -v -b 8 -e 16K -f 8 -n 3 -w 1 --check \
    --collectives allreduce,broadcast -o comm.h5 --csv >comm.csv 2>err.txt || got=$?
[ "$got" = 0 ] || fail "torchrun exited with $got: $(tail -5 err.txt)"
for r in 0 1; do
    grep -qE "comm-profile\[$r\]: debug: joining as rank $r of 2 \(gloo\), store at 127.0.0.1:$port hosted by torchrun's agent, keys under /worker/attempt_0" err.txt ||
        fail "rank $r did not join torchrun's agent store: $(grep -m2 "joining" err.txt)"
done
grep -q "# Wrong values: 0 OK" err.txt || fail "no checked table in the output"
# Standard output is exactly rank 0's CSV: a header and one row per size and collective.
"$ACC_PYTHON" - <<'PY' || fail "comm.csv is not clean CSV: $(head -3 comm.csv)"
import csv
rows = list(csv.reader(open("comm.csv")))
assert rows[0][:3] == ["collective", "size_bytes", "count"], rows[0]
assert len(rows) == 1 + 2 * 4, len(rows)
assert all(len(r) == len(rows[0]) for r in rows), rows
assert sorted({r[0] for r in rows[1:]}) == ["allreduce", "broadcast"], rows
assert all(r[-1] == "0" for r in rows[1:]), rows
PY
"$ACC_PYTHON" - <<'PY' || fail "comm.h5 is not a 2-rank profile"
import h5py
f = h5py.File("comm.h5", "r")
assert f.attrs["world_size"] == 2
assert sorted(f["collectives"]) == ["allreduce", "broadcast"]
for name in f["collectives"]:
    assert (f["collectives"][name]["wrong"][:] == 0).all()
    assert list(f["collectives"][name]["size"][:]) == [8, 64, 512, 4096]
PY
finish
