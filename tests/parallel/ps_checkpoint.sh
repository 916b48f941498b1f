#!/usr/bin/env bash
# usage: ps_checkpoint.sh WEFT COMPARE
# Checkpoints with the parameter server (2 workers, 2 servers, AdamW): the servers send
# worker 0 their shards of the weights and the optimizer state where it saves. Stopped at
# step 20 and resumed to 40: bitwise equal to 40 steps in one go. A whole epoch with
# checkpoints every 20 steps: its last checkpoint holds the final model, and the run equals
# one without checkpoints.
set -euo pipefail
weft=$1
compare=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model mlp --batch 48 --limit-train 2400 --limit-test 200 --seed 5 --optimizer adamw --lr 0.001
        --strategy ps --servers 2 --quiet)
run() { "$weft" launch --nproc-per-node 4 -- weft "${common[@]}" "$@" >/dev/null; }
run --max-steps 40 --save-model "$work/full.safetensors"
run --max-steps 20 --checkpoint-dir "$work/ck" --checkpoint-every 10
run --max-steps 40 --checkpoint-dir "$work/ck" --resume --save-model "$work/resumed.safetensors"
cmp -s "$work/full.safetensors" "$work/resumed.safetensors" || { echo "FAIL: the resumed run differs"; exit 1; }
echo "stopped at step 20, resumed to 40: bitwise equal to 40 steps in one go"
run --epochs 1 --checkpoint-dir "$work/ck2" --checkpoint-every 20 --save-model "$work/epoch.safetensors"
ls "$work/ck2"
"$compare" "$work/ck2" "$work/epoch.safetensors" 0 | tail -n 1
run --epochs 1 --save-model "$work/plain.safetensors"
cmp -s "$work/epoch.safetensors" "$work/plain.safetensors" || { echo "FAIL: checkpoints changed the training"; exit 1; }
echo ok
