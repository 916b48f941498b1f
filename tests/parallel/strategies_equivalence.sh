#!/usr/bin/env bash
# usage: strategies_equivalence.sh WEFT COMPARE
# The synchronous parameter server (2 workers; 1 and 2 servers) equals data-parallel
# training with all-reduce, and federated averaging with IID data, one local step and plain
# SGD equals it too: parameters within a relative 1e-5 after 50 steps.
set -euo pipefail
weft=$1
compare=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model mlp --batch 48 --max-steps 50 --limit-train 2400 --limit-test 200 --seed 5 --quiet)
"$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --save-model "$work/ddp.safetensors" >/dev/null
for m in 1 2; do
  "$weft" launch --nproc-per-node $((2 + m)) -- weft "${common[@]}" --strategy ps --servers "$m" \
    --save-model "$work/ps$m.safetensors" | grep "parameter server"
  "$compare" "$work/ddp.safetensors" "$work/ps$m.safetensors" 1e-5
done
"$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --momentum 0 --save-model "$work/ddp-sgd.safetensors" >/dev/null
"$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --momentum 0 --strategy fedavg --local-steps 1 \
  --save-model "$work/fedavg.safetensors" >/dev/null
"$compare" "$work/ddp-sgd.safetensors" "$work/fedavg.safetensors" 1e-5
echo "ok"
