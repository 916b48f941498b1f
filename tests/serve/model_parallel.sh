#!/usr/bin/env bash
# usage: model_parallel.sh WEFT
# Model-parallel inference equals one process. A GPT split over 2 and 4 ranks by tensor
# parallelism (each rank its heads, its slice of the MLP and its heads' cache), into 2 and
# 4 pipeline stages (blocks and their caches; micro-batches flowing stage to stage), or into
# 2 stages of 2 tensor-parallel ranks scores
# the validation windows with the single-process loss (relative 1e-6: every position's
# logits through both, each logit within 1e-5), and generates the same tokens past the
# context, greedy (and sampled, once for each kind of split; greedy with a bf16 key-value
# or int8 cache under --tp 2 and --pp 2); also with its two ranks started by two launchers over TCP,
# as on two hosts.
# Served over HTTP by weft launch --nproc-per-node 2 -- weft serve --tp 2 and --pp 2 (each also
# with a 32-token prompt in pieces of 16: --max-prefill-tokens; the second with a key-value
# cache limit, which rank 0 keeps for its part of the cache), it
# answers with those tokens under concurrent load, and every rank stops when the server is
# told to. Under a cache limit with preemption by recomputation (--tp 2, --pp 2, both), 8 requests
# at once, some preempted and their caches rebuilt on every rank, each get the tokens and
# log-probabilities one request gets alone, past the context. Replicas of split ranks
# (--replicas 2 --tp 2, --replicas 1:2 --pp 2) complete as one process; a replica's launcher
# killed under load takes its ranks with it, and the replica starts again. Run alone (without
# weft launch), generate, predict and serve with --tp/--pp start their own ranks.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
new_work_dir
launcher=""
trap '[ -n "$launcher" ] && kill "$launcher" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
"$weft" train --model gpt --layers 4 --d-model 32 --heads 4 --context 32 --batch 8 --max-steps 20 --eval-every 20 \
  --eval-batches 1 --sample 0 --seed 5 --quiet --threads 1 --save-model "$work/gpt.safetensors" >/dev/null

one=$("$weft" predict "$work/gpt.safetensors" --windows 8 --json --logits "$work/one.logits" | json_field val_loss)
# max |a - b| over every scored row of logits (float32 files of weft predict --logits).
logits_within() {
  python3 - "$1" "$2" <<'PY'
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read())
b.frombytes(open(sys.argv[2], "rb").read())
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
diff = max(abs(x - y) for x, y in zip(a, b))
print(f"{diff:.1e}")
sys.exit(0 if diff <= 1e-5 else 1)
PY
}
# The ranks a layout takes: --tp x --pp.
ranks_of() { local n=1; while [ $# -gt 0 ]; do case $1 in --tp|--pp) n=$((n * $2)); shift;; esac; shift; done; echo "$n"; }
generated() {  # TEMPERATURE [LAUNCH FLAGS...]: the tokens of 50 (past the context of 32)
  local t=$1 seed=()
  shift
  [ "$t" = 0 ] || seed=(--seed 9)  # (greedy draws nothing: a seed is refused there)
  if [ $# -eq 0 ]; then
    "$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 50 --temperature "$t" "${seed[@]}" --json
  else
    "$weft" launch --nproc-per-node "$(ranks_of "$@")" -- weft generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 50 \
      --temperature "$t" "${seed[@]}" --json "$@" | grep '^\[0\] {' | sed 's/^\[0\] //'
  fi | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'
}
greedy=$(generated 0)
sampled=$(generated 0.9)
# Each layout scores; each generates greedily (micro-batches split scoring only); sampling,
# whose draws rank 0 makes from the gathered logits whatever the split, once per kind.
for layout in "--tp 2:greedy sampled" "--tp 4:greedy" "--pp 2:greedy sampled" "--pp 4:greedy" "--pp 2 --micro-batches 3:" \
              "--tp 2 --pp 2:greedy sampled" "--tp 2 --pp 2 --micro-batches 3:"; do
  read -r -a flags <<<"${layout%%:*}"
  loss=$("$weft" launch --nproc-per-node "$(ranks_of "${flags[@]}")" -- weft predict "$work/gpt.safetensors" --windows 8 --json \
           --logits "$work/mp.logits" "${flags[@]}" | rank0_field val_loss)
  close_to "$loss" "$one" 1e-6 || { echo "FAIL: ${layout%%:*}: validation loss $loss, one process $one"; exit 1; }
  diff=$(logits_within "$work/one.logits" "$work/mp.logits") || { echo "FAIL: ${layout%%:*}: logits differ by $diff"; exit 1; }
  said="validation loss $loss (one process $one), logits within $diff"
  if [[ ${layout#*:} == *greedy* ]]; then
    [ "$(generated 0 "${flags[@]}")" = "$greedy" ] || { echo "FAIL: ${layout%%:*} generates other greedy tokens"; exit 1; }
    said+=", the same 50 tokens greedy"
  fi
  if [[ ${layout#*:} == *sampled* ]]; then
    [ "$(generated 0.9 "${flags[@]}")" = "$sampled" ] || { echo "FAIL: ${layout%%:*} samples other tokens"; exit 1; }
    said+=" and sampled"
  fi
  echo "${layout%%:*}: $said"
done
# A bf16 and an int8 key-value cache: each rank's cache holds its heads' (--tp) or its
# layers' (--pp) keys and values, rounded (and, int8, scaled per head) as one process does.
for pair in "--tp 2:int8" "--pp 2:bf16"; do
  read -r -a flags <<<"${pair%%:*}"
  cache=${pair##*:}
  alone=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 50 --temperature 0 --json \
            --kv-cache-dtype "$cache" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
  [ "$(generated 0 "${flags[@]}" --kv-cache-dtype "$cache")" = "$alone" ] ||
    { echo "FAIL: ${flags[*]} with a $cache cache generates other greedy tokens than one process"; exit 1; }
done
echo "--tp 2 with an int8 key-value cache and --pp 2 with bf16 generate one process's 50 greedy tokens"

# Run alone (no launcher), a split command starts its own job (weft launch --nproc-per-node
# tp x pp --no-prefix) once the model is known to split so: the same tokens and loss; a split
# the model does not take is one line before any rank starts.
alone=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 50 --temperature 0 --json --tp 2 --pp 2 \
          2>"$work/alone.err" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
[ "$alone" = "$greedy" ] || fail "generate --tp 2 --pp 2 run alone generates other greedy tokens"
grep -qx -- "--tp 2 with --pp 2: starting 4 ranks on this node (weft launch --nproc-per-node 4)" "$work/alone.err" ||
  fail "no job started: $(cat "$work/alone.err")"
loss=$("$weft" predict "$work/gpt.safetensors" --windows 8 --json --pp 2 2>/dev/null | json_field val_loss)
close_to "$loss" "$one" 1e-6 || fail "predict --pp 2 run alone: validation loss $loss, one process $one"
for split in "--tp 3" "--pp 5"; do
  code=0
  # shellcheck disable=SC2086
  err=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 5 $split 2>&1 >/dev/null) || code=$?
  [ "$code" = 2 ] && [ "$(wc -l <<<"$err")" = 1 ] && grep -q "^error: a GPT .* does not split" <<<"$err" ||
    fail "generate $split run alone: exit $code, '$err'"
done
code=0
err=$("$weft" predict "$work/gpt.safetensors" --windows 8 --tp 2 --kv-cache-dtype int8 2>&1 >/dev/null) || code=$?
[ "$code" = 2 ] && [ "$err" = "error: --kv-cache-dtype compares with fp32 in one process: drop --tp and --pp" ] ||
  fail "predict --tp 2 --kv-cache-dtype int8 run alone: exit $code, '$err'"
echo "run alone, generate --tp 2 --pp 2 and predict --pp 2 start their own ranks and equal one process; --tp 3, --pp 5 and"\
  "predict --tp 2 --kv-cache-dtype int8 are one line each"

# Two launchers as two hosts (here on one machine, over TCP as between hosts): --tp 2 across them.
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d " \n")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for node in 0 1; do
  WEFT_JOB_TOKEN=$token WEFT_TRANSPORT=tcp "$weft" launch --nproc-per-node 1 --nnodes 2 --node-rank "$node" --master-port "$port" -- \
    weft predict "$work/gpt.safetensors" --windows 8 --json --tp 2 --logits "$work/nodes.logits" > "$work/node$node.txt" 2>&1 &
done
wait
loss=$(rank0_field val_loss < "$work/node0.txt")
close_to "$loss" "$one" 1e-6 || { echo "FAIL: --tp 2 over two nodes: validation loss $loss"; cat "$work"/node*.txt; exit 1; }
diff=$(logits_within "$work/one.logits" "$work/nodes.logits") || { echo "FAIL: two nodes: logits differ by $diff"; exit 1; }
echo "--tp 2 over two launchers (TCP): validation loss $loss, logits within $diff"

want=$("$weft" generate "$work/gpt.safetensors" --prompt "The cat" --max-tokens 50 --temperature 0 --json |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])')
long_prompt="The cat sat on the mat, and then"  # 32 tokens: in pieces of 16 under --max-prefill-tokens 16
want_long=$("$weft" generate "$work/gpt.safetensors" --prompt "$long_prompt" --max-tokens 20 --temperature 0 --json |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])')
for layout in "--tp 2 --max-prefill-tokens 16" "--pp 2" "--pp 2 --max-prefill-tokens 16 --kv-cache-memory 1G"; do
  read -r -a flags <<<"$layout"
  rm -f "$work/port"
  "$weft" launch --nproc-per-node 2 -- weft serve "$work/gpt.safetensors" "${flags[@]}" --port 0 --port-file "$work/port" \
    > "$work/serve.log" 2>&1 &
  launcher=$!
  for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
  port=$(cat "$work/port")
  if [[ $layout == *--kv-cache-memory* ]]; then
    grep -q "key-value cache [0-9.]* KB a token on rank 0 (at most 1.00 GiB)" "$work/serve.log" ||
      { echo "FAIL: the $layout server shows no cache limit"; cat "$work/serve.log"; exit 1; }
  fi
  text=$(curl -s "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "The cat", "max_tokens": 50, "temperature": 0}' |
         python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
  [ "$text" = "$want" ] || { echo "FAIL: the $layout server completes '$text', one process '$want'"; exit 1; }
  if [[ $layout == *--max-prefill-tokens* ]]; then
    text=$(curl -s "http://127.0.0.1:$port/v1/completions" \
             -d "{\"prompt\": \"$long_prompt\", \"max_tokens\": 20, \"temperature\": 0}" |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
    [ "$text" = "$want_long" ] || { echo "FAIL: the $layout server completes '$text' (a prompt in pieces), one process '$want_long'"; exit 1; }
  fi
  "$weft" serve-bench --url "http://127.0.0.1:$port" --concurrency 8 --requests 64 --max-tokens 40 | head -1
  kill -TERM "$launcher"
  rc=0
  wait "$launcher" || rc=$?
  launcher=""
  # weft launch passes the signal on and exits as torchrun does (128 + SIGTERM).
  [ "$rc" = 0 ] || [ "$rc" = 143 ] || { echo "FAIL: weft launch exited with $rc"; cat "$work/serve.log"; exit 1; }
  grep -q '^\[0\] weft serve: stopped' "$work/serve.log" || { echo "FAIL: rank 0 did not stop"; cat "$work/serve.log"; exit 1; }
  ! grep -q 'error' "$work/serve.log" || { echo "FAIL: a rank reported an error"; cat "$work/serve.log"; exit 1; }
  [ -z "$(pgrep -f "$work/gpt.safetensors" || true)" ] || { echo "FAIL: ranks left running"; exit 1; }
  echo "weft serve $layout: rank 0's completions equal one process's; both ranks stopped on SIGTERM"
done
# weft serve --tp 2 run alone: its own job of 2 ranks, stopped by SIGTERM to the pid it started with.
rm -f "$work/port"
"$weft" serve "$work/gpt.safetensors" --tp 2 --port 0 --port-file "$work/port" > "$work/serve.log" 2>&1 &
launcher=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")
text=$(curl -s "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "The cat", "max_tokens": 50, "temperature": 0}' |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
[ "$text" = "$want" ] || fail "weft serve --tp 2 run alone completes '$text', one process '$want'"
[ "$(pgrep -f "$work/gpt.safetensors" | wc -l)" = 3 ] || fail "not a launcher and 2 ranks: $(pgrep -af "$work/gpt.safetensors")"
kill -TERM "$launcher"
rc=0
wait "$launcher" || rc=$?
launcher=""
[ "$rc" = 0 ] || fail "weft serve --tp 2 run alone exited with $rc after SIGTERM, not 0 as one process: $(cat "$work/serve.log")"
grep -q '^weft serve: stopped' "$work/serve.log" || fail "rank 0 did not stop: $(cat "$work/serve.log")"
[ -z "$(pgrep -f "$work/gpt.safetensors" || true)" ] || fail "ranks left running"
echo "weft serve --tp 2 run alone: its own 2 ranks, one process's completion, all stopped on SIGTERM (exit status 0)"

# Preemption by recomputation over ranks: a limit of 32 KiB of rank 0's part of the cache (4
# blocks of 16 positions; 8 under --tp 2 --pp 2); 8 requests join on their prompt's block and,
# growing, the last to come leave and come back, every rank rebuilding its part of their caches.
# The idle server waits for all 8 (--max-batch 8, up to 10 s): their arrival decides nothing.
for layout in "--tp 2" "--pp 2 --micro-batches 2" "--tp 2 --pp 2"; do
  read -r -a flags <<<"$layout"
  rm -f "$work/port"
  "$weft" launch --nproc-per-node "$(ranks_of "${flags[@]}")" -- weft serve "$work/gpt.safetensors" "${flags[@]}" --kv-cache-memory 32K \
    --block-size 16 --preemption recompute --max-batch 8 --max-wait-ms 10000 --port 0 --port-file "$work/port" > "$work/serve.log" 2>&1 &
  launcher=$!
  for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
  grep -q "(at most 32.00 KiB), preemption by recomputation" "$work/serve.log" ||
    { echo "FAIL: the $layout server shows no preemption"; cat "$work/serve.log"; exit 1; }
  python3 - "$(cat "$work/port")" "$layout" <<'PY' || { cat "$work/serve.log"; exit 1; }
import json, re, sys, threading, urllib.request
port, layout = int(sys.argv[1]), sys.argv[2]
def ask():  # 7 prompt tokens and 40 more: past the context of 32
    body = json.dumps({"prompt": "The cat", "max_tokens": 40, "temperature": 0, "logprobs": 1}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        c = json.loads(r.read())["choices"][0]
    return c["text"], c["logprobs"]["token_logprobs"]
alone = ask()
out = [None] * 8
start = threading.Barrier(8)  # sent at the same moment: threads started one by one on a busy
                              # machine come further apart than a request of this model takes
def together(i):
    start.wait()
    out[i] = ask()
threads = [threading.Thread(target=together, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
preempted = float(re.search(r"^weft_preemptions_total (\S+)", metrics, re.M).group(1))
same = sum(o == alone for o in out)
assert same == 8 and preempted >= 1, f"FAIL: {layout} with preemption: {same} of 8 as alone, {preempted} preempted"
print(f"weft serve {layout} --kv-cache-memory 32K --block-size 16 --preemption recompute: 8 requests at once, "
      f"{preempted:.0f} preempted, each with the tokens and log-probabilities of one alone")
PY
  kill -TERM "$launcher"
  wait "$launcher" || true
  launcher=""
  ! grep -q 'error' "$work/serve.log" || { echo "FAIL: a rank reported an error"; cat "$work/serve.log"; exit 1; }
  [ -z "$(pgrep -f "$work/gpt.safetensors" || true)" ] || { echo "FAIL: ranks left running"; exit 1; }
done

# Replicas of split ranks: weft serve --replicas 2 --tp 2 starts each replica's 2 ranks with
# weft launch. Both replicas complete as one process; a replica's launcher killed (SIGKILL)
# under load takes its ranks with it, no request is lost and the replica starts again; elastic
# --replicas 1:2 --pp 2 serves the same text; SIGTERM stops every process. Under weft launch
# itself, --replicas is refused.
rm -f "$work/port"
"$weft" serve "$work/gpt.safetensors" --replicas 2 --tp 2 --port 0 --port-file "$work/port" > "$work/fe.log" 2>&1 &
launcher=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")
grep -q "behind 2 replicas (each bound to its share of the cores, each 2 ranks: --tp 2)" "$work/fe.log" ||
  { echo "FAIL: the front end does not name its replicas' ranks"; cat "$work/fe.log"; exit 1; }
# 4 at once (spread over the replicas by least outstanding requests), each one process's text.
asks=()
for i in 1 2 3 4; do
  curl -s "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "The cat", "max_tokens": 50, "temperature": 0}' \
    > "$work/answer$i.json" &
  asks+=($!)
done
wait "${asks[@]}"
for i in 1 2 3 4; do
  text=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$work/answer$i.json")
  [ "$text" = "$want" ] || { echo "FAIL: --replicas 2 --tp 2 completes '$text', one process '$want'"; exit 1; }
done
"$weft" serve-bench --url "http://127.0.0.1:$port" --concurrency 8 --requests 200 --max-tokens 48 --json > "$work/bench.json" &
bench=$!
sleep 1
victim=$(grep -o 'replica 1 (pid [0-9]*' "$work/fe.log" | head -1 | grep -o '[0-9]*$')
ranks=$(pgrep -P "$victim" | tr '\n' ' ')
[ -n "$ranks" ] || { echo "FAIL: replica 1's launcher $victim has no ranks"; exit 1; }
kill -9 "$victim"
wait "$bench" || { echo "FAIL: requests failed after a replica's launcher was killed"; cat "$work/bench.json"; exit 1; }
python3 - "$work/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["requests"] == 200 and r["errors"] == 0 and r["tokens"] == 200 * 48, r
PY
for _ in $(seq 100); do count_lines "*replica 1 (pid *) ready*" "$work/fe.log"; [ "$count" -ge 2 ] && break; sleep 0.1; done
[ "$count" -ge 2 ] || { echo "FAIL: replica 1 was not restarted"; cat "$work/fe.log"; exit 1; }
# (Its ranks get SIGTERM: rank 0 finishes what it was answering, then both stop.)
# shellcheck disable=SC2086  # (the ranks' pids, one word each)
wait_gone 30 $ranks
[ -z "$alive" ] || { echo "FAIL: ranks$alive of the killed launcher still run after 30 s"; exit 1; }
echo "weft serve --replicas 2 --tp 2: 4 completions at once, each one process's; a launcher killed under load:" \
  "200 of 200 requests whole, the replica restarted, its ranks stopped"
kill -TERM "$launcher"
wait "$launcher" || true
launcher=""
[ -z "$(pgrep -f "$work/gpt.safetensors" || true)" ] || { echo "FAIL: ranks left running"; pgrep -af "$work/gpt.safetensors"; exit 1; }
rm -f "$work/port"
"$weft" serve "$work/gpt.safetensors" --replicas 1:2 --pp 2 --port 0 --port-file "$work/port" > "$work/fe.log" 2>&1 &
launcher=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
text=$(curl -s "http://127.0.0.1:$(cat "$work/port")/v1/completions" -d '{"prompt": "The cat", "max_tokens": 50, "temperature": 0}' |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
[ "$text" = "$want" ] || { echo "FAIL: --replicas 1:2 --pp 2 completes '$text', one process '$want'"; cat "$work/fe.log"; exit 1; }
kill -TERM "$launcher"
wait "$launcher" || true
launcher=""
[ -z "$(pgrep -f "$work/gpt.safetensors" || true)" ] || { echo "FAIL: ranks left running"; exit 1; }
echo "weft serve --replicas 1:2 --pp 2: one process's completion; every process stopped on SIGTERM"
out=$("$weft" launch --nproc-per-node 2 -- weft serve "$work/gpt.safetensors" --replicas 2 --tp 2 --port 0 2>&1) &&
  { echo "FAIL: --replicas under weft launch was accepted"; exit 1; }
grep -q "run weft serve without weft launch" <<<"$out" || { echo "FAIL: --replicas under weft launch: $out"; exit 1; }
echo "--replicas under weft launch: refused ($(grep -m1 -o 'error: .*' <<<"$out"))"
# Micro-batches split a step over pipeline stages: without --pp, a one-line error (generate's
# --no-cache too, which holds no decoder of stages).
for cmd in "generate --prompt The --max-tokens 4" "generate --no-cache --prompt The --max-tokens 4" "predict --windows 2"; do
  read -r -a words <<<"$cmd"
  out=$("$weft" "${words[0]}" "$work/gpt.safetensors" "${words[@]:1}" --micro-batches 2 2>&1) &&
    { echo "FAIL: weft $cmd --micro-batches 2 without --pp was accepted"; exit 1; }
  [ "$out" = "error: --micro-batches does not apply to this run: it is for pipeline stages (--pp 2 or more), and the run has --pp 1" ] ||
    { echo "FAIL: weft $cmd --micro-batches 2: $out"; exit 1; }
done
echo "--micro-batches without --pp: refused ($out)"
