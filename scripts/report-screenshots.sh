#!/usr/bin/env bash
# Draws the screenshots of docs/reports.md and the README (docs/images/report-*.png) with
# headless Chromium from pages weft writes here, and writes the figures the simulation and
# plan pages are drawn from (what their commands print, less wall times and sizes) to
# docs/images/report-sources.txt. With --check it draws nothing: it runs those two commands
# again and fails when what they print differs from the file (the screenshots are stale).
# (The training page's figures depend on the processor's kernels: not checked.)
# usage: scripts/report-screenshots.sh [--check] [WEFT]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
weft=$(realpath "${1:-$repo/build/weft}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
sources=$repo/docs/images/report-sources.txt
# The simulation and the plan of the screenshots; their figures on standard output.
draw_sources() {
  echo "$ weft sim --topology examples/topologies/pfc-cascade.yaml --workload incast:4:4MB@4,0-3 --cc none"
  (cd "$repo" && "$weft" sim --topology examples/topologies/pfc-cascade.yaml --workload incast:4:4MB@4,0-3 --cc none \
    --report "$work/simulation.html" --quiet) | grep -E '^(flows|congestion|busiest link):'
  echo "$ weft plan --model gpt3-175b --gpus 1024 --global-batch 1536 --sweep"
  "$weft" plan --model gpt3-175b --gpus 1024 --global-batch 1536 --sweep --report plan.html | grep -v '^report: '
}
if [ "$check" = 1 ]; then
  draw_sources >now.txt
  if ! diff -u "$sources" now.txt; then
    echo "FAIL: the report screenshots' sources changed: run scripts/report-screenshots.sh and commit docs/images"
    exit 1
  fi
  echo "the simulation and plan screenshots show what their commands print now"
  exit 0
fi
draw_sources >"$sources"
gpt=(train --model gpt --max-steps 300 --layers 2 --d-model 64 --eval-every 50 --quiet)
"$weft" "${gpt[@]}" --metrics fp32.metrics.jsonl >/dev/null
"$weft" "${gpt[@]}" --precision bf16 --metrics bf16.metrics.jsonl >/dev/null
"$weft" report fp32.metrics.jsonl bf16.metrics.jsonl -o training.html --title "weft: GPT, fp32 against bf16"
shoot() {
  chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars --window-size="$2" --user-data-dir="$work/chromium" \
    --screenshot="$repo/docs/images/report-$1.png" "file://$work/$1.html" 2>/dev/null
}
shoot training 1300,1250
shoot simulation 1300,1900
shoot plan 1300,700
ls -la "$repo"/docs/images/report-*.png "$sources"
