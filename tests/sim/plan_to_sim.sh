#!/usr/bin/env bash
# The planner's workload runs through the simulator: one iteration of GPT-3 175B on 1024
# GPUs (tensor 8 x pipeline 16 x data 8, 64 sequences, 140 TFLOP/s) written by
# `weft plan --emit-workload`, replayed by `weft sim` on the planner's cluster
# (examples/topologies/a100-1024.yaml) in scale mode (4 MiB chunks). Every record is checked
# against its algorithm's program on the way in; the simulated iteration must finish and
# land within 10% of the planner's own estimate without overlap (GPipe, as emitted).
set -euo pipefail
weft=$1
src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
plan=(--model gpt3-175b --gpus 1024 --tp 8 --pp 16 --dp 8 --global-batch 64 --tflops 140 --tflops-kind kernel)
"$weft" plan "${plan[@]}" --json --emit-workload "$dir/gpt3" >"$dir/plan.json"
n=$(ls "$dir/gpt3" | wc -l)
[ "$n" -eq 1024 ] || { echo "FAIL: $n trace files, expected 1024"; exit 1; }
"$weft" sim --topology "$src/examples/topologies/a100-1024.yaml" --workload "$dir/gpt3" --set coarse=4MiB \
  --set sample.interval=0 --quiet --out "$dir/sim"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
plan = json.load(open(d + "/plan.json"))["iteration"]["no_overlap_seconds"]
s = json.load(open(d + "/sim/summary.json"))
assert s["finished"], "the iteration did not finish"
sim = s["simulated_us"] / 1e6
ratio = sim / plan
print(f"simulated iteration {sim:.3f} s, planner {plan:.3f} s without overlap: ratio {ratio:.3f}")
assert 0.9 <= ratio <= 1.1, ratio
assert s["counters"]["drops"] == 0 and s["counters"]["retransmissions"] == 0, s["counters"]
PY
