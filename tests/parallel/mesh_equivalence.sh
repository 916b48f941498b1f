#!/usr/bin/env bash
# usage: mesh_equivalence.sh WEFT COMPARE
# A 2 x 2 x 2 mesh (data 2 x pipeline 2 x tensor 2, 8 ranks under weft launch), also with
# activation recomputation, and data parallelism alone (2 ranks) train the GPT 20 steps to
# the parameters and loss of one process within a relative 1e-5. The traces show the mesh's groups: tensor parallelism
# between neighbouring ranks (0-1), the pipeline between ranks tp apart (0-2), data
# parallelism between ranks tp x pp apart (0-4).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
common=(train --model gpt --layers 4 --d-model 32 --heads 4 --context 16 --batch 8 --max-steps 20 --eval-every 20
        --eval-batches 1 --sample 0 --seed 3 --optimizer sgd --lr 0.05 --quiet --threads 1)
one=$("$weft" "${common[@]}" --save-model "$work/one.safetensors" | json_field train_loss)
run() {  # ranks label flags...
  local n=$1 label=$2
  shift 2
  out=$("$weft" launch --nproc-per-node "$n" -- weft "${common[@]}" "$@" --save-model "$work/mesh.safetensors")
  expect_same_run "$label" "$work/one.safetensors" "$work/mesh.safetensors" "$one" "$(rank0_field train_loss <<<"$out")"
}
run 2 "data parallel 2" --dp 2
run 8 "mesh dp 2 x pp 2 x tp 2" --dp 2 --pp 2 --tp 2 --micro-batches 2
run 8 "mesh dp 2 x pp 2 x tp 2, recomputing activations" --dp 2 --pp 2 --tp 2 --micro-batches 2 --recompute

WEFT_TRACE="$work/trace" "$weft" launch --nproc-per-node 8 -- weft train --model gpt --layers 4 --d-model 32 --heads 4 \
  --context 16 --batch 8 --max-steps 1 --eval-every 1 --eval-batches 1 --sample 0 --quiet --threads 1 \
  --dp 2 --pp 2 --tp 2 --micro-batches 2 >/dev/null
python3 - "$work/trace" <<'PY'
import json, sys
groups, peers = set(), set()
for line in open(f"{sys.argv[1]}/rank-0.jsonl"):
    rec = json.loads(line)
    if rec["op"] == "mark":  # a step's start (docs/trace-format.md)
        continue
    if rec["op"] in ("send", "recv"):
        peers.update(rec["peers"] if isinstance(rec["peers"], list) else [rec["peers"]])
    else:
        groups.add(tuple(rec["group_ranks"]))
assert peers == {2}, peers                  # the next pipeline stage: tp ranks further
assert (0, 1) in groups, groups              # tensor parallelism
assert (0, 4) in groups, groups              # data parallelism: the same stage and slice in the other replica
assert (0, 2) in groups, groups              # the tied embedding between the first and last stage
assert (0, 1, 2, 3) in groups, groups        # one model copy: the gradient norm
print("traces: rank 0 talks to 1 (tensor), 2 (pipeline, tied embedding), 4 (data), 0-3 (model norm)")
PY
echo ok
