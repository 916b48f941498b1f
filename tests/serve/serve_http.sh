#!/usr/bin/env bash
# usage: serve_http.sh WEFT
# Inference as a user runs it: models saved by weft train (one process, a pipeline of 2
# stages, 2 tensor-parallel ranks) load in weft generate and weft predict; the key-value
# cache gives the tokens recomputing the window gives; weft serve answers the OpenAI
# completions API (also streamed, read with curl -N) with the text weft generate gives,
# requires its token, refuses bad requests with a 4xx and one line, answers 429 past its
# concurrency, frees the sequence of a client that goes away, classifies images sent as
# arrays or base64 as weft predict does, and stops on SIGTERM.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
client="python3 $(dirname "$0")/client.py"
new_work_dir
server=""
stop_server() { if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; server=""; fi; }
trap 'stop_server; rm -rf "$work"' EXIT
# weft serve on the GPT with these flags, its log in serve.log; sets server and port once listening.
start_gpt_server() {
  rm -f "$work/port"
  "$weft" serve "$work/gpt.safetensors" --port 0 --port-file "$work/port" "$@" > "$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
  port=$(cat "$work/port")
}

gpt=(train --model gpt --layers 2 --d-model 32 --heads 4 --context 32 --batch 8 --max-steps 30 --eval-every 30
     --eval-batches 1 --sample 0 --seed 3 --quiet --threads 1)
val=$("$weft" "${gpt[@]}" --save-model "$work/gpt.safetensors" | json_field val_loss)
"$weft" launch --nproc-per-node 2 -- weft "${gpt[@]}" --pp 2 --micro-batches 2 --save-model "$work/pp.safetensors" >/dev/null
"$weft" launch --nproc-per-node 2 -- weft "${gpt[@]}" --tp 2 --save-model "$work/tp.safetensors" >/dev/null

# Generation with the cache equals generation without it, past the context of 32 tokens.
for model in gpt pp tp; do
  for t in 0 0.9; do
    seed=(); [ "$t" = 0 ] || seed=(--seed 4)  # (greedy draws nothing: a seed is refused there)
    cached=$("$weft" generate "$work/$model.safetensors" --prompt "The cat" --max-tokens 60 --temperature "$t" "${seed[@]}" --json)
    window=$("$weft" generate "$work/$model.safetensors" --prompt "The cat" --max-tokens 60 --temperature "$t" "${seed[@]}" --json --no-cache)
    [ "$cached" = "$window" ] || { echo "FAIL: $model at temperature $t: the cache changed the tokens"; echo "$cached"; echo "$window"; exit 1; }
  done
  echo "$model: 60 tokens with the key-value cache = without it (greedy and sampled)"
done
# The pipeline and tensor-parallel models are the single-process model (trained alike).
a=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 20 --temperature 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
for model in pp tp; do
  b=$("$weft" generate "$work/$model.safetensors" --prompt "The cat" --max-tokens 20 --temperature 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
  [ "$a" = "$b" ] || { echo "FAIL: the $model-trained model generates other tokens: $b vs $a"; exit 1; }
done
echo "the pipeline- and tensor-parallel-trained models generate the single-process model's tokens"

# The validation loss through the decoder is training's (its 8 windows: --eval-batches 1 x
# --batch 8); int8 and bf16 weights take less memory and change it a little.
pred=$("$weft" predict "$work/gpt.safetensors" --windows 8 --json | json_field val_loss)
close_to "$pred" "$val" 1e-4 || { echo "FAIL: weft predict's validation loss $pred is not training's $val"; exit 1; }
echo "weft predict: validation loss $pred, training's $val"
# An image model's flags are refused for a language model, once it is loaded.
for flag in "--limit 5" "--batch 5" "--images $work/x.idx" "--data-dir $work"; do
  # shellcheck disable=SC2086
  expect_refusal "${flag%% *} does not apply to this run: it is for an image model, and the run has a language model (gpt)" \
    "$weft" predict "$work/gpt.safetensors" $flag
done
expect_refusal "--max-images does not apply to this run: it is for an image model, and the run has a language model (gpt)" \
  "$weft" serve "$work/gpt.safetensors" --port 0 --max-images 5
# Prompts in pieces are a key-value cache's: a recurrent model has none.
"$weft" train --model lstm --layers 1 --d-model 16 --context 16 --batch 4 --max-steps 1 --eval-every 1 --eval-batches 1 \
  --sample 0 --quiet --save-model "$work/lstm.safetensors" >/dev/null
expect_refusal "--max-prefill-tokens does not apply to this run: it is for a GPT's key-value cache, and the run has lstm (no cache)" \
  "$weft" serve "$work/lstm.safetensors" --port 0 --max-prefill-tokens 64
expect_refusal "--kv-cache-memory does not apply to this run: it is for a GPT's key-value cache, and the run has lstm (no cache)" \
  "$weft" serve "$work/lstm.safetensors" --port 0 --kv-cache-memory 1G
expect_refusal "--preemption does not apply to this run: it is for a GPT's key-value cache, and the run has lstm (no cache)" \
  "$weft" serve "$work/lstm.safetensors" --port 0 --preemption recompute
expect_refusal "--block-size 64: more positions than the model's context of 32 (a block holds at most the context, rounded up to 16)" \
  "$weft" serve "$work/gpt.safetensors" --port 0 --block-size 64
for q in bf16 int8; do
  "$weft" predict "$work/gpt.safetensors" --windows 8 --quantize "$q" --json > "$work/$q.json"
  python3 - "$work/$q.json" "$q" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert abs(r["val_loss"] - r["fp32_val_loss"]) < 0.02 * r["fp32_val_loss"], r
assert r["weight_bytes"] < (0.4 if sys.argv[2] == "int8" else 0.6) * r["fp32_weight_bytes"], r
print(f"{sys.argv[2]}: validation loss {r['val_loss']:.4f} (fp32 {r['fp32_val_loss']:.4f}), "
      f"{r['weight_bytes']} bytes of weights (fp32 {r['fp32_weight_bytes']})")
PY
done
int8=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 20 --temperature 0 --quantize int8 --json)
python3 -c 'import json, sys; r = json.loads(sys.argv[1]); assert len(r["tokens"]) == 20, r' "$int8"

# A word-level model from its checkpoint folder (the fortunes hold bytes that are not UTF-8:
# the recorded vocabulary must survive meta.json), and from a step folder.
"$weft" train --model gpt --layers 2 --d-model 32 --heads 4 --context 16 --batch 8 --max-steps 4 --eval-every 4 \
  --eval-batches 1 --sample 0 --quiet --threads 1 --tokenizer word --checkpoint-dir "$work/ck" --checkpoint-every 2 \
  --save-model "$work/words.safetensors" >/dev/null
a=$("$weft" generate "$work/ck" --prompt "the cat" --max-tokens 8 --temperature 0 --json)
b=$("$weft" generate "$work/words.safetensors" --prompt "the cat" --max-tokens 8 --temperature 0 --json)
[ "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"])' "$a")" = \
  "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"])' "$b")" ] ||
  { echo "FAIL: the newest checkpoint and the saved model generate differently"; echo "$a"; echo "$b"; exit 1; }
"$weft" predict "$work/ck/step-000000002" --windows 2 --json >/dev/null
echo "a word-level model loads from its checkpoints and its saved file alike"

# Stop sequences and UTF-8.
text=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 40 --temperature 1 --seed 2 --json)
python3 - "$text" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
r["text"].encode("utf-8")
assert r["finish_reason"] == "length" and len(r["tokens"]) == 40, r
PY
stop=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 40 --temperature 1 --seed 2 --json \
        --stop "$(python3 -c 'import json,sys; t=json.loads(sys.argv[1])["text"]; print(t[5:7])' "$text")")
python3 - "$text" "$stop" <<'PY'
import json, sys
full, cut = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert cut["finish_reason"] == "stop", cut
assert full["text"].startswith(cut["text"]) and full["text"][len(cut["text"]):].startswith(full["text"][5:7]), (full, cut)
print(f"a stop sequence ends the text before it: {cut['text']!r}")
PY

# weft serve: the completions API.
token=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
start_gpt_server --token "$token" --max-concurrency 2 --max-body 64K
grep -q "on http://127.0.0.1:$port" "$work/serve.log" || { echo "FAIL: not listening on loopback"; cat "$work/serve.log"; exit 1; }
# A language model's idle server starts a batch at once (--max-wait-ms unset).
grep -q "waiting up to 0 ms on" "$work/serve.log" || { echo "FAIL: a GPT's server waits for company"; cat "$work/serve.log"; exit 1; }
want=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 25 --temperature 0 --json |
       python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["text"]))')
got=$($client "$port" "$token" complete "The cat" 25)
[ "$got" = "$want" ] || { echo "FAIL: the server's completion $got differs from weft generate's $want"; exit 1; }
echo "POST /v1/completions: the text weft generate gives: $got"
curl -sN "http://127.0.0.1:$port/v1/completions" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"prompt": "The cat", "max_tokens": 25, "temperature": 0, "stream": true}' > "$work/stream.txt"
python3 - "$work/stream.txt" "$want" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n\n") if l.strip()]
assert lines[-1] == "data: [DONE]", lines[-1]
chunks = [json.loads(l[6:]) for l in lines[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks)
assert text == json.loads(sys.argv[2]), (text, sys.argv[2])
assert chunks[-1]["choices"][0]["finish_reason"] == "length"
assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
print(f"curl -N: {len(chunks)} server-sent events, the same text, then [DONE]")
PY
$client "$port" "$token" auth
$client "$port" "$token" bad-requests
$client "$port" "$token" busy
$client "$port" "$token" disconnect
curl -s "http://127.0.0.1:$port/metrics" -H "Authorization: Bearer $token" > "$work/metrics.txt"
for m in weft_requests_total weft_request_duration_seconds_bucket weft_time_to_first_token_seconds_bucket \
         weft_batch_size_bucket weft_generated_tokens_total weft_queue_depth weft_replicas; do
  grep -q "^$m" "$work/metrics.txt" || { echo "FAIL: /metrics lacks $m"; exit 1; }
done
grep -q 'weft_requests_total{endpoint="/v1/completions",code="429"} 1' "$work/metrics.txt" ||
  { echo "FAIL: the 429 is not counted"; grep requests_total "$work/metrics.txt"; exit 1; }
echo "/metrics: requests by code, latencies, batch sizes, tokens, queue depth, replicas"
kill -TERM "$server"
wait "$server" || { echo "FAIL: weft serve did not exit 0 on SIGTERM"; exit 1; }
server=""
grep -q "weft serve: stopped" "$work/serve.log"

# A key-value cache limit of two sequences (this GPT's context of 32 positions is one block of
# 32 x 512 bytes): six requests at once run two at a time, each with the text it gets alone. The
# idle server waits for all six (--max-batch 6, up to 10 s) so that how they arrive on a busy
# machine decides nothing.
expect_refusal "--kv-cache-memory 16.00 KiB: one sequence of the longest a request may make (--max-prompt-tokens and --max-tokens, at most the context) holds 16.00 KiB of key-value cache (32 positions, in whole blocks)" \
  "$weft" serve "$work/gpt.safetensors" --port 0 --kv-cache-memory 16383
start_gpt_server --kv-cache-memory 32K --max-batch 6 --max-wait-ms 10000
grep -q "key-value cache 0.5 KB a token (at most 32.00 KiB)" "$work/serve.log" || { echo "FAIL: no cache limit shown"; cat "$work/serve.log"; exit 1; }
$client "$port" - together 6 "The cat" 25 > "$work/limited.txt"
[ "$(grep -cxF -- "$want" "$work/limited.txt")" = 6 ] || { echo "FAIL: under the cache limit: $(cat "$work/limited.txt")"; exit 1; }
curl -s "http://127.0.0.1:$port/metrics" > "$work/metrics.txt"
python3 - "$work/metrics.txt" <<'PY'
import re, sys
m = dict(re.findall(r'^(weft_batch_size_(?:bucket\{kind="decode",le="\d+"\}|count\{kind="decode"\})) (\S+)', open(sys.argv[1]).read(), re.M))
one, two, steps = (float(m[k]) for k in ('weft_batch_size_bucket{kind="decode",le="1"}', 'weft_batch_size_bucket{kind="decode",le="2"}', 'weft_batch_size_count{kind="decode"}'))
assert two == steps and one < steps, m  # never above two sequences, and two at times
print(f"--kv-cache-memory 32K: {steps:.0f} steps of at most 2 sequences ({steps - one:.0f} of 2) for 6 requests at once")
PY
stop_server
# The same limit in blocks of 16 positions (4 of them) with preemption by recomputation: the
# requests join on the one block their prompt takes, 4 at once; growing past the limit, the
# last to come leave and come back, each still with the text it gets alone.
start_gpt_server --kv-cache-memory 32K --block-size 16 --preemption recompute --max-batch 6 --max-wait-ms 10000
grep -q "(at most 32.00 KiB), preemption by recomputation" "$work/serve.log" || { echo "FAIL: no preemption shown"; cat "$work/serve.log"; exit 1; }
$client "$port" - together 6 "The cat" 25 > "$work/preempted.txt"
[ "$(grep -cxF -- "$want" "$work/preempted.txt")" = 6 ] || { echo "FAIL: with preemption: $(cat "$work/preempted.txt")"; exit 1; }
curl -s "http://127.0.0.1:$port/metrics" > "$work/metrics.txt"
python3 - "$work/metrics.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = dict(re.findall(r'^(weft_batch_size_(?:bucket\{kind="decode",le="\d+"\}|count\{kind="decode"\})|weft_preemptions_total) (\S+)', text, re.M))
two, four, steps, preempted = (float(m[k]) for k in ('weft_batch_size_bucket{kind="decode",le="2"}', 'weft_batch_size_bucket{kind="decode",le="4"}',
                                                    'weft_batch_size_count{kind="decode"}', 'weft_preemptions_total'))
assert four == steps and two < steps and preempted >= 1, m  # at most 4 sequences, more than 2 at times, some preempted
print(f"--kv-cache-memory 32K --block-size 16 --preemption recompute: {steps:.0f} steps, {steps - two:.0f} of 3-4 sequences, {preempted:.0f} preemptions")
PY
stop_server

# Image models: weft predict gives training's test accuracy; the server classifies.
out=$("$weft" train --model mlp --epochs 1 --limit-train 2000 --limit-test 500 --seed 1 --quiet --threads 1 \
        --save-model "$work/mlp.safetensors")
acc=$(json_field test_accuracy <<<"$out")
pred=$("$weft" predict "$work/mlp.safetensors" --limit 500 --json | json_field test_accuracy)
[ "$acc" = "$pred" ] || { echo "FAIL: weft predict's accuracy $pred is not training's $acc"; exit 1; }
echo "weft predict: test accuracy $pred, as training measured it"
"$weft" serve "$work/mlp.safetensors" --port 0 --port-file "$work/port2" --max-batch 64 --max-wait-ms 20 > "$work/serve2.log" 2>&1 &
server=$!
for _ in $(seq 100); do [ -s "$work/port2" ] && break; sleep 0.1; done
grep -q "waiting up to 20 ms on" "$work/serve2.log" || { echo "FAIL: --max-wait-ms 20 not taken"; cat "$work/serve2.log"; exit 1; }
images=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
$client "$(cat "$work/port2")" - classify "$images" 5 > "$work/classified.txt"
cat "$work/classified.txt"
"$weft" predict "$work/mlp.safetensors" --images "$images" > "$work/offline-all.txt"
head -5 "$work/offline-all.txt" | awk '{print $1, $2}' > "$work/offline.txt"
head -5 "$work/classified.txt" | awk '{print $1, $2}' | cmp -s - "$work/offline.txt" ||
  { echo "FAIL: the server's labels differ from weft predict's"; cat "$work/offline.txt"; exit 1; }
echo "POST /v1/classify: weft predict's labels"
stop_server
