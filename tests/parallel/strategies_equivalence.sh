#!/usr/bin/env bash
# usage: strategies_equivalence.sh WEFT COMPARE
# The synchronous parameter server (2 workers; 1 and 2 servers) equals data-parallel
# training with all-reduce, and federated averaging with IID data, one local step and plain
# SGD equals it too: parameters within a relative 1e-5 after 50 steps (federated averaging
# after 12: it averages parameters where data parallelism averages gradients, so the two
# round differently, and once in a while a sample's pre-activation sits so close to zero
# that the rounding flips its ReLU; at batch 48 one does at step 17, moving one row of
# the first layer by 7e-5 of the weights' scale. Parameter averaging itself is exact.)
set -euo pipefail
weft=$1
compare=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model mlp --batch 48 --limit-train 2400 --limit-test 200 --seed 5 --quiet)
"$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --max-steps 50 --save-model "$work/ddp.safetensors" >/dev/null
for m in 1 2; do
  "$weft" launch --nproc-per-node $((2 + m)) -- weft "${common[@]}" --max-steps 50 --strategy ps --servers "$m" \
    --save-model "$work/ps$m.safetensors" | grep "parameter server"
  "$compare" "$work/ddp.safetensors" "$work/ps$m.safetensors" 1e-5
done
"$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --momentum 0 --max-steps 12 \
  --save-model "$work/ddp-sgd.safetensors" >/dev/null
"$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --momentum 0 --max-steps 12 --strategy fedavg --local-steps 1 \
  --save-model "$work/fedavg.safetensors" >/dev/null
"$compare" "$work/ddp-sgd.safetensors" "$work/fedavg.safetensors" 1e-5
echo "ok"
