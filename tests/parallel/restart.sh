#!/usr/bin/env bash
# usage: restart.sh WEFT
# kill -9 one rank in the middle of data-parallel training under --max-restarts 1: the job
# must restart from its newest complete checkpoint, finish, and end with parameters
# bitwise identical to an uninterrupted run with the same checkpoints.
set -uo pipefail
weft=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model cnn --batch 48 --epochs 2 --limit-train 2400 --limit-test 100 --seed 5 --quiet
        --checkpoint-every 10 --auto-resume)
ref=$("$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --checkpoint-dir "$work/ref" 2>&1) ||
  { echo "$ref"; echo "FAIL: the reference run"; exit 1; }

"$weft" launch --nproc-per-node 2 --max-restarts 1 -- weft "${common[@]}" --checkpoint-dir "$work/run" \
  >"$work/log" 2>&1 &
launcher=$!
for _ in $(seq 1 1200); do
  [ -f "$work/run/step-000000030/meta.json" ] && break
  sleep 0.05
done
victim=$(pgrep -P "$launcher" | tail -n 1)
[ -n "$victim" ] || { echo "FAIL: no rank to kill"; cat "$work/log"; exit 1; }
kill -9 "$victim"
echo "killed pid $victim after step 30"
wait "$launcher"
rc=$?
cat "$work/log" | grep -E "failed|restarting|resumed|epoch 2" | head
[ "$rc" -eq 0 ] || { echo "FAIL: the job exited with $rc"; exit 1; }
grep -q "restarting all ranks" "$work/log" || { echo "FAIL: no restart"; exit 1; }
grep -q "resumed from" "$work/log" || { echo "FAIL: the restart did not resume"; exit 1; }
a=$(ls -d "$work"/ref/step-* | tail -n 1)
b=$(ls -d "$work"/run/step-* | tail -n 1)
cmp "$a/model.safetensors" "$b/model.safetensors" || { echo "FAIL: $a and $b differ"; exit 1; }
cmp "$a/optimizer.safetensors" "$b/optimizer.safetensors" || { echo "FAIL: optimizer states differ"; exit 1; }
echo "ok: $(basename "$b") identical to the uninterrupted run"
