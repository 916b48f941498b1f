#!/usr/bin/env bash
# usage: llama_layouts.sh WEFT COMPARE
# A Llama-shaped model (--model llama: RMSNorm, SwiGLU, rotary positions, 4 heads over 2
# key-value heads, no biases, an untied head; 4 blocks, d 32) trained 20 steps with SGD in
# every parallel layout the GPT has ends with the parameters and the training loss of the
# single-process run within a relative 1e-5 (nn/decoder_block.h: one block, many ways to run
# it): data parallelism with ZeRO-1, ZeRO-2 and ZeRO-3, tensor parallelism (the key-value heads
# split with their query heads), pipelines (GPipe, 1F1B, interleaved), and a 2 x 2 x 2 mesh
# recomputing its activations. A layout the key-value heads do not split over is refused in one line.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
common=(train --model llama --layers 4 --d-model 32 --heads 4 --kv-heads 2 --context 16 --batch 8 --max-steps 20
        --eval-every 20 --eval-batches 1 --sample 0 --seed 3 --optimizer sgd --lr 0.05 --quiet --threads 1)
one=$("$weft" "${common[@]}" --save-model "$work/one.safetensors" | json_field train_loss)
run() {  # ranks label flags...
  local n=$1 label=$2
  shift 2
  out=$("$weft" launch --nproc-per-node "$n" -- weft "${common[@]}" "$@" --save-model "$work/run.safetensors")
  expect_same_run "$label" "$work/one.safetensors" "$work/run.safetensors" "$one" "$(rank0_field train_loss <<<"$out")"
}
run 2 "data parallel 2, ZeRO-1" --dp 2 --zero 1
run 2 "ZeRO-2 on 2 ranks" --zero 2
run 2 "ZeRO-3 on 2 ranks" --zero 3
run 2 "tensor parallel 2" --tp 2
for schedule in gpipe 1f1b; do
  run 2 "pipeline 2, $schedule" --pp 2 --micro-batches 4 --pipeline-schedule "$schedule"
done
run 2 "pipeline 2, interleaved" --pp 2 --micro-batches 2 --pipeline-schedule interleaved --chunks 2
run 8 "mesh dp 2 x pp 2 x tp 2, recomputing activations" --dp 2 --pp 2 --tp 2 --micro-batches 2 --recompute
expect_refusal "does not divide the 2 key-value heads" "$weft" "${common[@]}" --tp 4
expect_refusal "kv-heads equal to --heads" "$weft" "${common[@]}" --tp 2 --tp-attention seed
echo ok
