#!/usr/bin/env bash
# Llama-family models in the Hugging Face layout, checked against a reference written apart
# from weft (tests/cli/llama_reference.py: the forward passes of Hugging Face's Llama, Mistral
# and Qwen 2 in PyTorch, float64; the byte-level BPE of tests/cli/gpt2_reference.py). Three
# tiny random folders (examples/llama/make_tiny_llama.py):
#   llama    float32, 4 heads over 2 key-value heads, an untied head, rope_theta 500000 with
#            Llama 3.1's rope_scaling (past its original context of 16)
#   qwen2    bfloat16 in 2 shards, biases on Q, K and V, a tied head
#   mistral  float16 in 3 shards, a sliding window of 6 keys
#   llama3   as llama, with a tokenizer.json made as Llama 3's is (its Split pattern before
#            ByteLevel, ignore_merges, special tokens) and Llama 3's chat template; 60 random
#            texts tokenize as the reference does; a conversation's prompt is Jinja's, and
#            weft generate --chat and /v1/chat/completions (whole, streamed) give the
#            reference's tokens for it
# For each, weft generate (greedy; 40 tokens, past the window and the original context) gives
# the reference's prompt ids and tokens, and every step's logits within 1e-5 of the largest
# (float32 against float64): with the key-value cache, without it, over 2 tensor-parallel
# ranks and over 2 pipeline stages; with int8 weights, the first step's logits within 8% of the
# largest (measured 1.2% to 5.8% on a VNNI machine, where the activations are quantized too).
# weft serve gives the reference's completion, and so do --tp 2 and --pp 2 servers under
# weft launch. Folders the import does not compute are refused in one line; weft train
# --model llama --init-from fine-tunes one.
# usage: expect_llama.sh WEFT
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
export PATH=/usr/bin:/bin:$PATH  # Debian's python3, with torch and regex
weft=$1
here=$(cd "$(dirname "$0")" && pwd)
make_model="$here/../../examples/llama/make_tiny_llama.py"
reference="$here/llama_reference.py"
new_work_dir
server=""
stop_server() { if [ -n "$server" ]; then kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; server=""; fi; }
trap 'stop_server; rm -rf "$work"' EXIT

python3 "$make_model" "$work/llama" --family llama --seed 3 >/dev/null
python3 "$make_model" "$work/qwen2" --family qwen2 --seed 4 --dtype BF16 --shards 2 >/dev/null
python3 "$make_model" "$work/mistral" --family mistral --seed 5 --dtype F16 --shards 3 >/dev/null
python3 "$make_model" "$work/llama3" --family llama --seed 6 --tokenizer llama3 >/dev/null
prompt="The cat sat on the mat, and then"
python3 - "$work/texts.json" <<'PY'
import json, random, sys
random.seed(7)
pieces = ["a", "The", " cat", "'s", "'LL", "  ", "\n", "\r\n", "\t", "42", "12345", "3.5", "½", "é", "ü", "—", "...", "!?",
          "日本語", "🙂", "<|eot_id|>", "<|begin_of_text|>", " ", "x", "don't", "$", "\u00a0", "IV"]
json.dump(["".join(random.choice(pieces) for _ in range(random.randint(0, 14))) for _ in range(60)], open(sys.argv[1], "w"))
PY
# Chat: the llama3 folder's tokenizer_config.json holds Llama 3's chat template. Jinja itself
# (Debian's python3-jinja2, as transformers' apply_chat_template sets it up) renders the
# conversation, which the reference runs with the others below.
python3 - "$work/llama3" > "$work/chat_prompt.txt" <<'PY'
import json, os, sys, jinja2
c = json.load(open(os.path.join(sys.argv[1], "tokenizer_config.json")))
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  What is a cat?  "}]
sys.stdout.write(env.from_string(c["chat_template"]).render(messages=messages, add_generation_prompt=True,
                                                            bos_token=c["bos_token"], eos_token=c["eos_token"]))
PY
# The reference's figures, in one process (PyTorch loaded once), while weft tokenizes below.
python3 - "$work" "$prompt" > "$work/jobs.json" <<'PY'
import json, sys
w, prompt = sys.argv[1], sys.argv[2]
jobs = [{"args": [f"{w}/{m}", prompt, "40"], "out": f"{w}/{m}.ref"} for m in ("llama", "qwen2", "mistral", "llama3")]
jobs.append({"args": [f"{w}/llama3", "--encode", f"{w}/texts.json"], "out": f"{w}/ids.ref"})
jobs.append({"args": [f"{w}/llama3", "--prompt-file", f"{w}/chat_prompt.txt", "24"], "out": f"{w}/chat.ref"})
print(json.dumps(jobs))
PY
python3 "$reference" --jobs "$work/jobs.json" &
reference_jobs=$!

# same REFERENCE WEFT.json LOGITS TOLERANCE LABEL: prompt ids and tokens equal (skipped when
# TOLERANCE is above 1e-5: rounded weights may pick another token where two are close); each
# step's logits within TOLERANCE x the largest reference logit.
same() {
  python3 - "$@" <<'PY'
import array, json, sys
ref_path, got_path, logits_path, tol, label = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
ref = json.load(open(ref_path))
got = json.loads(open(got_path).read().strip().splitlines()[-1].removeprefix("[0] "))
assert ref["min_margin"] > 1e-3, f"{label}: the reference's top two logits come within {ref['min_margin']}: pick another seed"
assert got["prompt_token_ids"] == ref["prompt_token_ids"], f"{label}: prompt ids differ"
exact = tol <= 1e-5
if exact:
    assert got["tokens"] == ref["tokens"], f"{label}: tokens differ:\n reference {ref['tokens']}\n weft      {got['tokens']}"
a = array.array("f")
a.frombytes(open(logits_path, "rb").read())
V = len(ref["logits"][0])
steps = len(a) // V if exact else 1  # (rounded weights: the first step only, the same prompt)
assert len(a) == V * len(got["tokens"]) and steps >= 1, (len(a), V)
largest = max(abs(v) for row in ref["logits"][:steps] for v in row)
diff = max(abs(a[s * V + j] - v) for s in range(steps) for j, v in enumerate(ref["logits"][s]))
assert diff <= tol * largest, f"{label}: logits off by {diff:.3g} (largest {largest:.3g}, allowed {tol * largest:.3g})"
print(f"{label}: {len(got['tokens'])} tokens{' as the reference' if exact else ''}, logits within {diff / largest:.1e} of the largest")
PY
}
python3 - "$weft" "$work/llama3" "$work/texts.json" > "$work/ids.weft" <<'PY'
import json, subprocess, sys
weft, model, texts = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
ids = []
for text in texts:
    out = subprocess.run([weft, "generate", model, "--prompt", text, "--max-tokens", "0", "--json"], check=True,
                         capture_output=True, text=True).stdout
    ids.append(json.loads(out)["prompt_token_ids"])
print(json.dumps(ids))
PY
wait "$reference_jobs"
python3 - "$work/texts.json" "$work/ids.ref" "$work/ids.weft" <<'PY'
import json, sys
texts, ref, got = (json.load(open(f)) for f in sys.argv[1:4])
for text, want, have in zip(texts, ref, got):
    assert have == want, f"{text!r}:\n reference {want}\n weft      {have}"
print(f"llama3 tokenizer: {len(texts)} random texts tokenize as the reference does")
PY
for model in llama qwen2 mistral llama3; do
  gen=(generate "$work/$model" --prompt "$prompt" --max-tokens 40 --temperature 0 --json)
  "$weft" "${gen[@]}" --logits "$work/a.logits" > "$work/a.out"
  same "$work/$model.ref" "$work/a.out" "$work/a.logits" 1e-5 "$model"
  "$weft" "${gen[@]}" --no-cache --logits "$work/a.logits" > "$work/a.out"
  same "$work/$model.ref" "$work/a.out" "$work/a.logits" 1e-5 "$model, no key-value cache"
  for layout in "--tp 2" "--pp 2"; do
    read -r -a flags <<<"$layout"
    "$weft" launch --nproc-per-node 2 -- weft "${gen[@]}" "${flags[@]}" --logits "$work/a.logits" | grep '^\[0\] {' > "$work/a.out"
    same "$work/$model.ref" "$work/a.out" "$work/a.logits" 1e-5 "$model, $layout"
  done
  "$weft" "${gen[@]}" --quantize int8 --logits "$work/a.logits" > "$work/a.out"
  same "$work/$model.ref" "$work/a.out" "$work/a.logits" 8e-2 "$model, int8 weights"
done

# weft serve: one process, then 2 tensor-parallel ranks and 2 pipeline stages under weft launch.
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"])' "$work/mistral.ref")
for layout in "" "--tp 2" "--pp 2"; do
  read -r -a flags <<<"$layout"
  rm -f "$work/port"
  if [ -z "$layout" ]; then
    "$weft" serve "$work/mistral" --port 0 --port-file "$work/port" > "$work/serve.log" 2>&1 &
  else
    "$weft" launch --nproc-per-node 2 -- weft serve "$work/mistral" "${flags[@]}" --port 0 --port-file "$work/port" \
      > "$work/serve.log" 2>&1 &
  fi
  server=$!
  for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
  [ -s "$work/port" ] || { cat "$work/serve.log"; fail "weft serve $layout did not start on the Mistral folder"; }
  text=$(curl -sf "http://127.0.0.1:$(cat "$work/port")/v1/completions" -H 'Content-Type: application/json' \
           -d "$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 40, "temperature": 0}))' "$prompt")" |
         python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])') || fail "the completions request failed ($layout)"
  [ "$text" = "$want" ] || fail "weft serve $layout completes '$text', the reference '$want'"
  stop_server
  echo "weft serve ${layout:-(one process)}: the reference's completion"
done

# Chat (its prompt rendered, and its reference run, with the other references above): weft
# generate --chat gives Jinja's prompt and the reference's tokens for it; weft serve's
# /v1/chat/completions (whole and streamed) gives the reference's text.
"$weft" generate "$work/llama3" --chat --system "Be brief." --prompt "  What is a cat?  " --max-tokens 24 --temperature 0 \
  --json --logits "$work/a.logits" > "$work/chat.out"
python3 - "$work/chat_prompt.txt" "$work/chat.out" <<'PY'
import json, sys
want, got = open(sys.argv[1]).read(), json.loads(open(sys.argv[2]).read())["prompt"]
assert got == want, f"weft's chat prompt:\n{got!r}\nJinja's:\n{want!r}"
print(f"chat template: weft renders Jinja's prompt ({len(want)} characters)")
PY
same "$work/chat.ref" "$work/chat.out" "$work/a.logits" 1e-5 "llama3, --chat"
rm -f "$work/port"
"$weft" serve "$work/llama3" --port 0 --port-file "$work/port" > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { cat "$work/serve.log"; fail "weft serve did not start on the llama3 folder"; }
chat_body='{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  What is a cat?  "}], "max_tokens": 24, "temperature": 0'
curl -sf "http://127.0.0.1:$(cat "$work/port")/v1/chat/completions" -d "$chat_body}" > "$work/chat.json" ||
  fail "the chat completions request failed"
curl -sfN "http://127.0.0.1:$(cat "$work/port")/v1/chat/completions" -d "$chat_body, \"stream\": true}" > "$work/chat.sse" ||
  fail "the streamed chat completions request failed"
# The official OpenAI SDK for Node (installed by scripts/install-deps.sh), as users' programs call it.
sdk="$here/../../build-deps/npm/node_modules"
[ -d "$sdk/openai" ] || fail "no OpenAI SDK in build-deps/npm: run scripts/install-deps.sh"
python3 -c 'import json; print(json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  What is a cat?  "}]))' \
  > "$work/messages.json"
node "$here/../serve/openai_chat.mjs" "$sdk" "http://127.0.0.1:$(cat "$work/port")/v1" "$work/messages.json" 24 \
  > "$work/sdk.json" || fail "the OpenAI SDK's chat requests failed"
stop_server
python3 - "$work/chat.ref" "$work/sdk.json" <<'PY'
import json, sys
ref, sdk = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert sdk["whole"] == ref["text"] and sdk["streamed"] == ref["text"], (sdk, ref["text"])
print(f"OpenAI SDK (Node): chat.completions.create gives the reference's text, whole and in {sdk['chunks']} streamed chunks")
PY
python3 - "$work/chat.ref" "$work/chat.json" "$work/chat.sse" <<'PY'
import json, sys
ref, whole = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert whole["object"] == "chat.completion", whole
message = whole["choices"][0]["message"]
assert message["role"] == "assistant" and message["content"] == ref["text"], (message, ref["text"])
events = [l[6:] for l in open(sys.argv[3]).read().split("\n\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-1]
chunks = [json.loads(e) for e in events[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
assert text == ref["text"], (text, ref["text"])
assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
print(f"weft serve /v1/chat/completions: the reference's text, whole and in {len(chunks)} streamed chunks")
PY
# A folder without a chat template of its own chats in ChatML.
chatml=$("$weft" generate "$work/llama" --chat --prompt "Hi" --max-tokens 2 --temperature 0 --json)
python3 -c 'import json, sys; r = json.loads(sys.argv[1]); assert r["prompt"] == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", r' "$chatml" ||
  fail "a folder without a chat template did not get ChatML: $chatml"

# Refusals: one line, naming the problem, non-zero exit.
refuse() { refused_folder "$@"; }
broken() { broken_folder "$work/llama" "$1" "$2"; }  # (a copy of the llama folder)
broken gelu 'c["hidden_act"] = "gelu"'
refuse "another activation" "hidden_act 'gelu'" "$work/gelu"
broken yarn 'c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}'
refuse "another rope scaling" "rope_scaling 'yarn' is not supported" "$work/yarn"
broken groups 'c["num_key_value_heads"] = 3'
refuse "key-value heads that do not group" "num_attention_heads 4 is not a multiple of num_key_value_heads 3" "$work/groups"
broken headdim 'c["head_dim"] = 16'
refuse "another head size" "head_dim must be hidden_size / num_attention_heads" "$work/headdim"
broken biased 'c["attention_bias"] = True'
refuse "attention biases" "attention_bias true is not supported" "$work/biased"
broken tied 'c["tie_word_embeddings"] = True'
refuse "a head the file does not tie" "lm_head.weight differs from embed_tokens.weight" "$work/tied"
broken narrow 'c["intermediate_size"] = 96'
refuse "another MLP width" "'model.layers.0.mlp.gate_proj.weight' is [128, 48], expected [96, 48]" "$work/narrow"

# Fine-tuning: --model llama --init-from starts from the folder (at a negligible learning
# rate the saved model still generates the reference's tokens); --model gpt is refused.
ft=(--model llama --init-from "$work/llama" --context 32 --batch 8 --sample 0 --quiet --threads 1)
"$weft" train "${ft[@]}" --lr 1e-12 --max-steps 1 --eval-every 1 --eval-batches 2 --save-model "$work/start.safetensors" >/dev/null
"$weft" generate "$work/start.safetensors" --prompt "$prompt" --max-tokens 40 --temperature 0 --json --logits "$work/a.logits" \
  > "$work/a.out"
same "$work/llama.ref" "$work/a.out" "$work/a.logits" 1e-5 "llama fine-tuned at lr 1e-12, saved by weft"
expect_refusal "holds a Llama-family model: use --model llama" "$weft" train --model gpt --init-from "$work/llama" --max-steps 1
echo ok
