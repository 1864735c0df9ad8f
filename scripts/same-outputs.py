"""Canonical text of the toolkit's outputs, for scripts/same-outputs.sh.

  same-outputs.py h5 FILE      every attribute and dataset of an HDF5 file, one per line
  same-outputs.py json FILE    a JSON document (stdout of --json), keys sorted
  same-outputs.py log FILE     what a program's stderr says that does not depend on time

Values that measure time (names with 'seconds', 'time', 'throughput', 'rate',
'created', ...) print as '<time>', and so do the parts of log lines that report
time; everything else prints exactly (floats as repr, large arrays as a hash of
their bytes and a few values), so that two builds that compute the same numbers
print the same text.
"""
import hashlib
import json
import os
import re
import sys

# The run's scratch folder, which file names in the outputs mention.
WORK = os.environ.get("ACC_SAME_WORK", "")

TIMED = re.compile(r"(seconds|_time|^time|time_|throughput|rate$|_rate|created|elapsed|per_s$|_ms$|^ms_|"
                   r"bandwidth|speed|latency|host|pid|command_line|duration|wall)", re.IGNORECASE)


def timed(name):
    return bool(TIMED.search(name.rsplit("/", 1)[-1]))


def unworked(text):
    return text.replace(WORK, "<work>") if WORK else text


def text_of(value):
    import numpy as np
    if isinstance(value, bytes):
        return repr(unworked(value.decode("utf-8", "replace")))
    if isinstance(value, str):
        return repr(unworked(value))
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "OSU":
            return repr([text_of(v) for v in value.ravel().tolist()])
        if value.size > 64:
            digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
            head = ", ".join(repr(v) for v in value.ravel()[:4].tolist())
            return f"{value.dtype}{list(value.shape)} sha256 {digest} [{head}, ...]"
        return f"{value.dtype}{list(value.shape)} {value.tolist()!r}"
    if isinstance(value, np.generic):
        return repr(value.item())
    return repr(value)


def dump_h5(path):
    import h5py

    def attrs(name, obj):
        for key in sorted(obj.attrs):
            shown = "<time>" if timed(key) else text_of(obj.attrs[key])
            print(f"{name or '/'} @{key} = {shown}")

    def visit(name, obj):
        attrs(name, obj)
        if isinstance(obj, h5py.Dataset):
            value = obj[()]
            if name.endswith("gravac/inputs"):
                value = value[:, :3]  # the last column is each step's measured throughput
            shown = "<time>" if timed(name) else text_of(value)
            print(f"{name} = {shown}")
        else:
            print(f"{name}/")

    with h5py.File(path, "r") as f:
        attrs("", f)
        f.visititems(visit)


def mask(value, key=""):
    if timed(key):
        return "<time>"
    if isinstance(value, dict):
        return {k: mask(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v, key) for v in value]
    if isinstance(value, str):
        return unworked(value)
    return value


def dump_json(path):
    with open(path) as f:
        print(json.dumps(mask(json.load(f)), sort_keys=True, indent=1))


# Log lines: the epoch lines up to their timing part, weights' checksums, the
# programs' decisions; pids, ports and timings left out.
KEEP = re.compile(r"(epoch \d+|checksum|critical|level|sent|schedule|GraVAC|gravac|resum|warning|error)")
DROP_PARTS = [
    re.compile(r";? ?\d+(\.\d+)? s: compute .*$"),
    re.compile(r"; time: .*?(; |$)"),
    re.compile(r"[\d,]+(\.\d+)? ?(s|ms|us|steps/s|samples/s|images/s|tokens/s|/s)\b"),
    re.compile(r"pid \d+"),
    re.compile(r"127\.0\.0\.1:\d+"),
]


def dump_log(path):
    # Sorted: the ranks' lines interleave differently from run to run.
    kept = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if "debug: starting" in line or "is pid" in line or "joining as rank" in line:
                continue
            if "buckets launched" in line:
                continue  # how many overlap the backward pass depends on timing
            if not KEEP.search(line):
                continue
            for part in DROP_PARTS:
                line = part.sub("<time>", line)
            kept.append(unworked(line))
    print("\n".join(sorted(kept)))


def main():
    kind, path = sys.argv[1], sys.argv[2]
    {"h5": dump_h5, "json": dump_json, "log": dump_log}[kind](path)


if __name__ == "__main__":
    main()
