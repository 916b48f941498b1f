#!/usr/bin/env bash
# usage: lost_checkpoint_dir.sh WEFT
# The checkpoint folder becomes unusable in the middle of a 2-rank run (replaced by a file):
# rank 0's error reaches the user and the job stops at once. (Rank 0 used to wait for its
# blocked peer to leave the store until the 60 s timeout before it exited.) The job must
# end long before `timeout 40`.
set -uo pipefail
weft=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export WEFT_STRAGGLER=0:20 WEFT_COMM_TIMEOUT=60
timeout 40 "$weft" launch --nproc-per-node 2 -- weft train --model mlp --limit-train 12800 --limit-test 100 \
  --checkpoint-dir ck --checkpoint-every 20 --quiet >out.txt 2>&1 &
pid=$!
for _ in $(seq 1 500); do ls ck/step-* >/dev/null 2>&1 && break; sleep 0.02; done
rm -rf ck && touch ck
wait "$pid"
rc=$?
cat out.txt | grep -E "error|failed"
[ "$rc" -ne 124 ] || { echo "FAIL: the job was still running after 40 s"; exit 1; }
[ "$rc" -ne 0 ] || { echo "FAIL: the job succeeded without its checkpoint folder"; exit 1; }
grep -q "\[0\] error: cannot create directory ck" out.txt || { echo "FAIL: rank 0's error did not reach the user"; exit 1; }
echo ok
