#!/usr/bin/env bash
# usage: ps_async.sh WEFT COMPARE
# The asynchronous parameter server (--staleness k): with bound 0 and plain SGD it equals the
# synchronous one (M = 1 and 2 servers, relative 1e-5, over 10 steps; with staleness 0 the
# server applies the gradients in worker order, whatever order they arrive in: when it
# followed the arrival order, a rare order's rounding flipped a ReLU, and a run differed by
# 0.049); with a slow worker (WEFT_STRAGGLER)
# and bound 2 the fast worker runs ahead by at most 2 steps (and does run ahead), and the
# workers end with the same final weights.
set -euo pipefail
weft=$1
compare=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model mlp --batch 48 --limit-train 2400 --limit-test 200 --seed 5 --optimizer sgd --momentum 0
        --lr 0.05 --strategy ps --quiet)
for m in 1 2; do
  n=$((2 + m))
  "$weft" launch --nproc-per-node $n -- weft "${common[@]}" --servers $m --max-steps 10 \
    --save-model "$work/sync.safetensors" >/dev/null
  "$weft" launch --nproc-per-node $n -- weft "${common[@]}" --servers $m --max-steps 10 --staleness 0 \
    --save-model "$work/async.safetensors" >/dev/null
  printf 'staleness 0, %s server(s), against synchronous: ' "$m"
  "$compare" "$work/sync.safetensors" "$work/async.safetensors" 1e-5 | tail -n 1
done
out=$(WEFT_STRAGGLER=1:20 "$weft" launch --nproc-per-node 4 -- weft "${common[@]}" --max-steps 30 --servers 2 --staleness 2)
echo "$out" | grep "asynchronous"
seen=$(echo "$out" | grep -o "largest staleness seen [0-9]*" | awk '{ print $4 }' | sort -n | tail -n 1)
[ "$seen" -le 2 ] || { echo "FAIL: staleness $seen beyond the bound 2"; exit 1; }
[ "$seen" -ge 1 ] || { echo "FAIL: the fast worker never ran ahead"; exit 1; }
echo "$out" | grep -q '"replicas_identical":true' || { echo "FAIL: workers ended with different weights"; exit 1; }
echo ok
