#!/usr/bin/env bash
# usage: shm_leftovers.sh WEFT
# A rank that dies with its shared-memory segment still named (killed during rendezvous,
# before the names are unlinked) leaves nothing in /dev/shm: its launcher removes the
# segments named after its pid. Here each rank plays the dying one: it creates
# /dev/shm/weft-...-p<its pid> and exits with an error.
set -uo pipefail
weft=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$weft" launch --nproc-per-node 2 -- bash -c 'touch /dev/shm/weft-leftover-test-$RANK-p$$; echo $$; exit 3' >"$out" 2>&1
rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: the launch should have failed"; exit 1; }
pids=$(grep -oE '^\[[0-9]\] [0-9]+$' "$out" | awk '{print $2}')
[ -n "$pids" ] || { echo "FAIL: no rank pids"; cat "$out"; exit 1; }
for p in $pids; do
  if ls /dev/shm/weft-*-p"$p" >/dev/null 2>&1; then
    echo "FAIL: /dev/shm still holds $(ls /dev/shm/weft-*-p"$p")"
    rm -f /dev/shm/weft-*-p"$p"
    exit 1
  fi
done
echo "ok: the segments of ranks $(echo $pids) were removed"
