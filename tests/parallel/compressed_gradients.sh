#!/usr/bin/env bash
# usage: compressed_gradients.sh WEFT
# --grad-dtype bf16 and fp16 (seed 003 chapter 4's fewer bits): DDP's buckets travel as
# bfloat16 or float16 (scaled), half the bytes of float32 (the timeline's all-reduce spans),
# the replicas stay identical, and
# an epoch of 6,000 samples lands close to float32's (train loss within 5%, test accuracy
# within 6 points: the accuracy at the end of so short a run moves by about 3 points with any
# perturbation, a seed or a rounding; the parameters themselves drift apart the same way); --error-feedback changes the result (the carried error is used). Bad
# combinations are refused.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
new_work_dir
common=(train --model mlp --batch 64 --epochs 1 --limit-train 6000 --limit-test 1000 --seed 7 --lr 0.05 --quiet)
kib() { grep -o '"allreduce [0-9]* KiB"' "$1-rank0.json" | grep -o '[0-9]*' | awk '{ s += $1 } END { print s }'; }
run() {  # NAME FLAGS...: the run's output; its model in $work/NAME.safetensors, its timeline in $work/NAME
  local name=$1
  shift
  "$weft" launch --nproc-per-node 2 -- weft "${common[@]}" "$@" --save-model "$work/$name.safetensors" \
    --timeline "$work/$name.json"
}
fp32=$(run fp32)
bf16=$(run bf16 --grad-dtype bf16)
ef=$(run ef --grad-dtype bf16 --error-feedback)
fp16=$(run fp16 --grad-dtype fp16)
fp16ef=$(run fp16ef --grad-dtype fp16 --error-feedback)
for out in "$bf16" "$ef" "$fp16" "$fp16ef"; do grep -q '"replicas_identical":true' <<<"$out" || fail "replicas differ: $out"; done
full=$(kib "$work/fp32")
half=$(kib "$work/bf16")
f16=$(kib "$work/fp16")
echo "all-reduced per run: fp32 $full KiB, bf16 $half KiB, fp16 $f16 KiB"
for h in "$half" "$f16"; do
  [ "$h" -gt 0 ] && [ $((2 * h)) -le $((full + 30)) ] && [ $((2 * h)) -ge $((full - 30)) ] ||
    fail "16-bit buckets should carry half the bytes ($h KiB against $full)"
done
cmp -s "$work/fp32.safetensors" "$work/bf16.safetensors" && fail "bf16 gradients changed nothing"
cmp -s "$work/bf16.safetensors" "$work/ef.safetensors" && fail "error feedback changed nothing"
cmp -s "$work/fp32.safetensors" "$work/fp16.safetensors" && fail "fp16 gradients changed nothing"
cmp -s "$work/fp16.safetensors" "$work/fp16ef.safetensors" && fail "error feedback changed nothing (fp16)"
for out in "$bf16" "$ef" "$fp16" "$fp16ef"; do
  a=$(rank0_field test_accuracy <<<"$out")
  b=$(rank0_field test_accuracy <<<"$fp32")
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.06) }' ||
    fail "test accuracy $a against fp32's $b"
  close_to "$(rank0_field train_loss <<<"$out")" "$(rank0_field train_loss <<<"$fp32")" 0.05 ||
    fail "train loss $(rank0_field train_loss <<<"$out") against fp32's $(rank0_field train_loss <<<"$fp32")"
done
echo "test accuracy: fp32 $(rank0_field test_accuracy <<<"$fp32"), bf16 $(rank0_field test_accuracy <<<"$bf16"), with error feedback $(rank0_field test_accuracy <<<"$ef"), fp16 $(rank0_field test_accuracy <<<"$fp16"), with error feedback $(rank0_field test_accuracy <<<"$fp16ef")"
for bad in "--grad-dtype bf16 --zero 1" "--grad-dtype fp16 --strategy ps" "--grad-dtype fp8" "--error-feedback"; do
  # shellcheck disable=SC2086
  if "$weft" train --model mlp --max-steps 1 $bad >"$work/err" 2>&1; then fail "accepted $bad"; fi
  grep -q "grad-dtype\|error-feedback" "$work/err" || fail "no reason given for $bad: $(cat "$work/err")"
done
echo "ok"
