#!/usr/bin/env bash
# usage: openai_sdk.sh WEFT
# The official OpenAI SDK for Node against weft serve's completions API (openai_sdk.mjs says
# what it checks), on one process and through the front end of 2 replicas.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
here=$(cd "$(dirname "$0")" && pwd)
sdk="$here/../../build-deps/npm/node_modules"
[ -d "$sdk/openai" ] || fail "no OpenAI SDK in build-deps/npm: run scripts/install-deps.sh"
new_work_dir
server=""
stop_server() { if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; server=""; fi; }
trap 'stop_server; rm -rf "$work"' EXIT
"$weft" train --model gpt --layers 2 --d-model 32 --heads 4 --context 128 --batch 8 --max-steps 5 --eval-every 5 \
  --eval-batches 1 --sample 0 --seed 3 --quiet --threads 1 --save-model "$work/gpt.safetensors" >/dev/null
for replicas in 1 2; do
  rm -f "$work/port"
  "$weft" serve "$work/gpt.safetensors" --port 0 --port-file "$work/port" --replicas "$replicas" > "$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
  [ -s "$work/port" ] || { cat "$work/serve.log"; fail "the server did not start"; }
  echo "--replicas $replicas:"
  node "$here/openai_sdk.mjs" "$sdk" "http://127.0.0.1:$(cat "$work/port")/v1" || { cat "$work/serve.log"; fail "the SDK's checks failed"; }
  stop_server
done
