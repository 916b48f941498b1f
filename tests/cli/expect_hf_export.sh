#!/usr/bin/env bash
# weft export --format hf: models weft trained, written as Hugging Face folders, checked
# against the reference written apart from weft (tests/cli/llama_reference.py, PyTorch float64).
#   - A Llama trained on 4 ranks (dp 2 x tp 2, ZeRO-1) on a text file exports to a folder
#     (config.json, model.safetensors, tokenizer.json) that the reference loads, tokenizes the
#     text with and scores with the validation loss training reported (relative 1e-5); weft
#     predict on the folder reports it too, and weft generate gives the same tokens from the
#     folder as from weft's own file.
#   - weft train --model-config takes the exported config.json as a new run's shape.
#   - A GPT-2-shaped GPT exports in bfloat16; the reference generates from the folder the
#     tokens weft generates from it.
#   - A GPT on a SentencePiece tokenizer exports with its tokenizer.model, and the folder
#     generates the weft file's tokens.
#   - What has no Hugging Face form is refused in one line before anything is written: a
#     post-LN GPT, a recurrent model, another format, a folder that is not empty.
# usage: expect_hf_export.sh WEFT
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
export PATH=/usr/bin:/bin:$PATH  # Debian's python3, with torch and regex
weft=$1
reference="$(cd "$(dirname "$0")" && pwd)/llama_reference.py"
new_work_dir
python3 - "$work/corpus.txt" <<'PY'
import sys
text = open("/usr/share/games/fortunes/fortunes", "rb").read()[:150000].decode("utf-8", errors="ignore")
open(sys.argv[1], "w", encoding="utf-8").write(text)
PY
common=(--context 32 --batch 8 --eval-batches 2 --sample 0 --seed 4 --quiet --threads 1 --data "$work/corpus.txt")

# A Llama on 4 ranks, exported; scored by the reference on the validation windows of training.
out=$("$weft" launch --nproc-per-node 4 -- weft train --model llama --layers 2 --d-model 32 --heads 4 --kv-heads 2 \
        "${common[@]}" --max-steps 30 --eval-every 30 --dp 2 --tp 2 --zero 1 --save-model "$work/llama.safetensors")
trained=$(rank0_field val_loss <<<"$out")
"$weft" export "$work/llama.safetensors" --format hf --out "$work/llama-hf" > "$work/export.txt"
cat "$work/export.txt"
for f in config.json model.safetensors tokenizer.json; do [ -s "$work/llama-hf/$f" ] || fail "no $f in the folder"; done
scored=$(python3 "$reference" "$work/llama-hf" --score "$work/corpus.txt" 32 16 | json_value loss)
close_to "$scored" "$trained" 1e-5 || fail "the reference scores the exported Llama $scored, training reported $trained"
predicted=$("$weft" predict "$work/llama-hf" --data "$work/corpus.txt" --windows 16 --json | json_field val_loss)
close_to "$predicted" "$trained" 1e-5 || fail "weft predict on the folder: $predicted, training reported $trained"
echo "llama (dp 2 x tp 2, ZeRO-1): validation loss $trained in training, $scored by the reference, $predicted by weft predict on the folder"
same_generation "$work/llama.safetensors" "$work/llama-hf" "llama: the folder and the weft file" 40

# --model-config: the folder's config.json as the shape of a new run (the same parameters).
fresh=$("$weft" train --model llama --model-config "$work/llama-hf/config.json" "${common[@]}" --max-steps 1 --eval-every 1 |
        json_field parameters)
first=$(grep -o '"parameters":[0-9]*' <<<"$out" | head -n 1 | cut -d: -f2)
[ "$fresh" = "$first" ] || fail "--model-config built $fresh parameters, the exported model has $first"
expect_refusal "describes a Llama-family model: use --model llama" "$weft" train --model gpt --model-config \
  "$work/llama-hf/config.json" --max-steps 1
echo "--model-config: a new run of the exported config.json's shape ($fresh parameters)"

# A GPT-2-shaped GPT in bfloat16: the reference generates what weft generates from the folder.
"$weft" train --model gpt --layers 2 --d-model 32 --heads 4 "${common[@]}" --max-steps 30 --eval-every 30 \
  --save-model "$work/gpt.safetensors" >/dev/null
"$weft" export "$work/gpt.safetensors" --format hf --out "$work/gpt-hf" --dtype bf16 >/dev/null
grep -q '"model_type": "gpt2"' "$work/gpt-hf/config.json" || fail "the GPT's folder is not model_type gpt2"
python3 "$reference" "$work/gpt-hf" "The meaning of" 30 > "$work/gpt.ref"
"$weft" generate "$work/gpt-hf" --prompt "The meaning of" --max-tokens 30 --temperature 0 --json > "$work/gpt.out"
python3 - "$work/gpt.ref" "$work/gpt.out" <<'PY'
import json, sys
ref, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert ref["min_margin"] > 1e-3, f"the reference's top two logits come within {ref['min_margin']}: pick another seed"
for key in ("prompt_token_ids", "tokens", "text"):
    assert ref[key] == got[key], f"gpt2 bf16: {key} differs:\n reference {ref[key]!r}\n weft      {got[key]!r}"
print(f"gpt (bf16 folder): the reference generates weft's {len(got['tokens'])} tokens")
PY

# Refusals.
"$weft" train --model gpt --post-ln --layers 1 --d-model 16 --heads 2 "${common[@]}" --max-steps 1 --eval-every 1 \
  --save-model "$work/post.safetensors" >/dev/null
"$weft" train --model lstm --layers 1 --d-model 16 "${common[@]}" --max-steps 1 --eval-every 1 \
  --save-model "$work/lstm.safetensors" >/dev/null
"$weft" train --model gpt --tokenizer bpe --vocab-size 400 --layers 1 --d-model 16 --heads 2 "${common[@]}" --max-steps 1 \
  --eval-every 1 --save-model "$work/bpe.safetensors" >/dev/null
"$weft" export "$work/bpe.safetensors" --format hf --out "$work/bpe-hf" >/dev/null
[ -s "$work/bpe-hf/tokenizer.model" ] || fail "the SentencePiece model's folder has no tokenizer.model"
same_generation "$work/bpe.safetensors" "$work/bpe-hf" "SentencePiece: the folder (tokenizer.model) and the weft file" 20
expect_refusal "post-LN blocks has no Hugging Face form" "$weft" export "$work/post.safetensors" --format hf --out "$work/a"
expect_refusal "only transformers (gpt, llama) export" "$weft" export "$work/lstm.safetensors" --format hf --out "$work/b"
expect_refusal "format 'onnx' is not hf" "$weft" export "$work/gpt.safetensors" --format onnx --out "$work/c"
expect_refusal "exists and is not an empty folder" "$weft" export "$work/gpt.safetensors" --format hf --out "$work/llama-hf"
[ ! -e "$work/a" ] && [ ! -e "$work/b" ] && [ ! -e "$work/c" ] || fail "a refused export left a folder"
cmp -s <(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_type"])' "$work/llama-hf/config.json") <(echo llama) ||
  fail "the refused export touched the existing folder"
echo "refused: post-LN, a recurrent model, another format, a folder that is not empty (left as it was)"
echo ok
