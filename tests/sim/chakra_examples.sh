#!/usr/bin/env bash
# The Chakra traces examples/chakra/make_chakra.py writes replay in weft sim as their
# schedules say: a GPipe pipeline takes (micro-batches + stages - 1) x (forward + backward)
# plus the optimizer and its few small transfers; the hybrid iteration runs every
# tensor-parallel and data-parallel collective; a job file places a Chakra folder on chosen
# GPUs, with and without its compute.
set -euo pipefail
weft=$1
src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
gen="python3 $src/examples/chakra/make_chakra.py"
topo=$src/examples/topologies
$gen pipeline --ranks 4 --micro-batches 4 --forward-us 200 --backward-us 400 --optimizer-us 100 \
  --activation-bytes 4K --out "$dir/pp"
"$weft" sim --topology "$topo/single-switch.yaml" --workload "$dir/pp" --out "$dir/pp-out" --quiet
$gen hybrid --ranks 8 --tp 2 --layers 3 --grad-bytes 1M --activation-bytes 64K --out "$dir/hy"
"$weft" sim --topology "$topo/leaf-spine-4x4.yaml" --workload "$dir/hy" --out "$dir/hy-out" --quiet
# The same hybrid trace on GPUs 8-15 from a job file, without its compute.
printf 'jobs:\n  - {trace: hy, gpus: 8-15, gaps: off}\n' > "$dir/job.yaml"
"$weft" sim --topology "$topo/leaf-spine-4x4.yaml" --workload "$dir/job.yaml" --out "$dir/job-out" --quiet
python3 - "$dir" <<'PY'
import json, sys, csv
d = sys.argv[1]
pp = json.load(open(d + "/pp-out/summary.json"))
assert pp["finished"], "the pipeline did not finish"
end_us = pp["simulated_us"]
ideal = (4 + 4 - 1) * (200 + 400) + 100
assert ideal <= end_us <= ideal * 1.01, f"pipeline: {end_us} us simulated, GPipe's schedule {ideal} us"
flows = list(csv.DictReader(open(d + "/pp-out/flows.csv")))
assert len(flows) == 2 * 3 * 4, f"{len(flows)} flows, 24 transfers in the pipeline"
hy = json.load(open(d + "/hy-out/summary.json"))
assert hy["finished"], "the hybrid iteration did not finish"
# 4 tensor-parallel groups x 3 layers x 2 (forward, backward) + 2 data-parallel groups x 3 layers
assert len(hy["collectives"]) == 4 * 3 * 2 + 2 * 3, f"{len(hy['collectives'])} collectives"
job = json.load(open(d + "/job-out/summary.json"))
assert job["finished"], "the job file's Chakra trace did not finish"
# Each rank's GPU chain alone is 3 x 200 + 3 x 400 + 100 us; without it only the traffic is left.
assert hy["simulated_us"] >= 1900, hy["simulated_us"]
assert job["simulated_us"] < hy["simulated_us"] - 1000, (job["simulated_us"], hy["simulated_us"])
flows = list(csv.DictReader(open(d + "/job-out/flows.csv")))
gpus = {int(f[k]) for f in flows for k in ("src_gpu", "dst_gpu") if k in f}
assert gpus and min(gpus) >= 8, f"the job's GPUs: {sorted(gpus)}"
print(f"ok: pipeline {end_us:.1f} us (schedule {ideal} us), hybrid {hy['simulated_us']:.1f} us, "
      f"{len(hy['collectives'])} collectives; without compute on GPUs 8-15 {job['simulated_us']:.1f} us")
PY
