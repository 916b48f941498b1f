#!/usr/bin/env bash
# usage: replicas.sh WEFT
# Data-parallel and elastic serving. 2 replicas behind one front end: a replica killed
# (SIGKILL) under load loses no request (every one of 300 streamed completions arrives whole,
# its tokens counted) and is restarted; streams of several choices cut the same way resume
# whole. Elastic 1:3: a load step of 1 -> 16 concurrent
# clients -> 1 scales the replicas up and, once the load falls, back down to 1, each decision
# logged and counted. Elastic 1:2: five cycles of load and quiet scale up and down five times,
# each new replica ready on a port of its own.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
new_work_dir
server=""
stop_server() { if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; server=""; fi; }
trap 'stop_server; rm -rf "$work"' EXIT
start_server() {  # LOG ARGS...
  local log=$1
  shift
  rm -f "$work/port"
  "$weft" serve "$work/gpt.safetensors" --port 0 --port-file "$work/port" "$@" > "$log" 2>&1 &
  server=$!
  for _ in $(seq 300); do [ -s "$work/port" ] && break; pause 0.1; done
  [ -s "$work/port" ] || { echo "FAIL: the front end did not start"; cat "$log"; exit 1; }
  port=$(cat "$work/port")
}
"$weft" train --model gpt --layers 2 --d-model 32 --heads 4 --context 32 --batch 8 --max-steps 10 --eval-every 10 \
  --eval-batches 1 --sample 0 --quiet --threads 1 --save-model "$work/gpt.safetensors" >/dev/null

start_server "$work/fixed.log" --replicas 2
"$weft" serve-bench --url "http://127.0.0.1:$port" --concurrency 8 --requests 300 --max-tokens 48 --json \
  > "$work/bench.json" &
bench=$!
sleep 1
victim=$(grep -o 'replica 1 (pid [0-9]*' "$work/fixed.log" | head -1 | grep -o '[0-9]*$')
kill -9 "$victim"
wait "$bench" || { echo "FAIL: requests failed after a replica was killed"; cat "$work/bench.json"; exit 1; }
python3 - "$work/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["requests"] == 300 and r["errors"] == 0, r
assert r["tokens"] == 300 * 48, f"{r['tokens']} tokens, expected {300 * 48}: a stream was lost or doubled"
print(f"300 streamed completions, 0 errors, {r['tokens']} tokens: none lost or doubled")
PY
for _ in $(seq 100); do count_lines "*replica 1 (pid *) ready*" "$work/fixed.log"; [ "$count" -ge 2 ] && break; pause 0.1; done
grep -q "replica 1 died (killed by signal 9); restarting it" "$work/fixed.log" || { echo "FAIL: no restart"; cat "$work/fixed.log"; exit 1; }
metrics=$(curl -s "http://127.0.0.1:$port/metrics")
grep -q '^weft_replica_restarts_total 1$' <<<"$metrics" || { echo "FAIL: the restart is not counted"; exit 1; }
grep -q '^weft_replicas 2$' <<<"$metrics" || { echo "FAIL: not back to 2 replicas"; grep replicas <<<"$metrics"; exit 1; }
echo "the killed replica was restarted; $(grep '^weft_retries_total' <<<"$metrics")"
stop_server
grep -q "weft serve: stopped" "$work/fixed.log"
[ -z "$(pgrep -f "$work/gpt.safetensors" || true)" ] || { echo "FAIL: replicas left running"; exit 1; }

# Streams of several choices whose replica is killed resume on the other: every stream ends
# whole, and each choice is the same text in all of them (the same request, each choice with
# its own seed), none cut, doubled or taken from another choice.
start_server "$work/choices.log" --replicas 2
python3 - "$port" "$work/choices.log" <<'PY'
import json, os, re, signal, sys, threading, time, urllib.request
port, log = int(sys.argv[1]), sys.argv[2]
body = json.dumps({"prompt": "The ", "n": 3, "max_tokens": 96, "temperature": 1.0, "seed": 7, "stream": True}).encode()
results, failures = [], []

def stream():
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    texts, finished, done = {}, {}, False
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r.read().decode().split("\n\n"):
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                if "error" in event:
                    failures.append(event)
                for c in event.get("choices", []):
                    texts[c["index"]] = texts.get(c["index"], "") + c.get("text", "")
                    if c.get("finish_reason"):
                        finished[c["index"]] = finished.get(c["index"], 0) + 1
    results.append((texts, finished, done))

def worker():
    for _ in range(10):
        stream()

def retries():
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return float(re.search(r"^weft_retries_total (\S+)$", metrics, re.M).group(1))

workers = [threading.Thread(target=worker) for _ in range(6)]
start = time.monotonic()
for w in workers:
    w.start()
while len(results) < 6:  # (all 6 clients streaming: each has finished one)
    time.sleep(0.01)
victim = int(re.search(r"replica 1 \(pid (\d+)", open(log).read()).group(1))
os.kill(victim, signal.SIGKILL)
at_kill = len(results)
for w in workers:
    w.join()
print(f"killed replica 1 after {at_kill} of 60 streams ({time.monotonic() - start:.1f} s in all)")
assert not failures, failures[:2]
assert len(results) == 60 and all(done for _, _, done in results), "a stream did not end with [DONE]"
first = results[0][0]
assert sorted(first) == [0, 1, 2] and len(set(first.values())) == 3, first
for texts, finished, _ in results:
    assert texts == first, f"a choice differs: {texts} against {first}"
    assert finished == {0: 1, 1: 1, 2: 1}, f"finish events per choice: {finished}"
assert retries() >= 1, "no stream was cut (the replica was killed after they ended)"
print(f"60 streams of 3 choices, {retries():.0f} resumed on the other replica: every choice whole and the same")
PY
stop_server

start_server "$work/elastic.log" --replicas 1:3 --scale-up-load 4 --scale-down-after 1
"$weft" serve-bench --url "http://127.0.0.1:$port" --concurrency 1 --requests 10 --max-tokens 48 >/dev/null
# 16 clients until the front end scales up (600 requests at most).
"$weft" serve-bench --url "http://127.0.0.1:$port" --concurrency 16 --requests 600 --max-tokens 48 >/dev/null &
bench=$!
for _ in $(seq 300); do
  count_lines "*scaling up to 2 replica(s)*" "$work/elastic.log"
  [ "$count" -gt 0 ] && break
  kill -0 "$bench" 2>/dev/null || break
  pause 0.1
done
kill "$bench" 2>/dev/null || true
wait "$bench" 2>/dev/null || true
grep -q "scaling up to 2 replica(s)" "$work/elastic.log" || { echo "FAIL: 16 clients did not scale up"; cat "$work/elastic.log"; exit 1; }
"$weft" serve-bench --url "http://127.0.0.1:$port" --concurrency 1 --requests 10 --max-tokens 48 >/dev/null
for _ in $(seq 200); do  # (the log first: the gauge is read once the log says a replica stopped)
  count_lines "*stopped (1 left)*" "$work/elastic.log"
  [ "$count" -gt 0 ] && curl -s "http://127.0.0.1:$port/metrics" | grep -q '^weft_replicas 1$' && break
  pause 0.1
done
grep -q "scaling down to 1 replica(s)" "$work/elastic.log" || { echo "FAIL: did not scale back down"; cat "$work/elastic.log"; exit 1; }
metrics=$(curl -s "http://127.0.0.1:$port/metrics")
grep -q '^weft_replicas 1$' <<<"$metrics" || { echo "FAIL: not back to 1 replica"; exit 1; }
grep '^weft_scaling_events_total' <<<"$metrics"
grep "scaling" "$work/elastic.log"
stop_server

# Five cycles: a replica scaled up after one was drained must start (a fresh port file), four
# times. The load must fit in one replica for only 0.2 s before the second one is drained.
replicas() { curl -s "http://127.0.0.1:$port/metrics" | grep '^weft_replicas ' | cut -d' ' -f2; }
start_server "$work/cycles.log" --replicas 1:2 --scale-up-load 1 --scale-down-after 0.2
cycles=5
for cycle in $(seq "$cycles"); do
  "$weft" serve-bench --url "http://127.0.0.1:$port" --concurrency 4 --requests 100000 --max-tokens 48 >/dev/null 2>&1 &
  bench=$!
  # (the log first, the cycle's replica 1 ready; then the gauge)
  for _ in $(seq 300); do
    count_lines "*replica 1 (pid *) ready on *" "$work/cycles.log"
    [ "$count" -ge "$cycle" ] && [ "$(replicas)" = 2 ] && break
    pause 0.1
  done
  if [ "$cycle" = "$cycles" ]; then
    pause 1.2  # (a scrape of both replicas)
    before=$(curl -s "http://127.0.0.1:$port/metrics" | grep '^weft_generated_tokens_total ' | cut -d' ' -f2)
  fi
  kill "$bench" 2>/dev/null || true
  wait "$bench" 2>/dev/null || true
  [ "$(replicas)" = 2 ] || { echo "FAIL: cycle $cycle: no second replica ready"; cat "$work/cycles.log"; exit 1; }
  for _ in $(seq 300); do
    count_lines "*stopped (1 left)*" "$work/cycles.log"
    [ "$count" = "$cycle" ] && [ "$(replicas)" = 1 ] && break
    pause 0.1
  done
  [ "$(grep -c 'stopped (1 left)' "$work/cycles.log")" = "$cycle" ] || { echo "FAIL: cycle $cycle: no scale-down"; cat "$work/cycles.log"; exit 1; }
done
pause 1.2
after=$(curl -s "http://127.0.0.1:$port/metrics" | grep '^weft_generated_tokens_total ' | cut -d' ' -f2)
awk -v a="$after" -v b="$before" 'BEGIN { exit !(a >= b && b > 0) }' ||
  { echo "FAIL: the tokens counted went from $before to $after as a replica stopped"; exit 1; }
ports=$(grep -o 'replica 1 (pid [0-9]*) ready on 127.0.0.1:[0-9]*' "$work/cycles.log" | sort -u | wc -l)
[ "$ports" = "$cycles" ] || { echo "FAIL: $ports replicas became ready in $cycles cycles"; cat "$work/cycles.log"; exit 1; }
echo "elastic 1:2: $cycles cycles of load and quiet: scaled up and down $cycles times, each new replica ready; the front end's"\
  "token count never went back ($after at the end)"
stop_server

# A replica that cannot start (its model file is gone): as the front end starts, it fails at
# once naming the replica, under the replica's own error; a scale-up that cannot start is
# tried again after 1 s, then 2 s, ..., not in a loop, while the running replica serves on.
code=0
out=$(timeout 60 "$weft" serve "$work/missing.safetensors" --port 0 --replicas 1:2 2>&1) || code=$?
[ "$code" = 1 ] || fail "exit $code for a missing model behind replicas: $out"
grep -q "missing.safetensors does not exist" <<<"$out" || fail "no replica's error: $out"
grep -q "^error: replica 0 could not start (exit code 1); its error is above$" <<<"$out" || fail "no start failure: $out"
[ "$(grep -c 'does not exist' <<<"$out")" = 1 ] || fail "the replica was started again: $out"
cp "$work/gpt.safetensors" "$work/gone.safetensors"
rm -f "$work/port"
"$weft" serve "$work/gone.safetensors" --port 0 --port-file "$work/port" --replicas 1:2 --scale-up-load 1 \
  > "$work/gone.log" 2>&1 &
server=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; pause 0.1; done
port=$(cat "$work/port")
rm "$work/gone.safetensors"
# Load in rounds of 200 requests, each of which must succeed, until the second try is logged.
for round in $(seq 30); do
  "$weft" serve-bench --url "http://127.0.0.1:$port" --concurrency 4 --requests 200 --max-tokens 48 --json > "$work/gone.json" ||
    fail "the running replica stopped serving: $(cat "$work/gone.json" "$work/gone.log")"
  grep -q "trying again in 2 s" "$work/gone.log" && break
done
grep -q "replica 1 could not start (exit code 1); trying again in 1 s" "$work/gone.log" &&
  grep -q "replica 1 could not start (exit code 1); trying again in 2 s" "$work/gone.log" ||
  fail "no retries with a growing wait: $(cat "$work/gone.log")"
tries=$(grep -c "could not start" "$work/gone.log")
[ "$tries" -le 4 ] || fail "$tries failed starts: started in a loop: $(cat "$work/gone.log")"
stop_server
echo "a replica that cannot start: the front end refuses at start-up; a scale-up is tried again after 1 s, 2 s ($tries tries)"
