#!/usr/bin/env bash
# usage: elastic.sh WEFT
# Train on 4 ranks, stop, resume on 2: training continues, and every sample of the epoch is
# trained exactly once across the change.
set -uo pipefail
weft=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model mlp --batch 48 --epochs 1 --limit-train 2400 --limit-test 100 --seed 5 --quiet
        --checkpoint-dir "$work/ck" --sample-log "$work/samples")
first=$("$weft" launch --nproc-per-node 4 -- weft "${common[@]}" --max-steps 20 2>&1) ||
  { echo "$first"; echo "FAIL: the 4-rank run before the resize"; exit 1; }
out=$("$weft" launch --nproc-per-node 2 -- weft "${common[@]}" --resume) || { echo "$out"; exit 1; }
echo "$out" | grep -E "resumed|epoch 1/1"
echo "$out" | grep -q "written by 4 rank(s), now 2" || { echo "FAIL: no resume across world sizes"; exit 1; }
cat "$work"/samples-rank* | awk '$1 == 0 { print $3 }' | sort -n | uniq -c >"$work/counts"
seen=$(wc -l <"$work/counts")
twice=$(awk '$1 != 1' "$work/counts" | wc -l)
[ "$seen" -eq 2400 ] || { echo "FAIL: $seen distinct samples trained, expected 2400"; exit 1; }
[ "$twice" -eq 0 ] || { echo "FAIL: $twice samples trained more than once"; exit 1; }
echo "ok: 2400 samples, each exactly once, over 4 then 2 ranks"
