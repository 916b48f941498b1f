#!/usr/bin/env bash
# usage: scripts/fault-drill.sh [KILLS] [SEED]
# A fault drill for data-parallel training: the CNN trains on 2 ranks under
# `weft launch --max-restarts KILLS` (checkpoint every 10 steps, --auto-resume) while a rank
# chosen at random is killed (SIGKILL) KILLS times (default 10), each at a random moment
# 0.3-2.5 s after the job made progress again (the first once a checkpoint exists). The
# final checkpoint must be byte-identical to an uninterrupted run's. Prints per kill the time
# until the launcher restarted the job (the death detected, the survivor stopped) and until
# the job wrote a checkpoint newer than the newest at the kill (restarted, rendezvous,
# loaded, the lost steps redone: progress again), and the total time against the
# uninterrupted run.
set -uo pipefail
kills=${1:-10}
seed=${2:-1}
cd "$(dirname "$0")/.."
weft=$(realpath build/weft)
[ -x "$weft" ] || { echo "build weft first (make build)"; exit 1; }
work=$(mktemp -d)
launcher=
trap '[ -n "$launcher" ] && kill "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
RANDOM=$seed
common=(train --model cnn --batch 48 --epochs 12 --limit-train 2400 --limit-test 100 --seed 5 --quiet
        --checkpoint-every 10 --auto-resume)
now() { date +%s.%N; }

t0=$(now)
"$weft" launch --nproc-per-node 2 -- "$weft" "${common[@]}" --checkpoint-dir "$work/ref" >/dev/null || { echo "the reference run failed"; exit 1; }
ref_seconds=$(echo "$(now) - $t0" | bc)

t0=$(now)
"$weft" launch --nproc-per-node 2 --max-restarts "$kills" -- "$weft" "${common[@]}" --checkpoint-dir "$work/run" \
  >"$work/log" 2>&1 &
launcher=$!
printf '%-5s %-5s %-10s %-14s %s\n' kill rank "at (s)" "restarted (s)" "progress again (s)"
newest() { ls -d "$work"/run/step-* 2>/dev/null | tail -n 1; }
restarts() { grep -c "restarting all ranks" "$work/log" || true; }
until [ -n "$(newest)" ] || ! kill -0 "$launcher" 2>/dev/null; do sleep 0.02; done
done_kills=0
for k in $(seq 1 "$kills"); do
  sleep "$(echo "scale=2; (30 + $RANDOM % 220) / 100" | bc)"
  kill -0 "$launcher" 2>/dev/null || break
  ranks=($(pgrep -P "$launcher" || true))
  [ ${#ranks[@]} -gt 0 ] || break
  pick=$((RANDOM % ${#ranks[@]}))
  before=$(restarts)
  last=$(newest)
  at=$(now)
  kill -9 "${ranks[$pick]}" 2>/dev/null || continue
  while kill -0 "$launcher" 2>/dev/null && [ "$(restarts)" -le "$before" ]; do sleep 0.01; done
  restarted=$(now)
  while kill -0 "$launcher" 2>/dev/null && [ "$(newest)" = "$last" ]; do sleep 0.01; done
  printf '%-5s %-5s %-10.2f %-14.2f %.2f\n' "$k" "$pick" "$(echo "$at - $t0" | bc)" "$(echo "$restarted - $at" | bc)" \
    "$(echo "$(now) - $at" | bc)"
  done_kills=$k
done
wait "$launcher"
rc=$?
launcher=
run_seconds=$(echo "$(now) - $t0" | bc)
a=$(ls -d "$work"/ref/step-* | tail -n 1)
b=$(ls -d "$work"/run/step-* | tail -n 1)
same=no
cmp -s "$a/model.safetensors" "$b/model.safetensors" && cmp -s "$a/optimizer.safetensors" "$b/optimizer.safetensors" &&
  [ "$(basename "$a")" = "$(basename "$b")" ] && same=yes
echo "kills: $done_kills, restarts logged: $(grep -c 'restarting all ranks' "$work/log"), job exit code $rc"
printf 'uninterrupted run %.1f s, with the kills %.1f s\n' "$ref_seconds" "$run_seconds"
echo "final checkpoint $(basename "$b") byte-identical to the uninterrupted run's: $same"
[ "$rc" -eq 0 ] && [ "$same" = yes ]
