#!/usr/bin/env bash
# usage: expect_output_overwrite.sh WEFT
# An output replaces only a file of its own kind: a report page only a page weft wrote (weft
# report -o, train/plan --report), --save-model only a safetensors file, --metrics only a
# metrics file. Given an input or any other file, the command refuses before its work and
# the file stays as it was.
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
# A saved model is not lost to a mistyped --metrics, nor a metrics file to --save-model.
"$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --save-model "$work/model.safetensors" >/dev/null
cp "$work/model.safetensors" "$work/kept.safetensors"
expect_refusal "metrics $work/model.safetensors exists and is not a metrics file: nothing is overwritten" \
  "$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --metrics "$work/model.safetensors"
expect_refusal "save-model $work/m.jsonl exists and is not a safetensors file" \
  "$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --save-model "$work/m.jsonl"
cmp -s "$work/model.safetensors" "$work/kept.safetensors" || fail "the saved model was changed"
cmp -s "$work/m.jsonl" "$work/kept.jsonl" || fail "the metrics file was changed"
# A device is written as before (the metrics to standard output).
shown=$("$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --metrics /dev/stdout)
grep -q '"kind":"run"' <<<"$shown" || fail "--metrics /dev/stdout wrote no run record: $shown"
# Each replaces a file of its own kind.
"$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --save-model "$work/model.safetensors" \
  --metrics "$work/m.jsonl" >/dev/null
echo "outputs replace only their own kind: a metrics file given as -o/--report/--save-model, a model as --metrics, refused and kept"
