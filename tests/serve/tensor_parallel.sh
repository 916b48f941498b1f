#!/usr/bin/env bash
# usage: tensor_parallel.sh WEFT
# Tensor-parallel inference equals one process: a GPT split over 2 and 4 ranks (each holding
# its heads, its slice of the MLP and the cache of its heads) scores the validation windows
# with the single-process loss (relative 1e-6: every position's logits through both), and
# generates the same greedy tokens; served over HTTP by weft launch --nproc-per-node 2 --
# weft serve --tp 2, it answers with those tokens under concurrent load, and every rank stops
# when the server is told to.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
new_work_dir
launcher=""
trap '[ -n "$launcher" ] && kill "$launcher" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
"$weft" train --model gpt --layers 2 --d-model 32 --heads 4 --context 32 --batch 8 --max-steps 20 --eval-every 20 \
  --eval-batches 1 --sample 0 --seed 5 --quiet --threads 1 --save-model "$work/gpt.safetensors" >/dev/null

one=$("$weft" predict "$work/gpt.safetensors" --windows 8 --json | json_field val_loss)
tokens=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 50 --temperature 0 --json |
         python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
for tp in 2 4; do
  loss=$("$weft" launch --nproc-per-node "$tp" -- weft predict "$work/gpt.safetensors" --windows 8 --json --tp "$tp" |
         rank0_field val_loss)
  close_to "$loss" "$one" 1e-6 || { echo "FAIL: tp $tp validation loss $loss, one process $one"; exit 1; }
  got=$("$weft" launch --nproc-per-node "$tp" -- weft generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 50 \
          --temperature 0 --json --tp "$tp" | grep '^\[0\] {' | sed 's/^\[0\] //' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
  [ "$got" = "$tokens" ] || { echo "FAIL: tp $tp generates $got, one process $tokens"; exit 1; }
  echo "tp $tp: validation loss $loss (one process $one), the same 50 greedy tokens"
done

"$weft" launch --nproc-per-node 2 -- weft serve "$work/gpt.safetensors" --tp 2 --port 0 --port-file "$work/port" \
  > "$work/serve.log" 2>&1 &
launcher=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")
text=$(curl -s "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "The cat", "max_tokens": 50, "temperature": 0}' |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
want=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 50 --temperature 0 --json |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])')
[ "$text" = "$want" ] || { echo "FAIL: the tp 2 server completes '$text', one process '$want'"; exit 1; }
"$weft" serve-bench --url "http://127.0.0.1:$port" --concurrency 8 --requests 64 --max-tokens 40 | head -1
kill -TERM "$launcher"
rc=0
wait "$launcher" || rc=$?
launcher=""
# weft launch passes the signal on and exits as torchrun does (128 + SIGTERM).
[ "$rc" = 0 ] || [ "$rc" = 143 ] || { echo "FAIL: weft launch exited with $rc"; cat "$work/serve.log"; exit 1; }
grep -q '^\[0\] weft serve: stopped' "$work/serve.log" || { echo "FAIL: rank 0 did not stop"; cat "$work/serve.log"; exit 1; }
! grep -q 'error' "$work/serve.log" || { echo "FAIL: a rank reported an error"; cat "$work/serve.log"; exit 1; }
[ -z "$(pgrep -f "$work/gpt.safetensors" || true)" ] || { echo "FAIL: ranks left running"; exit 1; }
echo "weft serve --tp 2: rank 0's completions equal one process's; both ranks stopped on SIGTERM"
