#!/usr/bin/env bash
# usage: launcher_killed.sh WEFT
# A launcher killed outright (SIGKILL: none of its code runs) takes its workers with it: each
# gets SIGTERM, as from a launcher that stops, and none is left running.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
"$weft" launch --nproc-per-node 2 -- sleep 60 >/dev/null 2>&1 &
launcher=$!
trap 'kill -9 $launcher 2>/dev/null || true' EXIT
workers=""
for _ in $(seq 100); do
  workers=$(echo $(pgrep -P "$launcher" || true))
  [ "$(wc -w <<<"$workers")" = 2 ] && break
  sleep 0.1
done
[ "$(wc -w <<<"$workers")" = 2 ] || { echo "FAIL: the launcher started no 2 workers ($workers)"; exit 1; }
{ kill -9 "$launcher"; wait "$launcher"; } 2>/dev/null || true
# shellcheck disable=SC2086  # (the workers' pids, one word each)
wait_gone 10 $workers
[ -z "$alive" ] || { echo "FAIL: workers$alive outlived their launcher"; kill $alive; exit 1; }
echo "a launcher killed with SIGKILL: its 2 workers ($workers) stopped"
