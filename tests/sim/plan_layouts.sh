#!/usr/bin/env bash
# Every layout the planner emits replays in the simulator: GPT-2 on 8 GPUs of one 100G switch
# (examples/topologies/single-switch.yaml), the planner told the same fabric (one GPU per
# node, 12.5 GB/s rails) and a 50 TFLOP/s kernel rate. Data parallelism without and with
# ZeRO 2 and 3, tensor x pipeline x data, 1F1B and interleaved pipelines: each simulated
# iteration lands within 15% of the planner's estimate with overlap (the data-parallel
# reductions run on the traces' stream 1, beside the compute), the pipelines within 5% (the
# planner's bubble is the schedule's: the other stages' passes, the head's stage among them,
# and the sends blocking between passes as the traces send them). Context parallelism (ring
# attention) and expert parallelism (all-to-alls) replay to the end.
set -euo pipefail
weft=$1
src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fabric=(--gpus-per-node 1 --rail-gbps 12.5 --tflops 50 --tflops-kind kernel)
run() {  # name, tolerance (0: only that it finishes), then plan flags
  local name=$1 tol=$2
  shift 2
  "$weft" plan --model gpt2-124m --gpus 8 "$@" "${fabric[@]}" --json --emit-workload "$dir/$name" >"$dir/$name.json" 2>"$dir/$name.log"
  "$weft" sim --topology "$src/examples/topologies/single-switch.yaml" --workload "$dir/$name" --set sample.interval=0 \
    --quiet --out "$dir/$name.sim" >/dev/null
  python3 - "$dir" "$name" "$tol" <<'PY'
import json, sys
d, name, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
plan = json.load(open(f"{d}/{name}.json"))
s = json.load(open(f"{d}/{name}.sim/summary.json"))
assert s["finished"], f"{name}: the iteration did not finish"
sim, est = s["simulated_us"] / 1e6, plan["iteration"]["overlap_seconds"]
print(f"{name}: simulated {sim:.4f} s, planner {est:.4f} s with overlap, ratio {sim / est:.3f}")
if tol > 0:
    assert abs(sim / est - 1) <= tol, f"{name}: ratio {sim / est:.3f}"
PY
}
run dp 0.15 --dp 8 --global-batch 64
grep -q '"stream":1' "$dir/dp/rank-0.jsonl" || { echo "FAIL: no data-parallel stream"; exit 1; }
run zero2 0.15 --dp 8 --zero 2 --global-batch 64
run zero3 0.15 --dp 8 --zero 3 --global-batch 64
run tp_pp_dp 0.05 --tp 2 --pp 2 --dp 2 --zero 1 --global-batch 64
run pipeline 0.05 --pp 4 --dp 2 --global-batch 64
run interleaved 0.05 --pp 4 --dp 2 --interleave 3 --global-batch 64
run context 0 --tp 2 --cp 2 --pp 2 --global-batch 8
grep -q '"op":"send"' "$dir/context/rank-0.jsonl"
run experts 0 --experts 4 --top-k 2 --tp 2 --dp 4 --ep 2 --zero 2 --global-batch 8
grep -q '"op":"alltoall"' "$dir/experts/rank-0.jsonl" || { echo "FAIL: no all-to-all"; exit 1; }
echo "every layout replayed"
