#!/usr/bin/env bash
# usage: elastic_nodes.sh WEFT
# --nnodes 1:2: two launchers ("nodes", here on one machine) train together; node 1 dies
# (its launcher and its rank, kill -9) after the step-10 checkpoint; node 0's rank fails on
# the lost peer, its launcher restarts it, the membership round goes on with node 0 alone,
# and training resumes from the latest checkpoint on the smaller world and finishes.
set -uo pipefail
weft=$1
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    for c in $(pgrep -P "$p" 2>/dev/null); do kill -9 "$c" 2>/dev/null; done
    kill -9 "$p" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export WEFT_JOB_TOKEN=elastic-test-token-0123456789abcdef
# Rank 1 (node 1's) sleeps 100 ms per step, so that the two-node run would take 10 s and node 1
# dies in the middle of it even when this machine is loaded (the poll below can lag by seconds);
# the one-node run that goes on is not slowed.
export WEFT_STRAGGLER=1:100
job=(train --model mlp --batch 48 --epochs 1 --limit-train 4800 --limit-test 200 --seed 5 --quiet
     --checkpoint-dir "$work/ck" --checkpoint-every 10 --auto-resume)
launch=(launch --nproc-per-node 1 --nnodes 1:2 --master-port "$port" --max-restarts 2 --join-timeout 3)
"$weft" "${launch[@]}" --node-rank 0 -- weft "${job[@]}" >"$work/node0.txt" 2>&1 &
node0=$!
pids+=("$node0")
"$weft" "${launch[@]}" --node-rank 1 -- weft "${job[@]}" >"$work/node1.txt" 2>&1 &
node1=$!
pids+=("$node1")
for _ in $(seq 1 600); do
  ls "$work"/ck/step-* >/dev/null 2>&1 && break
  sleep 0.1
done
ls "$work"/ck/step-* >/dev/null 2>&1 || { echo "FAIL: no checkpoint"; cat "$work"/node*.txt; exit 1; }
for c in $(pgrep -P "$node1"); do kill -9 "$c"; done
kill -9 "$node1"
wait "$node0"
rc=$?
grep -E "weft launch|resumed|stopped|epoch 1/1" "$work/node0.txt"
[ "$rc" -eq 0 ] || { echo "FAIL: node 0 exited with $rc"; exit 1; }
grep -q "starting with 2 node(s)" "$work/node0.txt" || { echo "FAIL: the job did not start on 2 nodes"; exit 1; }
grep -q "continuing with 1 node(s)" "$work/node0.txt" || { echo "FAIL: the job did not go on with 1 node"; exit 1; }
grep -q "written by 2 rank(s), now 1" "$work/node0.txt" || { echo "FAIL: no resume on the smaller world"; cat "$work/node0.txt"; exit 1; }
grep -q "epoch 1/1" "$work/node0.txt" || { echo "FAIL: training did not finish"; exit 1; }
echo ok
