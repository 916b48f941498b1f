#!/usr/bin/env bash
# A real run's traces replay in the simulator: 4 ranks run all-reduce and all-gather with
# WEFT_TRACE, then `weft sim` replays the folder on a single-switch fabric. Every message
# the ranks sent becomes one simulated flow, and every collective completes.
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
