#!/usr/bin/env bash
# usage: lm_zero.sh WEFT COMPARE
# ZeRO for language models: a GPT on 2 data-parallel ranks with ZeRO stages 1, 2 and 3 (SGD)
# ends with the parameters and loss of plain data parallelism within a relative 1e-5; a
# ZeRO-2 run resumed from its step-10 checkpoint is bitwise equal to the uninterrupted one.
set -euo pipefail
weft=$1
compare=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(train --model gpt --layers 2 --d-model 32 --heads 4 --context 16 --batch 8 --max-steps 20 --eval-every 20
      --eval-batches 1 --sample 0 --quiet --seed 3 --optimizer sgd --lr 0.05 --dp 2)
run() { "$weft" launch --nproc-per-node 2 -- weft "${args[@]}" "$@"; }
loss() { grep -o '"train_loss":[-0-9.e]*' | tail -n 1 | cut -d: -f2; }
ddp=$(run --save-model "$work/dp.safetensors" | loss)
for z in 1 2 3; do
  out=$(run --zero $z --save-model "$work/z.safetensors")
  echo "$out" | grep "ZeRO stage" | sed 's/^\[0\] //'
  "$compare" "$work/dp.safetensors" "$work/z.safetensors" 1e-5 | tail -n 1
  a=$(echo "$out" | loss)
  awk -v a="$a" -v b="$ddp" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }' ||
    { echo "FAIL: loss $a vs $ddp (stage $z)"; exit 1; }
done
run --zero 2 --checkpoint-dir "$work/ck" --checkpoint-every 10 --save-model "$work/full.safetensors" >/dev/null
rm -rf "$work/ck/step-000000020"
run --zero 2 --checkpoint-dir "$work/ck" --resume --save-model "$work/resumed.safetensors" | grep -q '"resumed_from":10'
cmp -s "$work/full.safetensors" "$work/resumed.safetensors" || { echo "FAIL: the resumed ZeRO run differs"; exit 1; }
echo "ZeRO 2: resumed at step 10, bitwise equal"
echo ok
