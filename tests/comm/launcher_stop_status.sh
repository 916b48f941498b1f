#!/usr/bin/env bash
# usage: launcher_stop_status.sh WEFT
# weft launch's exit status after SIGTERM: by default 128 + 15 whatever the ranks do
# (torchrun's); with --stop-status ranks, the ranks' own: 0 when both stop cleanly, a rank's
# code when it does not, 143 when a rank dies of the signal.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
launcher=""
trap '[ -z "$launcher" ] || kill -9 "$launcher" 2>/dev/null || true' EXIT
stopped_with() {  # EXIT_ON_TERM [LAUNCH FLAGS...]: the launcher's status after SIGTERM
  local on_term=$1
  shift
  local ready
  ready=$(mktemp -d)
  # shellcheck disable=SC2016  # (expanded by the ranks' shell)
  "$weft" launch --nproc-per-node 2 "$@" -- bash -c "$on_term"' sleep 60 & touch "$0/$RANK"; wait' "$ready" \
    >/dev/null 2>&1 &
  launcher=$!
  for _ in $(seq 100); do [ -e "$ready/0" ] && [ -e "$ready/1" ] && break; sleep 0.1; done
  [ -e "$ready/0" ] && [ -e "$ready/1" ] || fail "the ranks did not start"
  kill -TERM "$launcher"
  local rc=0
  wait "$launcher" || rc=$?
  launcher=""
  rm -rf "$ready"
  echo "$rc"
}
clean='trap "exit 0" TERM;'
[ "$(stopped_with "$clean")" = 143 ] || fail "by default: not 143 after SIGTERM"
[ "$(stopped_with "$clean" --stop-status ranks)" = 0 ] || fail "--stop-status ranks: not 0 when the ranks stop cleanly"
[ "$(stopped_with 'trap "exit 3" TERM;' --stop-status ranks)" = 3 ] || fail "--stop-status ranks: not the ranks' 3"
[ "$(stopped_with '' --stop-status ranks)" = 143 ] || fail "--stop-status ranks: not 143 for ranks killed by the signal"
echo "after SIGTERM: 143 by default; with --stop-status ranks 0, 3 and 143 as the ranks ended"
