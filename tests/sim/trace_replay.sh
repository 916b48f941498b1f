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
# A later job of fewer ranks into the same folder is refused before any rank writes (a
# replay would mix its files with the 4-rank job's): one process, and 2 ranks under launch.
before=$(md5sum "$dir"/traces/*)
out=$(WEFT_TRACE=$dir/traces "$weft" comm-bench --op allreduce --max 4K --iters 1 2>&1) && code=0 || code=$?
[ "$code" = 2 ] || { echo "a 1-rank run into the 4-rank folder: exit $code: $out"; exit 1; }
grep -qx "error: WEFT_TRACE: $dir/traces already holds 3 trace files (rank-1.jsonl to rank-3.jsonl) of another run, past this job's 1 rank; a replay would mix the two: remove them or choose another folder" <<<"$out" \
  || { echo "unexpected refusal: $out"; exit 1; }
out=$(WEFT_TRACE=$dir/traces "$weft" launch --nproc-per-node 2 -- "$weft" comm-bench --max 4K --iters 1 2>&1) && code=0 || code=$?
[ "$code" != 0 ] && grep -q "\[[01]\] error: WEFT_TRACE: .* already holds 2 trace files (rank-2.jsonl to rank-3.jsonl) of another run, past this job's 2 ranks" <<<"$out" \
  || { echo "a 2-rank job into the 4-rank folder: exit $code: $out"; exit 1; }
[ "$(md5sum "$dir"/traces/*)" = "$before" ] || { echo "the refused runs changed the traces"; exit 1; }
# A restarted attempt's folder holds its own first attempt's ranks: not refused.
cp -r "$dir/traces" "$dir/restarted"
WEFT_RESTART_COUNT=1 WEFT_TRACE=$dir/restarted "$weft" comm-bench --op allreduce --max 4K --iters 1 >/dev/null \
  || { echo "a restarted attempt's trace folder was refused"; exit 1; }
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
