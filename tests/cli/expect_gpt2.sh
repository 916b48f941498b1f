#!/usr/bin/env bash
# GPT-2 models in the Hugging Face layout, checked against a reference written apart from
# weft (tests/cli/gpt2_reference.py: OpenAI's tokenizer algorithm and GPT-2's forward pass in
# PyTorch, float64): for a float32 folder, a bfloat16 one with "transformer." names and a
# tied lm_head, and a float16 one in 3 shards, weft generate (greedy, with and without the
# key-value cache) gives the reference's prompt token ids, completion tokens and text;
# weft serve's completions API gives the same text; 60 random texts tokenize as the
# reference does; a weft model file beside a config.json still loads as weft's; folders that
# are not GPT-2, or are broken, are refused in one line naming the problem; and weft train
# --init-from fine-tunes one (it starts from the folder's parameters and lowers the loss),
# one whose embedding is padded past its tokenizer too.
# usage: expect_gpt2.sh WEFT
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
export PATH=/usr/bin:/bin:$PATH  # Debian's python3, with torch and regex
weft=$1
here=$(cd "$(dirname "$0")" && pwd)
make_model="$here/../../examples/gpt2/make_tiny_gpt2.py"
reference="$here/gpt2_reference.py"
new_work_dir
server=""
stop_server() { if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; server=""; fi; }
trap 'stop_server; rm -rf "$work"' EXIT

python3 "$make_model" "$work/f32" --seed 1 >/dev/null
python3 "$make_model" "$work/bf16" --seed 2 --dtype BF16 --prefix >/dev/null
python3 "$make_model" "$work/f16" --seed 3 --dtype F16 --shards 3 >/dev/null

# same REFERENCE.json WEFT.json LABEL: the fields both have agree.
same() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
ref, got, label = json.load(open(sys.argv[1])), json.loads(open(sys.argv[2]).read().strip().splitlines()[-1]), sys.argv[3]
assert ref["min_margin"] > 1e-3, f"{label}: the reference's top two logits come within {ref['min_margin']}: pick another seed"
for key in ("prompt_token_ids", "tokens", "text"):
    assert ref[key] == got[key], f"{label}: {key} differs:\n reference {ref[key]!r}\n weft      {got[key]!r}"
print(f"{label}: {len(got['prompt_token_ids'])} prompt tokens, {len(got['tokens'])} generated, as the reference")
PY
}

prompt="Hello world, it's 3.14 naïve café — 日本  ok<|endoftext|>The"
# Every reference figure below, in one process (PyTorch loaded once).
python3 - "$work/texts.json" <<'PY'
import json, random, sys
random.seed(5)
pieces = ["a", "The", " cat", "'s", "'ll", "  ", "\n", "\n\n", "\t", "42", "3.5", "½", "ﬁ", "é", "ü", "—", "...", "!?",
          "日本語", "Καλη", "🙂", "<|endoftext|>", " ", "x", "don't", "$", "\u00a0", "\u2028", "IV", "ǅ"]
json.dump(["".join(random.choice(pieces) for _ in range(random.randint(0, 14))) for _ in range(60)], open(sys.argv[1], "w"))
PY
python3 - "$work" "$prompt" > "$work/jobs.json" <<'PY'
import json, sys
w, prompt = sys.argv[1], sys.argv[2]
jobs = [{"args": [f"{w}/{m}", prompt, "24"], "out": f"{w}/{m}.ref"} for m in ("f32", "bf16", "f16")]
jobs += [{"args": [f"{w}/bf16", "", "12"], "out": f"{w}/empty.ref"},
         {"args": [f"{w}/f32", "--encode", f"{w}/texts.json"], "out": f"{w}/ids.ref"},
         {"args": [f"{w}/f16", "The answer is", "10"], "out": f"{w}/serve.ref"}]
print(json.dumps(jobs))
PY
python3 "$reference" --jobs "$work/jobs.json"

for model in f32 bf16 f16; do
  "$weft" generate "$work/$model" --prompt "$prompt" --max-tokens 24 --temperature 0 --json > "$work/$model.out"
  same "$work/$model.ref" "$work/$model.out" "$model"
done
"$weft" generate "$work/f32/model.safetensors" --prompt "$prompt" --max-tokens 24 --temperature 0 --json --no-cache \
  > "$work/nocache.out"
same "$work/f32.ref" "$work/nocache.out" "f32, the file named, no key-value cache"
"$weft" generate "$work/bf16" --prompt "" --max-tokens 12 --temperature 0 --json > "$work/empty.out"
same "$work/empty.ref" "$work/empty.out" "bf16, an empty prompt (starts from <|endoftext|>)"

# Tokenization of random texts: letters, digits, marks, spaces, newlines, contractions, emoji.
python3 - "$weft" "$work/f32" "$work/texts.json" "$work/ids.ref" <<'PY'
import json, subprocess, sys
weft, model, texts, ref = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
for text, want in zip(texts, ref):
    out = subprocess.run([weft, "generate", model, "--prompt", text, "--max-tokens", "0", "--json"], check=True,
                         capture_output=True, text=True).stdout
    got = json.loads(out)["prompt_token_ids"]
    assert got == want, f"{text!r}:\n reference {want}\n weft      {got}"
print(f"{len(texts)} random texts tokenize as the reference does")
PY

# weft serve: the completions API on the folder.
rm -f "$work/port"
"$weft" serve "$work/f16" --port 0 --port-file "$work/port" > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { cat "$work/serve.log"; fail "weft serve did not start on the GPT-2 folder"; }
curl -sf "http://127.0.0.1:$(cat "$work/port")/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "f16", "prompt": "The answer is", "max_tokens": 10, "temperature": 0}' > "$work/serve.out" ||
  fail "the completions request failed"
python3 - "$work/serve.ref" "$work/serve.out" <<'PY'
import json, sys
ref, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
text = got["choices"][0]["text"]
assert text == ref["text"], f"served {text!r}, reference {ref['text']!r}"
assert got["usage"]["prompt_tokens"] == len(ref["prompt_token_ids"]), got["usage"]
print("weft serve: the completion is the reference's")
PY
stop_server

# A model weft trained, saved beside a config.json, is weft's (its metadata says so).
"$weft" train --model gpt --layers 1 --d-model 16 --heads 2 --context 16 --batch 4 --max-steps 2 --eval-every 2 \
  --eval-batches 1 --sample 0 --quiet --threads 1 --save-model "$work/f32/weft.safetensors" >/dev/null
"$weft" generate "$work/f32/weft.safetensors" --prompt "a" --max-tokens 4 --json | grep -q '"model":"weft"' ||
  fail "a weft model file beside config.json"
echo "a weft model file beside config.json loads as weft's"

# Refusals: one line, naming the problem, non-zero exit.
refuse() { refused_folder "$@"; }
broken() { broken_folder "$work/f32" "$1" "$2" && rm -f "$work/$1/weft.safetensors"; }  # (a copy of f32)
broken bert 'c["model_type"] = "bert"'
refuse "another model type" "a 'bert' model; weft imports gpt2, llama, mistral and qwen2 (model_type)" "$work/bert"
broken relu 'c["activation_function"] = "relu"'
refuse "another activation" "activation_function 'relu'" "$work/relu"
broken deeper 'c["n_layer"] = 3'
refuse "a missing tensor" "no tensor 'h.2.ln_1.weight'" "$work/deeper"
broken wider 'c["n_embd"] = 64'
refuse "another width" "'wte.weight' is [557, 48], expected [557, 64]" "$work/wider"
broken heads 'c["n_head"] = 5'
refuse "heads that do not divide" "n_embd 48 is not divisible by n_head 5" "$work/heads"
broken pickle 'os.rename(os.path.join(d, "model.safetensors"), os.path.join(d, "pytorch_model.bin"))'
refuse "a pickle" "holds pytorch_model.bin" "$work/pickle"
broken notokenizer 'os.remove(os.path.join(d, "merges.txt"))'
refuse "no tokenizer" "no tokenizer (vocab.json and merges.txt, tokenizer.json, or tokenizer.model)" "$work/notokenizer"
broken badjson 'open(os.path.join(d, "vocab.json"), "w").write("{")'
refuse "a broken vocab.json" "vocab.json is not valid JSON" "$work/badjson"
broken truncated 'open(os.path.join(d, "model.safetensors"), "r+b").truncate(1000)'
refuse "a truncated file" "model.safetensors" "$work/truncated"
broken shard 'open(os.path.join(d, "model.safetensors.index.json"), "w").write(json.dumps({"weight_map": {"wte.weight": "../x"}})); os.remove(os.path.join(d, "model.safetensors"))'
refuse "a shard outside the folder" "'../x' is not a file name in the model's folder" "$work/shard"

# Fine-tuning: weft train --init-from starts from the folder's parameters and tokenizer. With
# a negligible learning rate the saved model (weft's format, the GPT-2 tokenizer inside)
# still generates the reference's tokens; 40 steps at the default rate lower the
# validation loss below the imported model's.
ft=(--model gpt --init-from "$work/f32" --context 32 --batch 8 --sample 0 --quiet --threads 1)
"$weft" train "${ft[@]}" --lr 1e-12 --max-steps 1 --eval-every 1 --eval-batches 4 --save-model "$work/start.safetensors" \
  > "$work/start.out"
"$weft" generate "$work/start.safetensors" --prompt "$prompt" --max-tokens 24 --temperature 0 --json > "$work/start.gen"
same "$work/f32.ref" "$work/start.gen" "fine-tuned at lr 1e-12, saved by weft"
"$weft" train "${ft[@]}" --max-steps 40 --eval-every 40 --eval-batches 4 > "$work/tuned.out"
python3 - "$work/start.out" "$work/tuned.out" <<'PY'
import json, sys
start, tuned = (json.loads(open(f).read().strip().splitlines()[-1])["val_loss"] for f in sys.argv[1:3])
assert tuned < start - 0.1, f"validation loss {start:.3f} -> {tuned:.3f} after 40 steps"
print(f"fine-tuning: validation loss {start:.3f} (imported) -> {tuned:.3f} after 40 steps")
PY
# A folder whose embedding has more rows than its tokenizer has tokens (padded, as Qwen 2's
# are) fine-tunes (its loss over all the rows) and the saved model generates.
python3 "$make_model" "$work/padded" --seed 4 --model-vocab 600 >/dev/null
"$weft" train --model gpt --init-from "$work/padded" --context 32 --batch 8 --sample 8 --quiet --threads 1 --max-steps 3 \
  --eval-every 3 --eval-batches 2 --save-model "$work/padded.safetensors" > "$work/padded.out"
grep -q '"val_loss"' "$work/padded.out" || fail "fine-tuning the padded folder: $(cat "$work/padded.out")"
"$weft" generate "$work/padded.safetensors" --prompt "$prompt" --max-tokens 8 --temperature 0 --json > "$work/padded.gen"
grep -q '"completion_tokens":8' "$work/padded.gen" || fail "the fine-tuned padded model did not generate: $(cat "$work/padded.gen")"
echo "a folder with 600 embedding rows for 557 tokens fine-tunes, and the saved model generates"
for args in "--context 32 --d-model 64|--d-model excludes --init-from" \
            "--context 32 --tokenizer bpe|--tokenizer excludes --init-from" \
            "--context 65|--context 65 exceeds the 64 positions of"; do
  # (${args%%|*} is split into words on purpose)
  if out=$("$weft" train --model gpt --init-from "$work/f32" ${args%%|*} --max-steps 1 --sample 0 2>&1); then
    fail "train ${args%%|*}: no error"
  fi
  grep -qF -- "${args#*|}" <<<"$out" || fail "train ${args%%|*}: $out"
done
if out=$("$weft" train --init-from "$work/f32" --max-steps 1 2>&1); then fail "--init-from without --model gpt"; fi
grep -qF -- "--init-from does not apply to this run: it is for --model gpt or llama" <<<"$out" || fail "--init-from without --model gpt: $out"
echo "fine-tuning refuses the flags the folder decides, and a window beyond its positions"
