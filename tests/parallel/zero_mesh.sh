#!/usr/bin/env bash
# usage: zero_mesh.sh WEFT COMPARE
# ZeRO inside model parallelism: each pipeline stage's or tensor-parallel slice's
# parameters sharded over its data-parallel group. With SGD and a gradient-norm limit that
# clips every step, ZeRO 1 and 3 on --dp 2 --tp 2 and on --dp 2 --pp 2, and ZeRO 2 on a
# 2x2x2 mesh, end within relative 1e-5 of the same layout without ZeRO; a --dp 2 --pp 2
# ZeRO-3 run resumes bitwise from its step-10 checkpoint, and that checkpoint resumes in
# one process without ZeRO too.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
args=(train --model gpt --layers 2 --d-model 32 --heads 4 --context 16 --batch 8 --max-steps 20 --eval-every 20
      --eval-batches 1 --sample 0 --quiet --seed 3 --threads 1 --optimizer sgd --lr 0.05 --clip-grad 0.05)
loss() { json_field train_loss; }
check() {  # ranks layout zero-stages...
  local n=$1 layout=$2
  shift 2
  # shellcheck disable=SC2086
  ref=$("$weft" launch --nproc-per-node "$n" -- weft "${args[@]}" $layout --save-model "$work/ref.safetensors" | loss)
  for z in "$@"; do
    # shellcheck disable=SC2086
    out=$("$weft" launch --nproc-per-node "$n" -- weft "${args[@]}" $layout --zero "$z" --save-model "$work/z.safetensors")
    expect_same_run "$layout --zero $z" "$work/ref.safetensors" "$work/z.safetensors" "$ref" "$(loss <<<"$out")"
  done
}
check 4 "--dp 2 --tp 2" 1 3
check 4 "--dp 2 --pp 2 --micro-batches 2" 1 3
check 8 "--dp 2 --pp 2 --tp 2 --micro-batches 2" 2

pp=(--dp 2 --pp 2 --micro-batches 2 --zero 3)
expect_bitwise_resume "$work/ck" "${pp[*]}" "$weft" launch --nproc-per-node 4 -- weft "${args[@]}" "${pp[@]}"
rm -rf "$work/ck/step-000000020"
"$weft" "${args[@]}" --checkpoint-dir "$work/ck" --resume --save-model "$work/one.safetensors" | grep -q '"resumed_from":10'
echo "the same checkpoint resumed in one process: $("$compare" "$work/ck-full.safetensors" "$work/one.safetensors" 1e-5 | tail -n 1)"
echo ok
