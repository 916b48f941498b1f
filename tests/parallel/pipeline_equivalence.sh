#!/usr/bin/env bash
# usage: pipeline_equivalence.sh WEFT COMPARE
# Pipeline parallelism equals one process: a GPT (8 blocks) trained 20 steps with SGD on
# S = 2 and 4 stages, with every schedule, ends with the parameters and the training loss of
# the single-process run within a relative 1e-5 (the seed schedule, which updates after
# every micro-batch, against one process doing the same). SGD, not AdamW: AdamW turns the
# float noise in gradients that are zero in exact arithmetic (the attention key bias) into
# full-size steps, so any change of summation order shows there.
# Then the traces: every stage sends and receives exactly its schedule's activations and
# gradients.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
common=(train --model gpt --layers 8 --d-model 32 --heads 2 --context 16 --batch 8 --max-steps 20 --eval-every 20
        --eval-batches 1 --sample 0 --seed 11 --optimizer sgd --lr 0.05 --quiet --threads 1)

"$weft" "${common[@]}" --save-model "$work/one.safetensors" >"$work/one.txt"
"$weft" "${common[@]}" --micro-batches 4 --pipeline-schedule seed --save-model "$work/one-seed.safetensors" >"$work/one-seed.txt"
for stages in 2 4; do
  for schedule in naive gpipe 1f1b interleaved seed; do
    ref=one
    [ "$schedule" = seed ] && ref=one-seed
    out=$("$weft" launch --nproc-per-node "$stages" -- weft "${common[@]}" --pp "$stages" --micro-batches 4 \
            --pipeline-schedule "$schedule" --save-model "$work/pp.safetensors")
    echo "$out" | grep -E "pipeline( bubble)?:" | sed 's/^\[0\] //'
    expect_same_run "$schedule, $stages stages" "$work/$ref.safetensors" "$work/pp.safetensors" \
      "$(json_field train_loss <"$work/$ref.txt")" "$(rank0_field train_loss <<<"$out")"
  done
done

# Stages balanced by measured time instead of parameters: another partition, the same result.
out=$("$weft" launch --nproc-per-node 4 -- weft "${common[@]}" --pp 4 --micro-batches 4 --balance time \
        --save-model "$work/pp.safetensors")
echo "$out" | grep -E "pipeline:" | sed 's/^\[0\] //'
printf 'balanced by time, 4 stages: '
"$compare" "$work/one.safetensors" "$work/pp.safetensors" 1e-5 | tail -n 1

# Traces: 2 stages, 4 micro-batches, 2 steps and one evaluation batch. Stage 0 sends the
# activations of 4 x 2 + 4 micro-batches and receives 4 x 2 gradients; stage 1 the reverse.
WEFT_TRACE="$work/trace" "$weft" launch --nproc-per-node 2 -- weft train --model gpt --layers 4 --d-model 24 --heads 2 \
  --context 16 --batch 8 --max-steps 2 --eval-every 2 --eval-batches 1 --sample 0 --pp 2 --micro-batches 4 --quiet >/dev/null
python3 - "$work/trace" <<'PY'
import json, sys
act = 2 * 16 * 24 * 4  # micro-batch 2 x context 16 x d 24, f32 (no parameter has this size)
count = {}
for r in (0, 1):
    for line in open(f"{sys.argv[1]}/rank-{r}.jsonl"):
        rec = json.loads(line)
        if rec["op"] in ("send", "recv") and rec["bytes"] == act:
            count[(r, rec["op"])] = count.get((r, rec["op"]), 0) + 1
want = {(0, "send"): 12, (0, "recv"): 8, (1, "recv"): 12, (1, "send"): 8}
assert count == want, (count, want)
print("traces: stage 0 sent 12 activations and received 8 gradients; stage 1 the reverse")
PY
echo ok
