#!/usr/bin/env bash
# usage: expect_threads_bitwise.sh WEFT
# The thread governor may change the thread count at any step; that is safe only because
# results do not depend on it. The same training on 1 thread and on 2 threads (image and
# language models) must give the same loss at every step, bit for bit.
set -euo pipefail
weft=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
losses() { /usr/bin/python3 -c "import json, sys; print([r['loss'] for r in map(json.loads, open(sys.argv[1])) if r.get('kind') == 'step'])" "$1"; }
for model in cnn gpt; do
  for t in 1 2; do
    if [ $model = gpt ]; then
      "$weft" train --model gpt --layers 2 --max-steps 5 --eval-every 5 --eval-batches 1 --sample 0 --threads $t \
        --adapt-threads off --quiet --metrics "$work/$model-$t.jsonl" >/dev/null
    else
      "$weft" train --model cnn --limit-train 256 --limit-test 64 --epochs 1 --threads $t --adapt-threads off --quiet \
        --metrics "$work/$model-$t.jsonl" >/dev/null
    fi
  done
  one=$(losses "$work/$model-1.jsonl"); two=$(losses "$work/$model-2.jsonl")
  [ "$one" = "$two" ] || { echo "FAIL: $model: 1 thread $one, 2 threads $two"; exit 1; }
  echo "ok: $model, the same losses on 1 and 2 threads: $one"
done
