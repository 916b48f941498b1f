#!/usr/bin/env bash
# A real run's traces replay in the simulator: 4 ranks run all-reduce and all-gather with
# WEFT_TRACE, then `weft sim` replays the folder on a single-switch fabric. Every message
# the ranks sent becomes one simulated flow, and every collective completes. A data-parallel
# training run marks each step's start in its traces, and its replay keeps the compute.
set -euo pipefail
weft=$1
src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
WEFT_TRACE=$dir/traces "$weft" launch --nproc-per-node 4 -- \
  "$weft" comm-bench --op allreduce --min 256K --max 256K --iters 2 --warmup 0 >/dev/null
WEFT_TRACE=$dir/traces "$weft" launch --nproc-per-node 4 -- \
  "$weft" comm-bench --op allgather --algo ring --min 64K --max 64K --iters 1 --warmup 0 >/dev/null
ls "$dir/traces"
"$weft" sim --topology "$src/examples/topologies/single-switch.yaml" --workload "$dir/traces" --out "$dir/out" --quiet
python3 - "$dir" <<'PY'
import json, sys, glob, csv
d = sys.argv[1]
sent = 0
ops = 0
for path in glob.glob(d + "/traces/rank-*.jsonl"):
    for line in open(path):
        rec = json.loads(line)
        ops += 1
        sent += sum(len(step) for step in rec["steps"])
s = json.load(open(d + "/out/summary.json"))
flows = list(csv.DictReader(open(d + "/out/flows.csv")))
assert s["finished"], "replay did not finish"
assert len(flows) == sent, f"{len(flows)} simulated flows, {sent} messages in the traces"
colls = s["collectives"]
assert len(colls) * 4 == ops, f"{len(colls)} collectives for {ops} records of 4 ranks"
assert all("time_us" in c and c["time_us"] > 0 for c in colls), colls
print(f"ok: {ops} trace records, {len(colls)} collectives, {sent} messages -> {len(flows)} flows")
PY

# Training: 3 data-parallel steps of 2 ranks, each step's start marked.
WEFT_TRACE=$dir/train "$weft" launch --nproc-per-node 2 -- \
  "$weft" train --model mlp --epochs 1 --limit-train 640 --limit-test 100 --max-steps 3 --quiet --dp 2 >/dev/null
"$weft" sim --topology "$src/examples/topologies/single-switch.yaml" --workload "$dir/train" --out "$dir/train-out" --quiet
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
for r in (0, 1):
    recs = [json.loads(line) for line in open(f"{d}/train/rank-{r}.jsonl")]
    marks = [x for x in recs if x["op"] == "mark"]
    assert len(marks) == 3 and all(m["name"] == "step" for m in marks), marks
s = json.load(open(d + "/train-out/summary.json"))
assert s["finished"], "training replay did not finish"
print(f"ok: training trace replayed, {s['simulated_us']:.0f} us simulated")
PY
