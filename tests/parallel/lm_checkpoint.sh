#!/usr/bin/env bash
# usage: lm_checkpoint.sh WEFT COMPARE
# Language-model checkpoints: a GPT trained 20 steps with checkpoints at 10 and 20; with the
# step-20 checkpoint removed (as if the run had died after step 10), --resume continues from
# step 10 and ends bitwise equal to the uninterrupted run: model, optimizer state, the
# sampler's random state and the learning-rate schedule all come back. In one process, with
# --dp 2, --pp 2, --tp 2 and --pp 2 --tp 2 (the checkpoint holds the whole model, gathered
# from the slices and stages). A checkpoint written by 4 ranks (pp 2 x tp 2) resumes in one
# process within a relative 1e-5 of the one-process run. A finished run goes on to a larger
# --max-steps.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
args=(train --model gpt --layers 4 --d-model 32 --heads 4 --context 16 --batch 8 --max-steps 20 --eval-every 10
      --eval-batches 1 --sample 0 --quiet --seed 3 --optimizer sgd --lr 0.05 --threads 1)
layouts=("1:" "2:--dp 2" "2:--pp 2 --micro-batches 2" "2:--tp 2" "4:--pp 2 --tp 2 --micro-batches 2")
for layout in "${layouts[@]}"; do
  ranks=${layout%%:*}
  read -r -a extra <<<"${layout#*:}"
  expect_bitwise_resume "$work/ck$ranks" "${extra[*]:-one process}" \
    "$weft" launch --nproc-per-node "$ranks" -- weft "${args[@]}" "${extra[@]}"
done
# A finished run extended: its 20 steps done, --max-steps 30 --resume trains steps 21 to 30.
more=("${args[@]}")
for i in "${!more[@]}"; do [ "${more[$i]}" != "--max-steps" ] || more[$((i + 1))]=30; done
out=$("$weft" "${more[@]}" --checkpoint-dir "$work/ck1" --resume)
grep -q '"resumed_from":20' <<<"$out" && [ "$(json_value steps <<<"$out")" = 30 ] ||
  { echo "FAIL: a finished 20-step run was not extended to 30 steps: $out"; exit 1; }
echo "a finished 20-step run extended to 30 steps"
rm -rf "$work/ck4/step-000000020"
"$weft" "${args[@]}" --checkpoint-dir "$work/ck4" --resume --save-model "$work/elastic.safetensors" >/dev/null
printf 'the pp 2 x tp 2 checkpoint resumed in one process: '
"$compare" "$work/ck1-full.safetensors" "$work/elastic.safetensors" 1e-5 | tail -n 1
echo ok
