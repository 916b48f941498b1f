#!/usr/bin/env bash
# Data parallelism across hosts, the planner against the simulator: one iteration of GPT-2
# 124M on 128 GPUs (16 hosts x 8, data parallel only) written by `weft plan --emit-workload`
# on the planner's default cluster and replayed by `weft sim` at packet level on the same
# fabric (examples/topologies/a100-1024.yaml). The gradients go around one ring in rank order,
# which the planner models as a ring at one NIC's speed; with PXN (NCCL's default on rails)
# every hop between hosts stays on one rail, and the simulated iteration must land within
# 10% of the planner's (with overlap, less the optimizer's step, which the traces do not
# carry); without it the hops between hosts cross the spines.
set -euo pipefail
weft=$1
src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$weft" plan --model gpt2-124m --gpus 128 --dp 128 --global-batch 128 --json --emit-workload "$dir/gpt2" >"$dir/plan.json"
for pxn in on off; do
  "$weft" sim --topology "$src/examples/topologies/a100-1024.yaml" --workload "$dir/gpt2" --set pxn=$pxn \
    --set sample.interval=0 --quiet --out "$dir/sim-$pxn" >/dev/null
done
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
it = json.load(open(d + "/plan.json"))["iteration"]
plan = it["seconds"] - it["optimizer_seconds"]
on, off = (json.load(open(f"{d}/sim-{x}/summary.json")) for x in ("on", "off"))
assert on["finished"] and off["finished"], "the iteration did not finish"
sim_on, sim_off = on["simulated_us"] / 1e6, off["simulated_us"] / 1e6
print(f"planner {plan * 1e3:.2f} ms (its optimizer's step, {it['optimizer_seconds'] * 1e3:.2f} ms, left out); simulated with PXN {sim_on * 1e3:.2f} ms (ratio {sim_on / plan:.3f}), "
      f"without {sim_off * 1e3:.2f} ms (ratio {sim_off / plan:.3f})")
assert 0.9 <= sim_on / plan <= 1.1, sim_on / plan
assert sim_off > sim_on, (sim_off, sim_on)
PY
