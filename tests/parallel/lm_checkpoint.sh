#!/usr/bin/env bash
# usage: lm_checkpoint.sh WEFT
# Language-model checkpoints: a GPT trained 20 steps with checkpoints at 10 and 20; with the
# step-20 checkpoint removed (as if the run had died after step 10), --resume continues from
# step 10 and ends bitwise equal to the uninterrupted run: model, AdamW state, the sampler's
# random state and the learning-rate schedule all come back. In one process and with --dp 2.
set -euo pipefail
weft=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(train --model gpt --layers 2 --d-model 32 --heads 4 --context 16 --batch 8 --max-steps 20 --eval-every 10
      --eval-batches 1 --sample 0 --quiet --seed 3 --checkpoint-every 10)
for ranks in 1 2; do
  run=("$weft")
  extra=()
  [ "$ranks" -gt 1 ] && run=("$weft" launch --nproc-per-node "$ranks" -- weft) && extra=(--dp "$ranks")
  rm -rf "$work/ck"
  "${run[@]}" "${args[@]}" "${extra[@]}" --checkpoint-dir "$work/ck" --save-model "$work/full.safetensors" >/dev/null
  rm -rf "$work/ck/step-000000020"
  out=$("${run[@]}" "${args[@]}" "${extra[@]}" --checkpoint-dir "$work/ck" --resume --save-model "$work/resumed.safetensors")
  echo "$out" | grep -q '"resumed_from":10' || { echo "FAIL: did not resume at step 10 ($ranks rank(s))"; exit 1; }
  cmp -s "$work/full.safetensors" "$work/resumed.safetensors" || { echo "FAIL: resumed run differs ($ranks rank(s))"; exit 1; }
  echo "$ranks rank(s): resumed at step 10, bitwise equal to the uninterrupted run"
done
echo ok
