#!/usr/bin/env bash
# usage: offload.sh WEFT COMPARE
# Offloading the optimizer's state (seed 003 chapter 8; optim/state_store.h), on a GPT of
# 12.6 million parameters (Adam's state 96.5 MiB, the model states 193 MiB in all):
#  1. --memory-limit 150M, below the model states: the optimizer's state goes to a file,
#     the run trains to the very parameters of the in-memory run (bitwise), and its peak
#     RSS stays under the limit plus the in-memory run's memory that is not model state
#     (the program, data, activations: the stated fixed overhead), having saved most of the
#     offloaded bytes.
#  2. A checkpoint of an offloaded run resumes (offloaded again) to the same parameters.
#  3. Refusals: a limit below the parameters and their gradients, --offload params, a
#     missing --offload-dir; one line each, exit 2.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog and runs away"; done >"$work/corpus.txt"
gpt=(train --model gpt --data "$work/corpus.txt" --context 32 --layers 4 --d-model 512 --heads 8 --batch 4 --eval-every 6
     --eval-batches 1 --sample 0 --seed 3 --quiet)
field() { json_field "$1" <<<"$2"; }

# 1. In memory, then under a limit.
whole=$("$weft" "${gpt[@]}" --max-steps 6 --save-model "$work/memory.safetensors")
limited=$("$weft" "${gpt[@]}" --max-steps 6 --memory-limit 150M --offload-dir "$work" --save-model "$work/offloaded.safetensors")
grep -q "optimizer state offloaded to $work: 96.5 MiB there, 24.0 MiB in memory (the model states exceed --memory-limit 150M)" \
  <<<"$limited" || fail "no offload said: $limited"
cmp -s "$work/memory.safetensors" "$work/offloaded.safetensors" || fail "the offloaded run's parameters differ"
[ -z "$(find "$work" -name 'weft-optimizer-*')" ] || fail "the offload file was left behind"
states=$(($(field parameters "$whole") * 4 * 2 + $(field optimizer_state_bytes "$whole")))
overhead=$(($(field peak_rss_bytes "$whole") - states))
limit=$((150 * 1024 * 1024))
rss=$(field peak_rss_bytes "$limited")
saved=$(($(field peak_rss_bytes "$whole") - rss))
offloaded=$(($(field optimizer_state_bytes "$limited") - $(field optimizer_state_resident_bytes "$limited")))
echo "peak RSS in memory $(field peak_rss_bytes "$whole"), offloaded $rss (limit $limit + overhead $overhead); saved $saved of $offloaded offloaded bytes"
[ "$rss" -le $((limit + overhead)) ] || fail "peak RSS $rss above the limit plus the overhead"
[ "$saved" -ge $((offloaded * 3 / 4)) ] || fail "the offload saved $saved bytes of $offloaded"

# 2. Checkpoint and resume, offloaded.
"$weft" "${gpt[@]}" --max-steps 6 --offload optimizer --offload-dir "$work" --checkpoint-dir "$work/ck" \
  --checkpoint-every 3 >/dev/null
rm -rf "$work/ck/step-000000006"  # as if it had died after step 3
"$weft" "${gpt[@]}" --max-steps 6 --offload optimizer --offload-dir "$work" --checkpoint-dir "$work/ck" --resume \
  --save-model "$work/resumed.safetensors" >/dev/null
cmp -s "$work/memory.safetensors" "$work/resumed.safetensors" || fail "the resumed offloaded run differs"
echo "checkpoint at step 3 and resume, offloaded: bitwise the in-memory run"

# 3. Refusals.
expect_refusal "weft offloads the optimizer's state, not the parameters" "$weft" "${gpt[@]}" --max-steps 2 --memory-limit 100M
expect_refusal "offload params is not available" "$weft" "${gpt[@]}" --max-steps 2 --offload params
expect_refusal "is not a folder" "$weft" "${gpt[@]}" --max-steps 2 --offload optimizer --offload-dir "$work/none"
expect_refusal "is not a valid size\|--memory-limit" "$weft" "${gpt[@]}" --max-steps 2 --memory-limit lots
echo "refusals: 4 one-line errors"
