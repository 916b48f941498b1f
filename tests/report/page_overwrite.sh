#!/usr/bin/env bash
# usage: page_overwrite.sh WEFT
# A report page replaces only a page weft wrote: given an input or any other file as its path,
# weft report, train, sim and plan refuse before their work and the file stays as it was.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
new_work_dir
"$weft" train --model mlp --max-steps 3 --limit-train 256 --limit-test 64 --quiet --metrics "$work/m.jsonl" >/dev/null
cp "$work/m.jsonl" "$work/kept.jsonl"
expect_refusal "out $work/m.jsonl exists and is not a page weft wrote: nothing is overwritten" \
  "$weft" report "$work/m.jsonl" --out "$work/m.jsonl"
expect_refusal "report $work/m.jsonl exists and is not a page weft wrote" \
  "$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --report "$work/m.jsonl"
expect_refusal "report $work/m.jsonl exists and is not a page weft wrote" \
  "$weft" plan --model gpt3-175b --gpus 64 --tp 8 --report "$work/m.jsonl"
cmp -s "$work/m.jsonl" "$work/kept.jsonl" || fail "the metrics file was changed"
# A page is replaced by the next one.
"$weft" report "$work/m.jsonl" --out "$work/page.html" >/dev/null
"$weft" report "$work/m.jsonl" --out "$work/page.html" --title again >/dev/null
grep -q "<title>again</title>" "$work/page.html" || fail "the second page did not replace the first"
echo "a page replaces only a page: the metrics file given as --out and --report was refused and kept"
