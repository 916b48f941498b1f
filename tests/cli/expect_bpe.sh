#!/usr/bin/env bash
# A GPT on a BPE tokenizer (SentencePiece, trained on the corpus): it trains, the saved model
# carries the tokenizer, weft generate prints valid UTF-8 from it (byte pieces can stop inside
# a character), a character-level model's output is valid UTF-8 too, and the tokenizer taken
# out of the saved model as a .model file trains a model with the same vocabulary.
# usage: expect_bpe.sh WEFT
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
new_work_dir
python3 - "$work/corpus.txt" <<'PY'
import sys
lines = ["Καλημέρα κόσμε, the quick brown fox jumps over the lazy dog.", "Grüße aus Köln: 3 € für 2 Äpfel.",
         "日本語のテキストも少し。", "A plain English sentence about training small models."]
open(sys.argv[1], "w", encoding="utf-8").write("\n".join(lines[i % 4] + f" {i}" for i in range(3000)) + "\n")
PY
small=(--model gpt --context 32 --d-model 64 --heads 2 --layers 2 --batch 8 --max-steps 20 --eval-every 20 --quiet)
"$weft" train "${small[@]}" --data "$work/corpus.txt" --tokenizer bpe --vocab-size 400 --save-model "$work/bpe.safetensors" \
  > "$work/out" || fail "training with --tokenizer bpe"
vocab=$(json_value vocab < "$work/out")
[ "$vocab" -gt 256 ] && [ "$vocab" -le 400 ] || fail "vocabulary $vocab"
for model in bpe char; do
  if [ "$model" = char ]; then
    "$weft" train "${small[@]}" --data "$work/corpus.txt" --save-model "$work/char.safetensors" > /dev/null
  fi
  "$weft" generate "$work/$model.safetensors" --prompt "Καλη" --max-tokens 60 --temperature 1.5 --seed 3 > "$work/gen"
  python3 -c "open('$work/gen', encoding='utf-8', errors='strict').read()" || fail "$model: generated text is not valid UTF-8"
done
echo "bpe vocabulary $vocab; generated text is valid UTF-8 (bpe and char)"
python3 - "$work/bpe.safetensors" "$work/corpus.model" <<'PY'
import base64, json, struct, sys
b = open(sys.argv[1], "rb").read()
meta = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])["__metadata__"]
assert meta["weft_tokenizer"] == "bpe", meta["weft_tokenizer"]
open(sys.argv[2], "wb").write(base64.b64decode(meta["weft_tokenizer_vocabulary"]))
PY
"$weft" train "${small[@]}" --data "$work/corpus.txt" --tokenizer "$work/corpus.model" > "$work/out2"
[ "$(json_value vocab < "$work/out2")" = "$vocab" ] || fail "the .model file gave another vocabulary"
echo "a SentencePiece .model file trains with the same vocabulary"
if out=$("$weft" train "${small[@]}" --data "$work/corpus.txt" --tokenizer "$work/corpus.txt.model" 2>&1); then fail "a missing .model file"; fi
echo "$out" | grep -q "corpus.txt.model" || fail "missing .model: $out"
printf 'not a model' > "$work/bad.model"
if out=$("$weft" train "${small[@]}" --data "$work/corpus.txt" --tokenizer "$work/bad.model" 2>&1); then fail "a bad .model file"; fi
echo "$out" | grep -q "bad.model: not a SentencePiece model" || fail "bad .model: $out"
echo "bad .model files are named"
