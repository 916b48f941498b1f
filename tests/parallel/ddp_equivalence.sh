#!/usr/bin/env bash
# usage: ddp_equivalence.sh WEFT COMPARE MODEL
# One rank with global batch 48 against 2, 3 and 4 data-parallel ranks with 48/N each:
# after 40 steps the parameters must agree within a relative 1e-5, and every run's ranks
# must report bitwise-identical replicas; every rank's metrics record each step's loss over the
# whole global batch. (The runs sum in different orders, so they differ
# in the last bits; where a max-pool window holds two values within those bits of each
# other, the runs may route its gradient to different inputs, and the difference jumps: the
# CNN built without fused multiply-adds went from 5.7e-7 at step 46 to 2.9e-4 at step 48.)
set -euo pipefail
weft=$1
compare=$2
model=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model "$model" --batch 48 --max-steps 40 --limit-train 2400 --limit-test 200 --seed 5 --quiet)
"$weft" "${common[@]}" --checkpoint-dir "$work/single" >/dev/null
for n in 2 3 4; do
  out=$("$weft" launch --nproc-per-node "$n" -- weft "${common[@]}" --checkpoint-dir "$work/dp$n")
  echo "$out" | tail -n 1
  grep -q '"replicas_identical":true' <<<"$out" || { echo "FAIL: replicas differ with $n ranks"; exit 1; }
  "$compare" "$work/single" "$work/dp$n" 1e-5
  # Every rank's metrics record the global batch's loss of each step: one process's, within
  # the runs' rounding, and the same on every rank.
  python3 - "$work/single/metrics.jsonl" "$work/dp$n"/metrics*.jsonl <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r["kind"] == "step"}
one, ranks = losses(sys.argv[1]), [losses(p) for p in sys.argv[2:]]
assert len(ranks) > 1 and all(r == ranks[0] for r in ranks), "the ranks' per-step losses differ"
worst = max(abs(ranks[0][s] - one[s]) / abs(one[s]) for s in one)
assert sorted(one) == sorted(ranks[0]) and worst < 1e-4, f"per-step loss vs one process: {worst}"
print(f"per-step loss: the global batch's on all {len(ranks)} ranks (within {worst:.1e} of one process)")
PY
done
echo "ok"
