#!/usr/bin/env bash
# usage: timeline.sh WEFT
# --timeline writes one Chrome trace per rank with every phase of every step.
set -euo pipefail
weft=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$weft" launch --nproc-per-node 2 -- weft train --model mlp --max-steps 12 --quiet --timeline "$work/tl/run.json" >/dev/null
for r in 0 1; do
  f="$work/tl/run-rank$r.json"
  [ -f "$f" ] || { echo "FAIL: no $f"; exit 1; }
  for phase in data forward backward optimizer "wait for all-reduce"; do
    n=$(grep -o "\"name\":\"$phase\"" "$f" | wc -l)
    [ "$n" -eq 12 ] || { echo "FAIL: $n '$phase' events in $f, expected 12"; exit 1; }
  done
  grep -q '"name":"allreduce' "$f" || { echo "FAIL: no all-reduce events"; exit 1; }
  grep -q '"traceEvents"' "$f" || { echo "FAIL: not a Chrome trace"; exit 1; }
done
echo "ok"
