#!/usr/bin/env bash
# Speed goals of the compressors, both sides measured in this run on one thread each:
#   topk:0.01 on 11,173,962 floats (ResNet-18's size): at most 0.1x the time of torch.topk
#   powersgd:2 over ResNet-18's shapes: encode + decode at most 0.7x the same math in PyTorch
#   signsgd, fp16, qsgd:127 encoding: at least 50% of this machine's memcpy bandwidth
# Prints each measurement and ratio (from the fastest of REPS runs, medians alongside).
#   scripts/bench-compress.sh            REPS=20 by default
# BENCH_RAW=DIR keeps the raw data: compress-bench's and the PyTorch side's JSON
# (fastest, median and slowest time of each), and the report; BENCH_FROM=DIR makes
# the report again from them.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${ACC_BUILD_DIR:-build}/bin/compress-bench
source scripts/bench-common.sh
trap bench_cleanup EXIT
reps=${REPS:-20}

if bench_measuring; then
    # The data both sides read: one gradient snapshot of 11,173,962 normal values.
    "$python" scripts/write_flat_grads.py "$tmp/flat.h5" 11173962

    "$bin" -q --from "$tmp/flat.h5" --compressors topk:0.01,signsgd,fp16,qsgd:127 --vectors compress --world 1 \
        --reps "$reps" --threads 1 --json >"$raw/flat.json"
    "$bin" -q --shapes resnet18 --compressors powersgd:2 --vectors compress --world 1 --reps "$reps" --threads 1 \
        --json >"$raw/resnet18.json"
    "$python" scripts/bench_compress_reference.py "$tmp/flat.h5" --reps "$reps" >"$raw/torch.json"
fi
bench_need flat.json resnet18.json torch.json

"$python" - "$raw/flat.json" "$raw/resnet18.json" "$raw/torch.json" <<'PY' | bench_report
import json, sys
flat, resnet, torch = (json.load(open(p)) for p in sys.argv[1:4])
rows = {r["compressor"]: r for r in flat["results"] + resnet["results"]}
memcpy = flat["memcpy_bandwidth"]
gradient = 4.0 * flat["values"]
failed = 0

def verdict(ok):
    global failed
    failed += not ok
    return "ok" if ok else "MISSED"

def ms(s):
    return f"{1e3 * s:.2f} ms"

print(f"compressor speed, one thread each; fastest of {flat['reps']} runs (median in brackets)")
topk, ref = rows["topk:0.01"]["encode_seconds"], torch["topk"]
ratio = topk["min"] / ref["min"]
print(f"  topk:0.01 encode, {flat['values']:,} floats: {ms(topk['min'])} ({ms(topk['median'])}); "
      f"torch.topk {ms(ref['min'])} ({ms(ref['median'])}); ratio {ratio:.3f} "
      f"({topk['median'] / ref['median']:.3f}), goal <= 0.1: {verdict(ratio <= 0.1)}")
p = rows["powersgd:2"]
ours = p["encode_seconds"]["min"] + p["decode_seconds"]["min"]
ours_median = p["encode_seconds"]["median"] + p["decode_seconds"]["median"]
ref = torch["powersgd2"]
ratio = ours / ref["min"]
print(f"  powersgd:2 encode+decode, ResNet-18 shapes: {ms(ours)} ({ms(ours_median)}); PyTorch operations "
      f"{ms(ref['min'])} ({ms(ref['median'])}); ratio {ratio:.3f} ({ours_median / ref['median']:.3f}), "
      f"goal <= 0.7: {verdict(ratio <= 0.7)}")
print(f"  memcpy: {memcpy / 1e9:.2f} GB/s")
for name in ("signsgd", "fp16", "qsgd:127"):
    e = rows[name]["encode_seconds"]
    rate, rate_median = gradient / e["min"], gradient / e["median"]
    share = rate / memcpy
    print(f"  {name} encode: {rate / 1e9:.2f} GB/s ({rate_median / 1e9:.2f}), {100 * share:.0f}% of memcpy "
          f"({100 * rate_median / memcpy:.0f}%), goal >= 50%: {verdict(share >= 0.5)}")
sys.exit(1 if failed else 0)
PY
