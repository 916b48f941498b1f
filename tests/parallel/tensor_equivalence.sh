#!/usr/bin/env bash
# usage: tensor_equivalence.sh WEFT COMPARE
# Tensor parallelism equals one process: a GPT (2 blocks, 4 heads) trained 20 steps with SGD
# on 2 and 4 ranks, Megatron-style and with seed 002's attention (all-gather of Q and K),
# ends with the parameters and the training loss of the single-process run within a
# relative 1e-5. This covers the parallel MLP, the parallel attention, the vocabulary-
# parallel embedding (114 characters: uneven shards on 4 ranks) and cross-entropy.
# Then the traces: the collectives the seeds and Megatron-LM describe, at the counts they
# describe, per training step.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
common=(train --model gpt --layers 2 --d-model 32 --heads 4 --context 16 --batch 8 --max-steps 20 --eval-every 20
        --eval-batches 1 --sample 0 --seed 3 --optimizer sgd --lr 0.05 --quiet --threads 1)
one=$("$weft" "${common[@]}" --save-model "$work/one.safetensors" | json_field train_loss)
for tp in 2 4; do
  for attention in megatron seed; do
    out=$("$weft" launch --nproc-per-node "$tp" -- weft "${common[@]}" --tp "$tp" --tp-attention "$attention" \
            --save-model "$work/tp.safetensors")
    expect_same_run "tp $tp, $attention attention" "$work/one.safetensors" "$work/tp.safetensors" "$one" \
      "$(rank0_field train_loss <<<"$out")"
  done
done

# Traces of one training step and one evaluation batch (L = 2 layers, B x T x d = 8 x 16 x 32).
for attention in megatron seed; do
  rm -rf "$work/trace"
  WEFT_TRACE="$work/trace" "$weft" launch --nproc-per-node 2 -- weft train --model gpt --layers 2 --d-model 32 --heads 4 \
    --context 16 --batch 8 --max-steps 1 --eval-every 1 --eval-batches 1 --sample 0 --tp 2 --tp-attention "$attention" \
    --quiet >/dev/null
  python3 - "$work/trace" "$attention" <<'PY'
import json, sys
L, act = 2, 8 * 16 * 32 * 4
for r in (0, 1):
    ops = {}
    for line in open(f"{sys.argv[1]}/rank-{r}.jsonl"):
        rec = json.loads(line)
        if rec["op"] == "mark":  # a step's start (docs/trace-format.md)
            continue
        key = (rec["op"], rec["bytes"])
        ops[key] = ops.get(key, 0) + 1
    # Megatron: 2 all-reduces per layer in forward (after attention and after the MLP) and 2 in
    # backward (their inputs' gradients), plus the vocabulary-parallel embedding's (forward) and
    # the head's (backward); the evaluation batch repeats the forward ones.
    assert ops.get(("allreduce", act)) == (4 * L + 2) + (2 * L + 1), ops
    if sys.argv[2] == "seed":
        # Seed 002: Q and K all-gathered in every forward, their gradients reduce-scattered.
        assert ops.get(("allgather", act // 2)) == 2 * L + 2 * L, ops
        assert ops.get(("reduce_scatter", act // 2)) == 2 * L, ops
    else:
        assert ("allgather", act // 2) not in ops, ops
print(f"traces ({sys.argv[2]}): {4 * L + 2} activation all-reduces per training step, {2 * L + 1} per evaluation" +
      (f"; {2 * L} all-gathers of Q and K per forward, {2 * L} reduce-scatters per backward" if sys.argv[2] == "seed" else ""))
PY
done
echo ok
