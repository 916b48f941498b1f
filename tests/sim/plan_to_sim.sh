#!/usr/bin/env bash
# The planner's workload runs through the simulator: one iteration of GPT-3 175B on 1024
# GPUs (tensor 8 x pipeline 16 x data 8, 64 sequences, 140 TFLOP/s) written by
# `weft plan --emit-workload`, replayed by `weft sim` on the planner's cluster
# (examples/topologies/a100-1024.yaml) in scale mode (4 MiB chunks). Every record is checked
# against its algorithm's program on the way in; the simulated iteration must finish and
# land within 10% of the planner's own estimate without overlap (GPipe, as emitted).
# COARSE=0 runs it at packet level (4 KB MTU packets, about half an hour on two threads of this
# machine: THREADS=2), where it must land within 5% of the planner's estimate with overlap.
set -euo pipefail
weft=$1
src=$2
coarse=${COARSE:-4MiB}
threads=${THREADS:-1}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
plan=(--model gpt3-175b --gpus 1024 --tp 8 --pp 16 --dp 8 --global-batch 64 --tflops 140 --tflops-kind kernel)
"$weft" plan "${plan[@]}" --json --emit-workload "$dir/gpt3" >"$dir/plan.json"
n=$(ls "$dir/gpt3" | wc -l)
[ "$n" -eq 1024 ] || { echo "FAIL: $n trace files, expected 1024"; exit 1; }
"$weft" sim --topology "$src/examples/topologies/a100-1024.yaml" --workload "$dir/gpt3" --set coarse="$coarse" \
  --set threads="$threads" --set sample.interval=0 --quiet --out "$dir/sim"
python3 - "$dir" "$coarse" <<'PY'
import json, sys
d, coarse = sys.argv[1], sys.argv[2]
iteration = json.load(open(d + "/plan.json"))["iteration"]
s = json.load(open(d + "/sim/summary.json"))
assert s["finished"], "the iteration did not finish"
sim = s["simulated_us"] / 1e6
for key, bound in (("no_overlap_seconds", 0.10), ("overlap_seconds", 0.05 if coarse == "0" else None)):
    ratio = sim / iteration[key]
    print(f"simulated iteration {sim:.3f} s, planner {iteration[key]:.3f} s ({key}): ratio {ratio:.3f}")
    assert bound is None or abs(ratio - 1) <= bound, (key, ratio)
assert s["counters"]["drops"] == 0 and s["counters"]["retransmissions"] == 0, s["counters"]
PY
