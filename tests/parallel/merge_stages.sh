#!/usr/bin/env bash
# usage: merge_stages.sh WEFT COMPARE
# Adaptive model parallelism (seed 003 chapter 11; --merge-frozen-stages, train/loop.cpp):
#  1. A GPT of 4 blocks in a 2-stage pipeline freezes its leading blocks as they converge
#     (--freeze-converged): without merging, the pipeline goes on in 2 stages balanced anew;
#     with --merge-frozen-stages leave the blocks go onto 1 stage and rank 1 leaves the job
#     (which ends well); with dp rank 1 becomes a second data-parallel replica. All three
#     equal the one-process run within a relative 1e-5, step by step (the loss curve goes on)
#     and in the final parameters.
#  2. 6 blocks in 3 stages, the first 2 frozen from the start: the first stage is given up at
#     once (3 stages -> 2; dp: 3 ranks do not make 2 replicas of 2 stages, so one leaves).
#  3. A checkpoint written after the merge resumes with the same command (the pipeline
#     merges again at once) bitwise equal to the uninterrupted run.
#  4. Refusals: one line each, exit 2.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$work/corpus.txt"
gpt=(train --model gpt --data "$work/corpus.txt" --context 16 --d-model 32 --heads 2 --batch 12 --eval-batches 1 --sample 0
     --seed 3 --optimizer sgd --lr 0.05 --quiet --micro-batches 2)

# losses FILE...: each step and its loss, the mean over the metrics files (the ranks'; each
# records the global batch's).
losses() { /usr/bin/python3 -c 'import json, sys
steps = {}
for f in sys.argv[1:]:
    for r in map(json.loads, open(f)):
        if r.get("kind") == "step": steps.setdefault(r["step"], []).append(r["loss"])
for s in sorted(steps): print(s, sum(steps[s]) / len(steps[s]))' "$@"; }
# same_curve A B...: the metrics file A and the files B... have the same steps and losses
# within 1e-5.
same_curve() {
  local a=$1
  shift
  paste -d' ' <(losses "$a") <(losses "$@") | awk '$1 != $3 || ($2 - $4) ^ 2 > (1e-5 * $2) ^ 2 { bad = 1 } END { exit bad || NR < 2 }' ||
    fail "the loss curves differ: $(paste -d' ' <(losses "$a") <(losses "$@"))"
  echo "$(losses "$a" | wc -l) steps with the same losses"
}

# 1. Frozen as they converge, in 2 stages.
four=("${gpt[@]}" --layers 4 --max-steps 16 --freeze-converged 0.5:3)
"$weft" "${four[@]}" --metrics "$work/one.jsonl" --save-model "$work/one.safetensors" >/dev/null
out=$("$weft" launch --nproc-per-node 2 -- weft "${four[@]}" --pp 2 --metrics "$work/kept.jsonl" \
  --save-model "$work/kept.safetensors")
grep -q "stages balanced anew; now dp 1 x pp 2 x tp 1" <<<"$out" || fail "the pipeline did not go on in 2 stages: $out"
printf '2 stages kept against one process: '
"$compare" "$work/one.safetensors" "$work/kept.safetensors" 1e-5 | tail -n 1
# A stage's sends, receives and waits for its neighbour are its exposed communication.
/usr/bin/python3 - "$work/kept.jsonl" <<'PY' || fail "the pipeline's steps report no communication"
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "step" and r["step"] <= 4]
assert steps and all(r["comm_seconds"] > 0 and abs(r["exposed_seconds"] - r["comm_seconds"]) < 1e-9 for r in steps), steps
print(f"pipeline communication: {sum(r['comm_seconds'] for r in steps) * 1e3:.2f} ms over its first {len(steps)} steps, all exposed")
PY
for mode in leave dp; do
  "$weft" launch --nproc-per-node 2 -- weft "${four[@]}" --pp 2 --merge-frozen-stages "$mode" --metrics "$work/$mode.jsonl" \
    --save-model "$work/$mode.safetensors" >"$work/$mode.out" 2>"$work/$mode.err" || fail "the launch failed: $(cat "$work/$mode.err")"
  out=$(cat "$work/$mode.out")
  line=$(grep -o "pipeline after step [0-9]* (blocks 0-[0-9] frozen): 2 stages merged into 1[^;]*; now [^;]*" <<<"$out") ||
    fail "no merge said ($mode): $out"
  echo "$mode: $line"
  printf '  against one process: '
  "$compare" "$work/one.safetensors" "$work/$mode.safetensors" 1e-5 | tail -n 1
  printf '  '
  same_curve "$work/one.jsonl" "$work/$mode.jsonl" "$work/$mode-rank1.jsonl"
done
grep -q "1 rank(s) released; now dp 1 x pp 1" "$work/leave.out" || fail "rank 1 did not leave: $(cat "$work/leave.out")"
grep -q "rank 1 released after step" "$work/leave.err" || fail "rank 1 said nothing: $(cat "$work/leave.err")"
grep -q '"ranks":1,.*"stages_from":2,"stages_to":1' "$work/leave.out" || fail "the summary has no change: $(cat "$work/leave.out")"
grep -q "the ranks freed now data-parallel replicas; now dp 2 x pp 1" "$work/dp.out" || fail "no replica: $(cat "$work/dp.out")"

# 2. The first of 3 stages frozen from the start.
six=("${gpt[@]}" --layers 6 --max-steps 6 --freeze-below 2)
"$weft" "${six[@]}" --save-model "$work/six.safetensors" >/dev/null
out=$("$weft" launch --nproc-per-node 3 -- weft "${six[@]}" --pp 3 --merge-frozen-stages dp --save-model "$work/six-dp.safetensors")
grep -q "pipeline after step 0 (blocks 0-1 frozen): 3 stages merged into 2, 1 rank(s) released; now dp 1 x pp 2" <<<"$out" ||
  fail "the first stage was not given up: $out"
printf '3 stages -> 2 against one process: '
"$compare" "$work/six.safetensors" "$work/six-dp.safetensors" 1e-5 | tail -n 1

# 3. Resume after a merge.
expect_bitwise_resume "$work/ck" "merged 2 -> 1 stages, resumed" \
  "$weft" launch --nproc-per-node 2 -- weft "${gpt[@]}" --layers 4 --max-steps 20 --pp 2 --freeze-below 2 --merge-frozen-stages leave

# 4. Refusals.
expect_refusal "merge-frozen-stages: unknown value .drop. (known: leave, dp)" "$weft" "${six[@]}" --merge-frozen-stages drop
expect_refusal "merges the stages of a pipeline" "$weft" "${six[@]}" --merge-frozen-stages leave
expect_refusal "merges the stages of a pipeline" "$weft" "${gpt[@]}" --layers 4 --pp 2 --merge-frozen-stages leave
expect_refusal "interleaved schedule" "$weft" "${six[@]}" --pp 2 --pipeline-schedule interleaved --chunks 2 \
  --merge-frozen-stages leave
expect_refusal "not ZeRO, the parameter server, federated averaging or tensor parallelism" "$weft" "${six[@]}" --tp 2
echo "refusals: 5 one-line errors"
