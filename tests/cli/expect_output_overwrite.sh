#!/usr/bin/env bash
# usage: expect_output_overwrite.sh WEFT
# An output replaces only a file of its own kind: a report page only a page weft wrote (weft
# report -o, train/plan --report), --save-model only a safetensors file, --metrics only a
# metrics file, --timeline (and timeline merge --out) only a Chrome trace, --sample-log only a
# sample log, --logits only logits, --port-file only a port number, a run's --checkpoint-dir
# only its own config.yaml and metrics.jsonl, weft sim --out only a simulation's files. Given an
# input or any other file, the command refuses before its work and the file stays as it was.
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
# A timeline replaces only a Chrome trace (each rank's file), a sample log is appended to only
# a sample log, a merged timeline replaces only a trace.
expect_refusal "timeline $work/model.safetensors exists and is not a timeline (Chrome trace): nothing is overwritten" \
  "$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --timeline "$work/model.safetensors"
expect_refusal "sample-log $work/model.safetensors exists and is not a sample log: nothing is overwritten" \
  "$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --sample-log "$work/model.safetensors"
"$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --timeline "$work/t.json" \
  --sample-log "$work/s.log" >/dev/null
expect_refusal "out $work/model.safetensors exists and is not a timeline (Chrome trace)" \
  "$weft" timeline merge --out "$work/model.safetensors" "$work/t.json"
cmp -s "$work/model.safetensors" "$work/kept.safetensors" || fail "the saved model was changed"
"$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --timeline "$work/t.json" \
  --sample-log "$work/s.log" >/dev/null
[[ $(wc -l <"$work/s.log") -eq 128 ]] || fail "the second run did not append its 64 samples to the sample log"
# A link is followed (the file it names replaced, the link kept); a folder the file system
# refuses (/proc, even to root) is refused before the work.
mkdir "$work/kept"
ln -s kept/model.safetensors "$work/link.safetensors"
"$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --save-model "$work/link.safetensors" >/dev/null
[[ -L "$work/link.safetensors" && -s "$work/kept/model.safetensors" ]] || fail "--save-model through a link replaced the link"
expect_refusal "save-model /proc/weft-model.safetensors: cannot write in the folder /proc" \
  "$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --save-model /proc/weft-model.safetensors
"$weft" train --model gpt --max-steps 1 --quiet --save-model "$work/gpt.safetensors" >/dev/null
expect_refusal "logits /proc/weft.logits: cannot write in the folder /proc" \
  "$weft" predict "$work/gpt.safetensors" --logits /proc/weft.logits
# --logits (raw float32, no header) replaces only logits, told by their values; --port-file only
# a port number: a model, a metrics file or text given to either is refused before the model
# loads, and kept.
cp "$work/gpt.safetensors" "$work/kept-gpt.safetensors"
expect_refusal "logits $work/gpt.safetensors exists and is not a logits file (float32): nothing is overwritten" \
  "$weft" predict "$work/gpt.safetensors" --windows 2 --logits "$work/gpt.safetensors"
expect_refusal "logits $work/gpt.safetensors exists and is not a logits file (float32): nothing is overwritten" \
  "$weft" generate "$work/gpt.safetensors" --prompt hi --max-tokens 2 --logits "$work/gpt.safetensors"
expect_refusal "logits $work/m.jsonl exists and is not a logits file" \
  "$weft" generate "$work/gpt.safetensors" --prompt hi --max-tokens 2 --logits "$work/m.jsonl"
expect_refusal "port-file $work/gpt.safetensors exists and is not a port file: nothing is overwritten" \
  "$weft" serve "$work/gpt.safetensors" --port 0 --port-file "$work/gpt.safetensors"
expect_refusal "logits $work/kept is a folder, not a file" \
  "$weft" generate "$work/gpt.safetensors" --prompt hi --max-tokens 2 --logits "$work/kept"
cmp -s "$work/gpt.safetensors" "$work/kept-gpt.safetensors" || fail "the saved model was changed"
cmp -s "$work/m.jsonl" "$work/kept.jsonl" || fail "the metrics file was changed"
# Logits are replaced by the next run's, generate's by predict's and back.
"$weft" generate "$work/gpt.safetensors" --prompt hi --max-tokens 2 --logits "$work/l.bin" >/dev/null
first=$(stat -c %s "$work/l.bin")
"$weft" predict "$work/gpt.safetensors" --windows 2 --logits "$work/l.bin" >/dev/null
second=$(stat -c %s "$work/l.bin")
"$weft" generate "$work/gpt.safetensors" --prompt hi --max-tokens 2 --logits "$work/l.bin" >/dev/null
[[ $first -gt 0 && $second -gt $first && $(stat -c %s "$work/l.bin") -eq $first ]] ||
  fail "logits were not replaced by the next run's: $first, $second, $(stat -c %s "$work/l.bin") bytes"
# A run's folder (--checkpoint-dir) replaces only its own metrics.jsonl and config.yaml (the
# resolved flags a run wrote there, which a run reads back with --config).
ck=(train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --checkpoint-dir "$work/run")
"$weft" "${ck[@]}" >/dev/null
"$weft" train --config "$work/run/config.yaml" --auto-resume >/dev/null  # its own files: read back, replaced
# A run from the beginning into the folder would save among the earlier run's checkpoints.
expect_refusal "checkpoint-dir $work/run holds an earlier run's checkpoints (the latest $work/run/step-000000001): continue it with --auto-resume" \
  "$weft" "${ck[@]}"
WEFT_RESTART_COUNT=1 "$weft" "${ck[@]}" >/dev/null  # a restarted attempt: the checkpoints are its own
printf '# my settings\nmodel: mlp\n' > "$work/mine.yaml"
for name in config.yaml metrics.jsonl; do
  mv "$work/run/$name" "$work/run/$name.run"
  cp "$work/mine.yaml" "$work/run/$name"
  expect_refusal "checkpoint-dir $work/run/$name exists and is not a" "$weft" "${ck[@]}" --auto-resume
  cmp -s "$work/run/$name" "$work/mine.yaml" || fail "--checkpoint-dir replaced the folder's own $name"
  mv "$work/run/$name.run" "$work/run/$name"
done
printf 'model: mlp\nnot-a-flag: 1\n' > "$work/run/config.yaml"
expect_refusal "checkpoint-dir $work/run/config.yaml exists and is not a run's resolved flags" "$weft" "${ck[@]}" --auto-resume
# weft sim --out replaces only an earlier simulation's files (summary.json, each CSV file by its
# header's first columns, the capture), never another file of one of their names.
topology="$(dirname "$0")/../../examples/topologies/single-switch.yaml"
sim=(sim --topology "$topology" --workload allreduce:ring:1MB --quiet --out "$work/sim")
"$weft" "${sim[@]}" --set pcap=host0.gpu0:switch >/dev/null
"$weft" "${sim[@]}" --set pcap=host0.gpu0:switch >/dev/null  # an earlier run's files are replaced
for name in summary.json pfc.csv link.pcap; do
  mv "$work/sim/$name" "$work/sim/$name.run"
  cp "$work/kept.jsonl" "$work/sim/$name"
  expect_refusal "out $work/sim/$name exists and is not a" "$weft" "${sim[@]}" --set pcap=host0.gpu0:switch
  cmp -s "$work/sim/$name" "$work/kept.jsonl" || fail "sim --out replaced another file named $name"
  mv "$work/sim/$name.run" "$work/sim/$name"
done
# A device is written as before (the metrics to standard output).
shown=$("$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --metrics /dev/stdout)
grep -q '"kind":"run"' <<<"$shown" || fail "--metrics /dev/stdout wrote no run record: $shown"
# Each replaces a file of its own kind.
"$weft" train --model mlp --max-steps 1 --limit-train 64 --limit-test 64 --quiet --save-model "$work/model.safetensors" \
  --metrics "$work/m.jsonl" >/dev/null
echo "outputs replace only their own kind: a metrics file given as -o/--report/--save-model, a model as --metrics, --timeline or --sample-log, a model or text as --logits or --port-file, other files in --checkpoint-dir and weft sim --out, refused and kept; links followed; /proc refused"
