#!/usr/bin/env bash
# usage: expect_precision.sh WEFT
# Mixed precision (--precision bf16): the activations kept for backward are stored in
# bfloat16, so the measured peak of tensor memory in a training step drops, while the
# training follows the fp32 run to bf16's precision. An image model trains with it too.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
args=(train --model gpt --layers 6 --d-model 64 --heads 4 --context 96 --batch 8 --max-steps 20 --eval-every 20
      --eval-batches 1 --sample 0 --quiet --seed 3 --threads 1)
fp32=$("$weft" "${args[@]}" | tail -n 1)
bf16=$("$weft" "${args[@]}" --precision bf16 | tail -n 1)
p0=$(echo "$fp32" | json_field peak_step_bytes)
p1=$(echo "$bf16" | json_field peak_step_bytes)
l0=$(echo "$fp32" | json_field val_loss)
l1=$(echo "$bf16" | json_field val_loss)
echo "peak tensor memory in a step: fp32 $p0 bytes, bf16 $p1 bytes; validation loss $l0 vs $l1"
echo "$bf16" | grep -q '"precision":"bf16"' || { echo "FAIL: the summary does not say bf16"; exit 1; }
[ "$p1" -lt $((p0 * 4 / 5)) ] || { echo "FAIL: bf16 did not lower the peak by a fifth"; exit 1; }
close_to "$l1" "$l0" 0.01 ||
  { echo "FAIL: the bf16 loss is more than 1% from fp32's"; exit 1; }
awk -v a="$l1" 'BEGIN { exit !(a < 4.0) }' || { echo "FAIL: bf16 did not learn"; exit 1; }
# An image model: the CNN on a slice of Fashion-MNIST in bf16.
cnn=$("$weft" train --model cnn --limit-train 2048 --limit-test 500 --precision bf16 --quiet --threads 1 | tail -n 1)
acc=$(echo "$cnn" | json_field test_accuracy)
echo "cnn in bf16 on 2048 samples: test accuracy $acc"
echo "$cnn" | grep -q '"precision":"bf16"' || { echo "FAIL: the CNN summary does not say bf16"; exit 1; }
awk -v a="$acc" 'BEGIN { exit !(a > 0.65) }' || { echo "FAIL: the CNN did not learn in bf16"; exit 1; }
echo ok
