#!/usr/bin/env bash
# usage: timeline.sh WEFT
# --timeline writes one Chrome trace per rank with every phase of every step: data
# parallelism (the MLP on 2 ranks: phases and bucket all-reduces), and a GPT on a pipeline of
# 2 stages of 2 tensor-parallel ranks (forward and backward per micro-batch, the pipeline's
# sends and receives, the tensor-parallel collectives). weft timeline merge puts the 4 ranks'
# files in one trace, one track per rank, on one clock, and refuses a rank given twice.
set -euo pipefail
weft=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$weft" launch --nproc-per-node 2 -- weft train --model mlp --max-steps 12 --quiet --timeline "$work/tl/run.json" >/dev/null
for r in 0 1; do
  f="$work/tl/run-rank$r.json"
  [ -f "$f" ] || { echo "FAIL: no $f"; exit 1; }
  for phase in data forward backward optimizer "wait for all-reduce"; do
    n=$(grep -o "\"name\":\"$phase\"" "$f" | wc -l)
    [ "$n" -eq 12 ] || { echo "FAIL: $n '$phase' events in $f, expected 12"; exit 1; }
  done
  grep -q '"name":"allreduce' "$f" || { echo "FAIL: no all-reduce events"; exit 1; }
  grep -q '"traceEvents"' "$f" || { echo "FAIL: not a Chrome trace"; exit 1; }
done
"$weft" launch --nproc-per-node 4 -- weft train --model gpt --layers 4 --d-model 32 --heads 4 --context 16 --batch 8 \
  --max-steps 3 --eval-every 3 --eval-batches 1 --sample 0 --quiet --threads 1 --pp 2 --tp 2 --micro-batches 2 \
  --timeline "$work/gpt/run.json" >/dev/null
"$weft" timeline merge --out "$work/merged.json" "$work"/gpt/run-rank*.json
# A rank given twice (or one rank's events in two files) would draw over itself: refused.
if "$weft" timeline merge --out "$work/twice.json" "$work"/gpt/run-rank*.json "$work/gpt/run-rank1.json" 2>"$work/err"; then
  echo "FAIL: a rank given twice was merged"; exit 1
fi
grep -q "run-rank1.json is given twice" "$work/err" || { echo "FAIL: $(cat "$work/err")"; exit 1; }
[ ! -e "$work/twice.json" ] || { echo "FAIL: a refused merge wrote its output"; exit 1; }
python3 - "$work/merged.json" <<'PY'
import collections, json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
by_rank = collections.defaultdict(collections.Counter)
for e in events:
    by_rank[e["pid"]][" ".join(e["name"].split()[:2])] += 1
assert sorted(by_rank) == [0, 1, 2, 3], sorted(by_rank)
for rank, names in sorted(by_rank.items()):
    # 3 steps x 2 micro-batches, forward and backward each, on every rank of both stages
    assert names["forward 0"] == 3 and names["forward 1"] == 3, (rank, names)
    assert names["backward 0"] == 3 and names["backward 1"] == 3, (rank, names)
    sends = names["send activation"] if rank < 2 else names["send gradient"]
    recvs = names["recv gradient"] if rank < 2 else names["recv activation"]
    assert sends == 6 and recvs == 6, (rank, names)
    assert names["tp all-reduce"] > 0, (rank, names)
# One clock: the ranks' first events lie within a second of each other.
firsts = [min(e["ts"] for e in events if e["pid"] == r) for r in range(4)]
assert max(firsts) - min(firsts) < 1e6, firsts
print("merged timeline: 4 ranks, forward/backward per micro-batch, sends, receives, tensor-parallel collectives")
PY
echo "ok"
