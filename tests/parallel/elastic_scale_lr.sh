#!/usr/bin/env bash
# usage: elastic_scale_lr.sh WEFT
# 20 steps on 4 ranks with 12 samples each (global batch 48), then resume on 2 ranks with
# 12 each (global batch 24) and --scale-lr linear: the position carries over in samples
# (step 40 of the new batch), the learning rate halves, and every sample of the epoch is
# still trained exactly once; then from the same checkpoint on 1 rank with a global batch of
# 50, which does not divide the samples done.
set -uo pipefail
weft=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model mlp --epochs 1 --limit-train 2400 --limit-test 100 --seed 5 --quiet --lr 0.02
        --checkpoint-dir "$work/ck" --sample-log "$work/samples")
first=$("$weft" launch --nproc-per-node 4 -- weft "${common[@]}" --batch 48 --max-steps 20 2>&1) ||
  { echo "$first"; echo "FAIL: the 4-rank run before the resize"; exit 1; }
cp -r "$work/ck" "$work/mid"  # the checkpoint at step 20, for batch 50 below
out=$("$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --batch 24 --resume --scale-lr linear) || { echo "$out"; exit 1; }
echo "$out" | grep -E "resumed|scaled|epoch 1/1"
echo "$out" | grep -q "learning rate scaled linearly with the global batch (48 -> 24): 0.02 -> 0.01" || {
  echo "FAIL: no linear scaling"; exit 1; }
cat "$work"/samples-rank* | awk '$1 == 0 { print $3 }' | sort -n | uniq -c >"$work/counts"
[ "$(wc -l <"$work/counts")" -eq 2400 ] || { echo "FAIL: not every sample trained"; exit 1; }
[ "$(awk '$1 != 1' "$work/counts" | wc -l)" -eq 0 ] || { echo "FAIL: samples trained twice"; exit 1; }
# A batch that does not divide the samples done continues the epoch too: 960 samples done,
# 1,440 left in batches of 50 (the last one of 40), each sample once; --scale-lr sqrt.
mkdir -p "$work/odd"
awk '$1 == 0 && $2 < 20' "$work"/samples-rank* >"$work/odd/before"  # the 4-rank run's
out=$("$weft" train --model mlp --epochs 1 --limit-train 2400 --limit-test 100 --seed 5 --quiet --lr 0.02 \
  --checkpoint-dir "$work/mid" --batch 50 --resume --scale-lr sqrt --sample-log "$work/odd/after") || { echo "$out"; exit 1; }
echo "$out" | grep -q "scaled with the square root of the global batch (48 -> 50)" || {
  echo "FAIL: no square-root scaling: $out"; exit 1; }
echo "$out" | grep -q '"steps":49' || { echo "FAIL: expected 20 + 29 steps: $out"; exit 1; }
cat "$work/odd/before" "$work/odd/after" | awk '{ print $3 }' | sort -n | uniq -c >"$work/odd/counts"
[ "$(wc -l <"$work/odd/counts")" -eq 2400 ] || { echo "FAIL: not every sample trained with batch 50"; exit 1; }
[ "$(awk '$1 != 1' "$work/odd/counts" | wc -l)" -eq 0 ] || { echo "FAIL: samples trained twice with batch 50"; exit 1; }
echo "ok"
