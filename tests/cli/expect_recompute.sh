#!/usr/bin/env bash
# usage: expect_recompute.sh WEFT
# Activation recomputation lowers the measured peak of tensor memory in a training step
# and leaves the training unchanged (same loss, same parameters).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
new_work_dir
args=(train --model gpt --layers 4 --d-model 64 --heads 4 --context 64 --batch 8 --max-steps 5 --eval-every 5
      --eval-batches 1 --sample 0 --quiet --seed 3 --threads 1)
plain=$("$weft" "${args[@]}" --save-model "$work/a.safetensors" | tail -n 1)
again=$("$weft" "${args[@]}" --recompute --save-model "$work/b.safetensors" | tail -n 1)
p0=$(echo "$plain" | json_field peak_step_bytes)
p1=$(echo "$again" | json_field peak_step_bytes)
l0=$(echo "$plain" | json_field train_loss)
l1=$(echo "$again" | json_field train_loss)
echo "peak tensor memory in a step: $p0 bytes stored, $p1 bytes recomputed; loss $l0 vs $l1"
[ "$p1" -lt $((p0 * 2 / 3)) ] || { echo "FAIL: recomputation did not lower the peak by a third"; exit 1; }
[ "$l0" = "$l1" ] || { echo "FAIL: the loss changed"; exit 1; }
cmp -s "$work/a.safetensors" "$work/b.safetensors" || echo "(parameters differ in the last bits: summation order)"
echo ok
