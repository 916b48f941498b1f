#!/usr/bin/env bash
# Jobs of one process that nobody launched run side by side: each one's store takes its own
# free port instead of the default 29500.
set -euo pipefail
weft=$1
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
for i in 1 2 3; do
  "$weft" comm-bench --op allreduce --max 1M --iters 50 > "$work/$i.out" 2>&1 &
  pids+=($!)
done
failed=0
for i in 1 2 3; do
  if ! wait "${pids[$((i - 1))]}"; then echo "FAIL: job $i: $(tail -n 1 "$work/$i.out")"; failed=1; fi
done
pids=()
for i in 1 2 3; do
  grep -q " 1048576 \+262144 \+float" "$work/$i.out" || { echo "FAIL: job $i did not finish"; failed=1; }
done
[ "$failed" = 0 ] || exit 1
echo "three single-process jobs ran side by side"
