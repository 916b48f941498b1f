#!/usr/bin/env bash
# usage: stall.sh WEFT SOURCE_DIR
# A run that cannot finish says why, on stdout and in summary.json: a workload whose ranks
# each wait for the other's message names the cycle of ranks; a PFC deadlock (a ring with a
# cyclic buffer dependency, watchdog off) names the cycle of paused links; a host cut off
# by a failed link is named as unreachable. Each exits 3 (not finished), never hangs, and
# says how long it ran (wall time, events/s, peak memory) as a finished run does, and how many
# of its flows completed (the completion times are theirs).
set -u
weft=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect() {  # expect NAME REGEX... -- ARGS
  local name=$1; shift
  local regexes=()
  while [ "$1" != "--" ]; do regexes+=("$1"); shift; done
  shift
  timeout 120 "$weft" sim --quiet --out "$work/$name" "$@" >"$work/$name.txt" 2>&1
  local rc=$?
  [ "$rc" -eq 3 ] || { cat "$work/$name.txt"; fail "$name: exit code $rc, expected 3 (not finished)"; }
  for r in "${regexes[@]}"; do
    grep -Eq -- "$r" "$work/$name.txt" || { cat "$work/$name.txt"; fail "$name: no line matches /$r/"; }
  done
  echo "ok: $name"; grep -E "^(NOT|deadlock|PFC|no route)" "$work/$name.txt"
}
json() { /usr/bin/python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$work/$1/summary.json" "$2"; }

expect trace "no event left|stopped at sim.time_limit" "^stopped after wall [0-9.]+ s, [0-9.]+ M events/s, peak memory [0-9]+ MiB$" \
  "rank 0: step 1 of 2, waiting for 1 message from rank 1" \
  "^deadlock: rank 0 -> rank 1 -> rank 0 " -- \
  --topology "$src/examples/topologies/single-switch.yaml" --workload "$src/tests/sim/bad/trace-deadlock" --set time_limit=1ms
[ "$(json trace 'd["stall"]["deadlock"]')" = "['rank 0', 'rank 1']" ] || fail "summary.json: $(json trace 'd["stall"]')"

expect pfc "^PFC deadlock on traffic class 3: a cycle of paused links s0->s1, s1->s2, s2->s3, s3->s4, s4->s0, back to s0->s1" -- \
  --topology "$src/examples/topologies/ring-5.yaml" --workload "$src/examples/jobs/ring-shift.yaml" --cc none \
  --set pfc.watchdog=0 --set time_limit=20ms
[ "$(json pfc 'len(d["stall"]["pfc_deadlock"]["links"])')" = 5 ] || fail "summary.json: $(json pfc 'd["stall"]')"
# With the watchdog on (the default) it breaks the pauses, and the summary says so.
expect watchdog "the PFC watchdog broke [0-9]+ pause storms" -- \
  --topology "$src/examples/topologies/ring-5.yaml" --workload "$src/examples/jobs/ring-shift.yaml" --cc none \
  --set pfc.watchdog=1ms --set time_limit=5ms

cat >"$work/cut.yaml" <<'YAML'
jobs:
  - {src: 0, dst: 1, size: 1MB}
failures:
  - {at: 1us, link_down: [host1.gpu0, switch]}
YAML
expect cut "^no route: rank 0 \(host0.gpu0\) cannot reach rank 1 \(host1.gpu0\)" -- \
  --topology "$src/examples/topologies/single-switch.yaml" --workload "$work/cut.yaml" --set time_limit=2ms
[ "$(json cut 'd["stall"]["unroutable"]')" = "[['rank 0', 'rank 1']]" ] || fail "summary.json: $(json cut 'd["stall"]')"
# Stopped by the time limit with one of two flows done: the completion times are that one's.
cat >"$work/two.yaml" <<'YAML'
jobs:
  - {src: 0, dst: 1, size: 1MB}
  - {src: 2, dst: 3, size: 1GB}
YAML
expect partial "^flows: 2 \(1 completed\), completion mean [0-9.]+ us" -- \
  --topology "$src/examples/topologies/single-switch.yaml" --workload "$work/two.yaml" --set time_limit=1ms
expect none "^flows: 2, none completed$" -- \
  --topology "$src/examples/topologies/single-switch.yaml" --workload incast:2:1GB --set time_limit=1ms
# A ring all-reduce stopped by the time limit mid-way: each rank waits for a message already
# on its way, which is no deadlock, and the collective has no time (it did not finish).
expect ring "^no deadlock found: the run reached sim.time_limit" \
  "^collective allreduce/ring, 953.67 MiB on 16 ranks: not finished$" -- \
  --topology "$src/examples/topologies/single-switch.yaml" --workload allreduce:ring:1GB --set time_limit=1ms
! grep -q "^deadlock:" "$work/ring.txt" || fail "ring: a stopped ring all-reduce was called a deadlock"
[ "$(json ring '(d["collectives"][0].get("finished"), "time_us" in d["collectives"][0])')" = "(False, False)" ] ||
  fail "summary.json: $(json ring 'd["collectives"]')"
echo "PASS"
