#!/usr/bin/env bash
# usage: freeze.sh WEFT COMPARE
# Layer freezing (seed 003 chapter 8; train/task.h):
#  1. --freeze-below 6 on the CNN (its two convolutions, ReLUs and poolings): the frozen
#     parameters stay bitwise what they were at the start, the others train; a run whose
#     frozen outputs come from the cache in its second epoch equals one that recomputes
#     them (--freeze-cache-mb 0) within a relative 1e-5.
#  2. With DDP on 2 ranks the frozen run equals the single-process one within 1e-5.
#  3. --freeze-converged: leading layers whose gradients stay small freeze during the run
#     (with a loose ratio, 0.2, all but the MLP's last), and stay bitwise what they were at
#     that step; a resume keeps them frozen.
#  4. A GPT's first 2 of 4 blocks frozen: they stay bitwise what they were, the other
#     blocks and the (tied) embedding train, and DDP on 2 ranks equals one process.
#  5. Refusals: one line each, exit 2.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
cnn=(train --model cnn --batch 64 --limit-test 100 --seed 3 --optimizer sgd --lr 0.02 --quiet)
two=(--epochs 2 --limit-train 640)

# same_tensors A B PREFIX: the tensors whose names start with PREFIX are bitwise equal in the
# safetensors files A and B (and there is at least one); different_tensors: none is.
tensors() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    return {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}
want, a, b, prefixes = sys.argv[1], read(sys.argv[2]), read(sys.argv[3]), sys.argv[4:]
names = [k for k in a if any(k.startswith(p) for p in prefixes)]
same = [k for k in names if a[k] == b[k]]
ok = names and (len(same) == len(names) if want == "same" else not same)
print(f"{len(same)} of {len(names)} tensors ({', '.join(prefixes)}) bitwise equal")
sys.exit(0 if ok else 1)
PY
}

# 1. Frozen convolutions; the cache against recomputing.
"$weft" "${cnn[@]}" --epochs 1 --limit-train 64 --freeze-below 6 --save-model "$work/start.safetensors" >/dev/null
out=$("$weft" "${cnn[@]}" "${two[@]}" --freeze-below 6 --save-model "$work/cached.safetensors")
grep -q "frozen: the first 6 layer(s), 18816 parameters" <<<"$out" || fail "no frozen layers said: $out"
grep -q '"frozen_layers":6' <<<"$out" || fail "the summary has no frozen_layers: $out"
"$weft" "${cnn[@]}" "${two[@]}" --freeze-below 6 --freeze-cache-mb 0 --save-model "$work/recomputed.safetensors" >/dev/null
printf 'frozen layers against the start: '
tensors same "$work/start.safetensors" "$work/cached.safetensors" 0. 3. || fail "frozen parameters changed"
printf 'trained layers against the start: '
tensors different "$work/start.safetensors" "$work/cached.safetensors" 7. 9. || fail "the other layers did not train"
printf 'cached against recomputed frozen outputs: '
"$compare" "$work/recomputed.safetensors" "$work/cached.safetensors" 1e-5 | tail -n 1

# 2. DDP.
"$weft" launch --nproc-per-node 2 -- weft "${cnn[@]}" "${two[@]}" --freeze-below 6 --save-model "$work/ddp.safetensors" >/dev/null
printf 'DDP on 2 ranks against one process: '
"$compare" "$work/cached.safetensors" "$work/ddp.safetensors" 1e-5 | tail -n 1

# 3. A layer that converges freezes.
mlp=(train --model mlp --batch 64 --limit-train 1920 --limit-test 100 --seed 3 --quiet)
out=$("$weft" "${mlp[@]}" --freeze-converged 0.2:5 --checkpoint-dir "$work/ck" --checkpoint-every 10 \
  --save-model "$work/converged.safetensors")
line=$(grep -o 'freezing layers 0-[0-9]* (step [0-9]*' <<<"$out" | head -n 1) || fail "nothing froze: $out"
step=${line##* }
echo "$line ...)"
"$weft" "${mlp[@]}" --freeze-converged 0.2:5 --max-steps "$step" --save-model "$work/at-freeze.safetensors" >/dev/null
printf 'layer 1 after its freeze against at it: '
tensors same "$work/at-freeze.safetensors" "$work/converged.safetensors" 1. || fail "a frozen layer changed"
out=$("$weft" "${mlp[@]}" --epochs 2 --max-steps 35 --checkpoint-dir "$work/ck" --resume)
grep -q "frozen: the first [0-9]* layer(s)" <<<"$out" || fail "the resume did not keep the layers frozen: $out"

# 4. A GPT's blocks.
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$work/corpus.txt"
gpt=(train --model gpt --data "$work/corpus.txt" --context 16 --layers 4 --d-model 32 --heads 2 --batch 8 --eval-batches 1
     --sample 0 --seed 3 --optimizer sgd --lr 0.05 --quiet --freeze-below 2)
"$weft" "${gpt[@]}" --max-steps 1 --eval-every 1 --save-model "$work/gpt-start.safetensors" >/dev/null
out=$("$weft" "${gpt[@]}" --max-steps 8 --eval-every 8 --save-model "$work/gpt.safetensors")
grep -q "frozen: the first 2 layer(s), 25408 parameters; computed without their weights' gradients" <<<"$out" ||
  fail "no frozen blocks said: $out"
printf 'GPT blocks 0-1 against their start: '
tensors same "$work/gpt-start.safetensors" "$work/gpt.safetensors" h0. h1. || fail "frozen blocks changed"
printf 'GPT blocks 2-3 and the embedding: '
tensors different "$work/gpt-start.safetensors" "$work/gpt.safetensors" h2. h3. wte || fail "the rest did not train"
"$weft" launch --nproc-per-node 2 -- weft "${gpt[@]}" --max-steps 8 --eval-every 8 --save-model "$work/gpt-ddp.safetensors" \
  >/dev/null
printf 'GPT, DDP on 2 ranks against one process: '
"$compare" "$work/gpt.safetensors" "$work/gpt-ddp.safetensors" 1e-5 | tail -n 1

# 5. Refusals.
expect_refusal "one at least must train" "$weft" "${cnn[@]}" "${two[@]}" --freeze-below 10
expect_refusal "work with the image models and the GPT" "$weft" train --model lstm --data "$work/corpus.txt" --context 16 \
  --layers 1 --d-model 16 --max-steps 2 --freeze-below 1
expect_refusal "is not RATIO\[:STEPS\]" "$weft" "${mlp[@]}" --freeze-converged 0.1:0
expect_refusal "work with DDP, pipelines or one process" "$weft" "${mlp[@]}" --freeze-below 1 --zero 1
echo "refusals: 4 one-line errors"
