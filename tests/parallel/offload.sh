#!/usr/bin/env bash
# usage: offload.sh WEFT COMPARE
# Offloading the optimizer's state (seed 003 chapter 8; optim/state_store.h), on a GPT of
# 12.6 million parameters (Adam's state 96.5 MiB, the model states 193 MiB in all), and the
# parameters too (parallel/param_offload.h) on an MLP of 22.6 million (362 MB of states):
#  1. --memory-limit 150M, below the model states: the optimizer's state goes to a file,
#     the run trains to the very parameters of the in-memory run (bitwise), and its peak
#     RSS stays under the limit plus the in-memory run's memory that is not model state
#     (the program, data, activations: the stated fixed overhead), having saved most of the
#     offloaded bytes.
#  2. A checkpoint of an offloaded run resumes (offloaded again) to the same parameters.
#  3. --offload params --memory-limit 200M, below what offloading the optimizer's state
#     alone needs: the run trains to the in-memory run's parameters (bitwise) and saves them,
#     its peak RSS under the limit plus the fixed overhead; a checkpoint resumes to the same;
#     DDP on 2 ranks (the CNN) equals one process within 1e-5; the GPT above, its blocks
#     streamed, equals its in-memory run bitwise.
#  4. Refusals: a limit below the parameters and their gradients, --offload params for a
#     recurrent model, with --clip-grad or ZeRO, a missing --offload-dir; one line each, exit 2.
#     Under ZeRO the limit counts the rank's shards.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog and runs away"; done >"$work/corpus.txt"
gpt=(train --model gpt --data "$work/corpus.txt" --context 32 --layers 4 --d-model 512 --heads 8 --batch 4 --eval-every 4
     --eval-batches 1 --sample 0 --seed 3 --quiet)
field() { json_field "$1" <<<"$2"; }

# 1. In memory, then under a limit.
whole=$("$weft" "${gpt[@]}" --max-steps 4 --save-model "$work/memory.safetensors")
limited=$("$weft" "${gpt[@]}" --max-steps 4 --memory-limit 150M --offload-dir "$work" --save-model "$work/offloaded.safetensors")
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
"$weft" "${gpt[@]}" --max-steps 4 --offload optimizer --offload-dir "$work" --checkpoint-dir "$work/ck" \
  --checkpoint-every 2 >/dev/null
rm -rf "$work/ck/step-000000004"  # as if it had died after step 2
"$weft" "${gpt[@]}" --max-steps 4 --offload optimizer --offload-dir "$work" --checkpoint-dir "$work/ck" --resume \
  --save-model "$work/resumed.safetensors" >/dev/null
cmp -s "$work/memory.safetensors" "$work/resumed.safetensors" || fail "the resumed offloaded run differs"
echo "checkpoint at step 2 and resume, offloaded: bitwise the in-memory run"

# 3. The parameters too.
mlp=(train --model mlp --hidden 2048,2048,2048,2048,2048,2048 --batch 64 --limit-train 320 --limit-test 100 --seed 3
     --optimizer adam --lr 0.0005 --quiet)
whole=$("$weft" "${mlp[@]}" --save-model "$work/mlp-memory.safetensors")
expect_refusal "keeps the parameters in a file too" "$weft" "${mlp[@]}" --memory-limit 200M
limited=$("$weft" "${mlp[@]}" --memory-limit 200M --offload params --offload-dir "$work" \
  --save-model "$work/mlp-offloaded.safetensors")
grep -q "parameters offloaded to $work: 86.3 MiB there, at most 48.0 MiB in memory (7 segments of layers" <<<"$limited" ||
  fail "no parameter offload said: $limited"
states=$(($(field parameters "$whole") * 4 * 2 + $(field optimizer_state_bytes "$whole")))
overhead=$(($(field peak_rss_bytes "$whole") - states))
limit=$((200 * 1024 * 1024))
rss=$(field peak_rss_bytes "$limited")
echo "parameters offloaded: peak RSS in memory $(field peak_rss_bytes "$whole"), offloaded $rss (limit $limit + overhead $overhead)"
[ "$rss" -le $((limit + overhead)) ] || fail "peak RSS $rss above the limit plus the overhead"
[ -z "$(find "$work" -name 'weft-parameters-*')" ] || fail "the parameter file was left behind"
cmp -s "$work/mlp-memory.safetensors" "$work/mlp-offloaded.safetensors" || fail "the offloaded parameters' run differs"
echo "parameters offloaded: bitwise the in-memory run"
small=(train --model mlp --batch 64 --limit-train 1280 --limit-test 100 --seed 3 --optimizer adam --lr 0.001 --quiet
       --offload params --offload-dir "$work")
expect_bitwise_resume "$work/ck-params" "parameters offloaded, checkpoint at step 10" "$weft" "${small[@]}" --max-steps 20
cnn=(train --model cnn --batch 64 --limit-train 640 --limit-test 100 --seed 3 --optimizer sgd --lr 0.02 --quiet)
"$weft" "${cnn[@]}" --save-model "$work/cnn.safetensors" >/dev/null
"$weft" launch --nproc-per-node 2 -- weft "${cnn[@]}" --offload params --offload-dir "$work" \
  --save-model "$work/cnn-ddp.safetensors" >/dev/null
printf 'parameters offloaded, CNN with DDP on 2 ranks against one process: '
"$compare" "$work/cnn.safetensors" "$work/cnn-ddp.safetensors" 1e-5 | tail -n 1
"$weft" "${gpt[@]}" --max-steps 4 --clip-grad 0 --save-model "$work/gpt-memory.safetensors" >/dev/null
out=$("$weft" "${gpt[@]}" --max-steps 4 --clip-grad 0 --offload params --offload-dir "$work" \
  --save-model "$work/gpt-offloaded.safetensors")
grep -q "parameters offloaded to $work: [0-9.]* MiB there, at most [0-9.]* MiB in memory (6 segments" <<<"$out" ||
  fail "the GPT's blocks were not streamed: $out"
cmp -s "$work/gpt-memory.safetensors" "$work/gpt-offloaded.safetensors" || fail "the GPT with offloaded parameters differs"
echo "parameters offloaded, GPT (embedding, 4 blocks, head): bitwise the in-memory run"

# 4. Refusals.
expect_refusal "keeps the parameters in a file too" "$weft" "${gpt[@]}" --max-steps 2 --memory-limit 100M
expect_refusal "clip-grad 0" "$weft" "${gpt[@]}" --max-steps 2 --offload params
expect_refusal "not a recurrent model's" "$weft" train --model lstm --data "$work/corpus.txt" --max-steps 2 --offload params
expect_refusal "clip-grad 0" "$weft" "${small[@]}" --clip-grad 1
expect_refusal "DDP or one process" "$weft" "${small[@]}" --zero 1
expect_refusal "is not a folder" "$weft" "${gpt[@]}" --max-steps 2 --offload optimizer --offload-dir "$work/none"
expect_refusal "is not a valid size\|--memory-limit" "$weft" "${gpt[@]}" --max-steps 2 --memory-limit lots
# Under ZeRO the limit counts what a rank holds: ZeRO-1 on 2 ranks still holds every
# parameter and gradient (refused, naming what divides them), ZeRO-3 half of every model
# state (96.5 of 193 MiB: under 100M).
expect_refusal "more ranks (or --zero 3) divide them further" "$weft" launch --nproc-per-node 2 -- weft "${gpt[@]}" \
  --max-steps 1 --zero 1 --memory-limit 100M
"$weft" launch --nproc-per-node 2 -- weft "${gpt[@]}" --max-steps 1 --zero 3 --memory-limit 100M >/dev/null ||
  fail "ZeRO-3's shards were not what --memory-limit counted"
expect_refusal "need 96.5 MiB in memory (parameters 24.1 MiB, their gradients 24.1 MiB" \
  "$weft" launch --nproc-per-node 2 -- weft "${gpt[@]}" --max-steps 1 --zero 3 --memory-limit 90M
echo "refusals: 9 one-line errors; ZeRO-3's shards fit a limit the whole model states do not"
