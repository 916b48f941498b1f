#!/usr/bin/env bash
# The simulator's scenario set: runs that together reach every part of `weft sim` (the
# engine on one and two threads, the fabric's load balancing, queuing, switching, PFC, ECN,
# trimming, failures and rerouting, the NIC's congestion controls and loss recovery, the
# agents on collectives, jobs and traces, PXN, in-network reduction, the flow-level mode,
# the samplers, the link capture, and the stall finder on a run that does not finish) and
# checks that every file each writes is byte for byte what tests/sim/scenarios.sha256
# holds. A change to the simulator's structure must leave them alone; a change to what it
# computes updates them on purpose:
#   tests/sim/scenarios.sh WEFT            check (exit 1 naming the files that differ)
#   tests/sim/scenarios.sh WEFT --update   rewrite tests/sim/scenarios.sha256
set -euo pipefail
weft=$(realpath "$1")
mode=${2:-check}
src=$(cd "$(dirname "$0")/../.." && pwd)
digests=$src/tests/sim/scenarios.sha256
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
ln -s "$src/examples" examples
t=examples/topologies

# A job file with a failure and rerouting, and a trace written by the planner.
printf 'jobs:\n  - {collective: allreduce, algorithm: ring, size: 8MB}\nfailures:\n  - {at: 100us, link_down: [leaf-0, spine-0]}\n' >fail.yaml
printf 'jobs:\n  - {src: 0, dst: 1, size: 4MB}\n  - {src: 2, dst: 3, size: 4MB, start: 3us}\n  - {src: 4, dst: 1, size: 2MB, start: 50us}\n' >staggered.yaml
"$weft" plan --model gpt2-124m --gpus 8 --tp 2 --pp 2 --dp 2 --global-batch 8 --gpus-per-node 1 --rail-gbps 12.5 \
  --tflops 50 --tflops-kind kernel --emit-workload gpt2 >/dev/null

# name|arguments of weft sim (each run writes its files to out/NAME)
scenarios=(
  "ring_dcqcn|--topology $t/leaf-spine-4x4.yaml --workload allreduce:ring:4MB"
  "incast_pfc_cascade|--topology $t/pfc-cascade.yaml --workload incast:4:4MB@4,0-3 --cc none --set sample.qps=on"
  "incast_hpcc|--topology $t/leaf-spine-4x4.yaml --workload incast:12:1MB --cc hpcc"
  "incast_swift|--topology $t/leaf-spine-4x4.yaml --workload incast:12:1MB --cc swift"
  "incast_nscc|--topology $t/leaf-spine-4x4.yaml --workload incast:12:1MB --cc nscc --pfc off"
  "incast_trim|--topology $t/leaf-spine-4x4.yaml --workload incast:12:1MB --cc none --pfc off --set trim=on --set trim.threshold=200KB"
  "permutation_spray|--topology $t/fat-tree-k16.yaml --workload permutation:64KB --lb spray"
  "permutation_flowlet|--topology $t/fat-tree-k16.yaml --workload permutation:256KB --lb flowlet --set flowlet.gap=2us"
  "permutation_adaptive|--topology $t/fat-tree-k16.yaml --workload permutation:64KB --lb adaptive"
  "permutation_two_threads|--topology $t/fat-tree-k16.yaml --workload permutation:256KB --set threads=2"
  "lossy_selective|--topology $t/leaf-spine-4x4.yaml --workload alltoall:256KB --set link.loss=0.001 --set rdma.retransmit=selective --pfc off"
  "voq_cut_through|--topology $t/leaf-spine-4x4.yaml --workload incast:8:1MB --set queuing=voq --set switching=cut-through"
  "write_only_qps|--topology $t/leaf-spine-4x4.yaml --workload allreduce:ring:2MB --set rdma.write=write-only --set rdma.qps=4 --set rdma.send_done=acked"
  "failure_reroute|--topology $t/leaf-spine-4x4.yaml --workload fail.yaml --set routing.convergence=20us"
  "rail_pxn|--topology $t/rail-optimized.yaml --workload allreduce:ring:4MB --set pxn=on"
  "in_network|--topology $t/rail-optimized-sharp.yaml --workload allreduce:in_network:4MB"
  "flow_mode|--topology $t/single-switch.yaml --workload staggered.yaml --set mode=flow"
  "flow_mode_ring|--topology $t/leaf-spine-4x4.yaml --workload allreduce:ring:16MB --set mode=flow"
  "trace_gpt2|--topology $t/single-switch.yaml --workload gpt2"
  "pfc_deadlock_unfinished|--topology $t/ring-5.yaml --workload examples/jobs/ring-shift.yaml --cc none --set pfc.watchdog=0 --set time_limit=20ms"
  "pcap_capture|--topology $t/single-switch.yaml --workload incast:4:512KB --set pcap=host0.gpu0:switch"
)

mkdir -p out
for entry in "${scenarios[@]}"; do
  name=${entry%%|*}
  args=${entry#*|}
  # Exit 3: the run did not finish (its stall is part of its outputs); anything else is a failure.
  rc=0
  # shellcheck disable=SC2086
  "$weft" sim $args --quiet --out "out/$name" >"out/$name.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] && { [ "$rc" -ne 3 ] || [[ $name != *_unfinished ]]; }; then
    echo "FAIL: scenario $name (exit $rc): weft sim $args"
    cat "out/$name.log"
    exit 1
  fi
done
(cd out && find . -type f ! -name '*.log' | sort | xargs sha256sum) >now.sha256
echo "$(wc -l <now.sha256) files from ${#scenarios[@]} scenarios"
if [ "$mode" = --update ]; then
  cp now.sha256 "$digests"
  echo "wrote $digests"
  exit 0
fi
if ! diff -u "$digests" now.sha256; then
  echo "FAIL: the scenarios' outputs changed (above); if the simulator's results were meant to change, run"
  echo "  tests/sim/scenarios.sh build/weft --update"
  exit 1
fi
echo "every output byte for byte as before"
