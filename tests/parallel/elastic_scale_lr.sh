#!/usr/bin/env bash
# usage: elastic_scale_lr.sh WEFT
# 20 steps on 4 ranks with 12 samples each (global batch 48), then resume on 2 ranks with
# 12 each (global batch 24) and --scale-lr linear: the position carries over in samples
# (step 40 of the new batch), the learning rate halves, and every sample of the epoch is
# still trained exactly once.
set -uo pipefail
weft=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model mlp --epochs 1 --limit-train 2400 --limit-test 100 --seed 5 --quiet --lr 0.02
        --checkpoint-dir "$work/ck" --sample-log "$work/samples")
"$weft" launch --nproc-per-node 4 -- weft "${common[@]}" --batch 48 --max-steps 20 >/dev/null || exit 1
cp -r "$work/ck" "$work/mid"  # the checkpoint at step 20, for the refusal below
out=$("$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --batch 24 --resume --scale-lr linear) || { echo "$out"; exit 1; }
echo "$out" | grep -E "resumed|scaled|epoch 1/1"
echo "$out" | grep -q "learning rate scaled linearly with the global batch (48 -> 24): 0.02 -> 0.01" || {
  echo "FAIL: no linear scaling"; exit 1; }
cat "$work"/samples-rank* | awk '$1 == 0 { print $3 }' | sort -n | uniq -c >"$work/counts"
[ "$(wc -l <"$work/counts")" -eq 2400 ] || { echo "FAIL: not every sample trained"; exit 1; }
[ "$(awk '$1 != 1' "$work/counts" | wc -l)" -eq 0 ] || { echo "FAIL: samples trained twice"; exit 1; }
# A batch that does not divide the samples done is refused.
"$weft" train --model mlp --epochs 1 --limit-train 2400 --limit-test 100 --seed 5 --quiet --checkpoint-dir "$work/mid" \
  --batch 7 --resume >"$work/bad" 2>&1 && {
  echo "FAIL: resumed with a batch that cannot continue the epoch"; exit 1; }
grep -q "not a multiple of the new global batch 7" "$work/bad" || { cat "$work/bad"; exit 1; }
echo "ok"
