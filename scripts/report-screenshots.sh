#!/usr/bin/env bash
# Draws the screenshots of docs/reports.md and the README (docs/images/report-*.png) with
# headless Chromium from pages weft writes here. usage: scripts/report-screenshots.sh [WEFT]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
weft=$(realpath "${1:-$repo/build/weft}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
gpt=(train --model gpt --max-steps 300 --layers 2 --d-model 64 --eval-every 50 --quiet)
"$weft" "${gpt[@]}" --metrics fp32.metrics.jsonl >/dev/null
"$weft" "${gpt[@]}" --precision bf16 --metrics bf16.metrics.jsonl >/dev/null
"$weft" report fp32.metrics.jsonl bf16.metrics.jsonl -o training.html --title "weft: GPT, fp32 against bf16"
"$weft" sim --topology "$repo/examples/topologies/pfc-cascade.yaml" --workload incast:4:4MB@4,0-3 --cc none \
  --report simulation.html --quiet >/dev/null
"$weft" plan --model gpt3-175b --gpus 1024 --global-batch 1536 --sweep --report plan.html >/dev/null
shoot() {
  chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars --window-size="$2" --user-data-dir="$work/chromium" \
    --screenshot="$repo/docs/images/report-$1.png" "file://$work/$1.html" 2>/dev/null
}
shoot training 1300,1250
shoot simulation 1300,1900
shoot plan 1300,700
ls -la "$repo"/docs/images/report-*.png
