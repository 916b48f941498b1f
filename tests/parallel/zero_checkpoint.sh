#!/usr/bin/env bash
# usage: zero_checkpoint.sh WEFT COMPARE
# ZeRO checkpoints: each stage (1, 2, 3) with AdamW on 2 ranks, stopped after 10 steps and
# resumed to 20, ends bitwise equal to an uninterrupted 20-step run. The checkpoint holds the
# consolidated optimizer state and each rank's shard (optimizer-rank<r>.safetensors). A
# stage-2 checkpoint from 2 ranks resumes on 3 (the shards re-cut) and without ZeRO, each
# within a relative 1e-5 of the uninterrupted run.
set -euo pipefail
weft=$1
compare=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model mlp --batch 48 --limit-train 2400 --limit-test 200 --seed 5 --optimizer adamw --lr 0.001 --quiet)
for z in 1 2 3; do
  "$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --zero $z --max-steps 20 --save-model "$work/full.safetensors" >/dev/null
  rm -rf "$work/ck"
  "$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --zero $z --max-steps 10 --checkpoint-dir "$work/ck" \
    --checkpoint-every 10 >/dev/null
  [ $z -eq 2 ] && cp -r "$work/ck" "$work/ck2"  # the step-10 checkpoint, for the elastic runs below
  for r in 0 1; do
    ls "$work"/ck/step-*/optimizer-rank$r.safetensors >/dev/null 2>&1 || { echo "FAIL: no shard file of rank $r"; exit 1; }
  done
  "$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --zero $z --max-steps 20 --checkpoint-dir "$work/ck" --resume \
    --save-model "$work/resumed.safetensors" >/dev/null
  if cmp -s "$work/full.safetensors" "$work/resumed.safetensors"; then
    echo "stage $z: stopped at step 10 and resumed: bitwise equal to 20 steps in one go"
  else
    echo "FAIL: stage $z resumed run differs"; "$compare" "$work/full.safetensors" "$work/resumed.safetensors" 0; exit 1
  fi
done
# Elastic: the stage-2 checkpoint of 2 ranks on 3 ranks (same per-rank batch would change the
# global batch: keep the global batch, 48 = 3 x 16), and on 1 rank without ZeRO.
"$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --zero 2 --max-steps 20 --save-model "$work/full.safetensors" >/dev/null
for ranks in 3 1; do
  rm -rf "$work/ck"
  cp -r "$work/ck2" "$work/ck"
  extra=(--zero 2)
  [ "$ranks" -eq 1 ] && extra=()
  "$weft" launch --nproc-per-node "$ranks" -- weft "${common[@]}" "${extra[@]}" --max-steps 20 --checkpoint-dir "$work/ck" \
    --resume --save-model "$work/elastic.safetensors" >/dev/null
  printf 'stage-2 checkpoint of 2 ranks resumed on %s: ' "$ranks"
  "$compare" "$work/full.safetensors" "$work/elastic.safetensors" 1e-5 | tail -n 1
done
echo ok
