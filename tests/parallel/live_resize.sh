#!/usr/bin/env bash
# usage: live_resize.sh WEFT COMPARE
# A live elastic job (weft launch --elastic) changes its ranks while it trains, without a
# restart (train/elastic.h):
#  1. It grows 2 -> 4 ranks (a second launcher joins with --join) and shrinks 4 -> 3 (one
#     joined rank gets SIGTERM), mid-epoch: every sample of the epoch is trained exactly once,
#     the replicas end identical, and with the global batch fixed the parameters equal an
#     unresized run's within a relative 1e-5.
#  2. Under ZeRO-3 rank 0 itself leaves: its state goes to rank 1 and is re-sharded over the
#     3 that stay; the parameters again equal the unresized run's.
#  2b. A rank dies (SIGKILL) in a 4-rank job: the survivors agree in the store who is left
#     and go on as 3 from the most advanced one's state; the parameters again equal the
#     unresized run's, and the launcher ends well.
#  3. --elastic-batch linear --scale-lr sqrt: 2 -> 4 ranks doubles the global batch and
#     multiplies the learning rate by sqrt(2).
#  4. A process started for another model is refused before it asks to join; SIGTERM to
#     the launcher: every rank leaves at the same step boundary, the job stops with a
#     checkpoint of that step, and a plain run resumes from it.
#  5. --grow-at 4:4,12:3: the job asks for 2 more ranks at step 4, which a launcher that
#     only offers places (--join --nproc-per-node 0:2) starts, and lets one go at step 12;
#     again every sample once and the unresized run's parameters.
#  6. --grow-at noise: with a global batch of 16 the gradient noise scale soon exceeds what
#     3 ranks would train at, and the job grows from 2 to 3 (--max-ranks 3).
#  7. The parameter server (--strategy ps, 1 server, the last rank in every generation):
#     --grow-at 4:4,12:3 grows 2 workers to 3 and shrinks them back; every sample once and
#     the unresized run's parameters. SIGTERM to the server stops the job with a checkpoint
#     (its shard of the state has nowhere to go), and a plain run resumes from it to the
#     unresized run's parameters.
#  8. Refusals: one line each, exit 2.
# The ranks are slowed (WEFT_STRAGGLER) so that the changes land mid-epoch.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
WEFT_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export WEFT_JOB_TOKEN
# 20 steps: in longer runs a rounding difference of the reduction orders sooner or later
# flips a ReLU (its input near 0) and the runs part (on 3200 samples, 1 rank against 4 agree
# within 3e-7 for 15 steps and differ by 3e-4 from step 16 on).
mlp=(train --model mlp --batch 64 --epochs 1 --limit-train 1280 --limit-test 100 --seed 5 --optimizer sgd --lr 0.02
     --quiet)
launchers=()
trap 'for p in "${launchers[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

# wait_for FILE PATTERN: until FILE holds PATTERN (at most 120 s).
wait_for() {
  for _ in $(seq 1200); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no '$2' in $1: $(cat "$1")"
}
# worker_pid VAR=VALUE...: this job's training process whose environment holds every VAR=VALUE.
# (pgrep narrows the search to the training processes first: reading every process of a
# busy machine took seconds, in which the job could end.)
worker_pid() {
  local pid
  for pid in $(pgrep -f "weft train --model mlp"); do
    local env
    env=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) || continue
    grep -qx "WEFT_JOB_TOKEN=$WEFT_JOB_TOKEN" <<<"$env" || continue
    grep -q '^WEFT_ELASTIC_STORE=' <<<"$env" || continue
    local want ok=1
    for want in "$@"; do grep -qx "$want" <<<"$env" || ok=0; done
    [ "$ok" = 1 ] && { echo "$pid"; return 0; }
  done
  fail "no training process with $*"
}
# join_address FILE: the address a live launcher printed to FILE.
join_address() { wait_for "$1" "add ranks with"; grep -o 'join [^ ]*' "$1" | head -n 1 | cut -d' ' -f2; }

# 1. 2 ranks, 2 more join, one of them leaves; against an unresized 2-rank run.
"$weft" launch --nproc-per-node 2 -- weft "${mlp[@]}" --save-model "$work/whole.safetensors" >/dev/null
WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --sample-log "$work/samples" \
  --save-model "$work/live.safetensors" >"$work/out" 2>"$work/err" &
launchers+=($!)
first=$!
address=$(join_address "$work/err")
"$weft" launch --join "$address" --nproc-per-node 2 -- weft "${mlp[@]}" --sample-log "$work/samples" \
  >"$work/join-out" 2>"$work/join-err" &
launchers+=($!)
joiner=$!
wait_for "$work/out" "resized: 2 -> 4 ranks"
kill -TERM "$(worker_pid WEFT_ELASTIC_JOIN=1 LOCAL_RANK=1)"
wait_for "$work/out" "resized: 4 -> 3 ranks"
wait "$first" || fail "the live job failed: $(cat "$work/out" "$work/err")"
wait "$joiner" || fail "the joining launcher failed: $(cat "$work/join-out" "$work/join-err")"
grep -q "left the job after step" "$work/join-err" || fail "the rank told to leave did not say so: $(cat "$work/join-err")"
grep -q '"replicas_identical":true' "$work/out" || fail "the replicas differ after the changes"
grep -q '"resizes":\[{' "$work/out" || fail "the summary records no resizes"
cat "$work"/samples-rank* | awk '$1 == 0 { print $3 }' | sort -n | uniq -c >"$work/counts"
[ "$(wc -l <"$work/counts")" -eq 1280 ] || fail "$(wc -l <"$work/counts") distinct samples trained, expected 1280"
[ "$(awk '$1 != 1' "$work/counts" | wc -l)" -eq 0 ] || fail "samples trained more than once"
grep -o 'resized: [^;]*; training paused [0-9.]* s' "$work/out"
printf '2 -> 4 -> 3 ranks (1280 samples, each once): '
"$compare" "$work/whole.safetensors" "$work/live.safetensors" 1e-5 | tail -n 1

# 2. ZeRO-3 on 4 ranks; rank 0 leaves.
zero=("${mlp[@]}" --zero 3)
"$weft" launch --nproc-per-node 2 -- weft "${zero[@]}" --save-model "$work/zero-whole.safetensors" >/dev/null
WEFT_STRAGGLER=1:250 "$weft" launch --elastic --nproc-per-node 4 -- weft "${zero[@]}" \
  --save-model "$work/zero-live.safetensors" >"$work/out" 2>"$work/err" &
launchers+=($!)
first=$!
wait_for "$work/out" "layout: 4 ranks"
kill -TERM "$(worker_pid RANK=0)"
wait "$first" || fail "the ZeRO-3 live job failed: $(cat "$work/out" "$work/err")"
grep -q "resized: 4 -> 3 ranks" "$work/out" || fail "no 4 -> 3 change: $(cat "$work/out")"
printf 'ZeRO-3, rank 0 leaves (4 -> 3): '
"$compare" "$work/zero-whole.safetensors" "$work/zero-live.safetensors" 1e-5 | tail -n 1

# 2b. A rank dies.
WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 4 -- weft "${mlp[@]}" \
  --save-model "$work/failed.safetensors" >"$work/out" 2>"$work/err" &
launchers+=($!)
first=$!
wait_for "$work/out" "layout: 4 ranks"
sleep 1
kill -KILL "$(worker_pid RANK=2)"
wait "$first" || fail "the live job did not survive a dead rank: $(cat "$work/out" "$work/err")"
grep -q "resized: 4 -> 3 ranks at step [0-9]* (1 failed)" "$work/out" || fail "no recovery: $(cat "$work/out" "$work/err")"
grep -q "rank 2 failed (killed by signal Killed); the live job goes on without it" "$work/err" ||
  fail "the launcher did not say the job goes on: $(cat "$work/err")"
printf 'a rank killed (4 -> 3): '
"$compare" "$work/whole.safetensors" "$work/failed.safetensors" 1e-5 | tail -n 1

# 3. The batch follows the ranks.
WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --elastic-batch linear \
  --scale-lr sqrt >"$work/out" 2>"$work/err" &
launchers+=($!)
first=$!
address=$(join_address "$work/err")
"$weft" launch --join "$address" --nproc-per-node 2 -- weft "${mlp[@]}" --elastic-batch linear --scale-lr sqrt \
  >/dev/null 2>&1 &
launchers+=($!)
joiner=$!
wait "$first" || fail "the linear-batch job failed: $(cat "$work/out" "$work/err")"
wait "$joiner" || true
grep -q "resized: 2 -> 4 ranks at step [0-9]* (2 joined): batch 128, learning rate 0.0282842" "$work/out" ||
  fail "the batch and rate did not follow 2 -> 4 ranks: $(cat "$work/out")"
echo "linear batch: $(grep -o 'resized: [^;]*' "$work/out")"

# 4. The whole job asked to stop.
WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --checkpoint-dir "$work/ck" \
  >"$work/out" 2>"$work/err" &
launchers+=($!)
first=$!
wait_for "$work/out" "layout: 2 ranks"
# A process started for another model is refused before it asks to join.
expect_refusal "the job trains model mlp with sgd, fp32 precision, data fashion-mnist; this process would train model cnn" \
  "$weft" launch --join "$(join_address "$work/err")" --nproc-per-node 1 -- weft train --model cnn --quiet
grep -q "resized" "$work/out" && fail "the refused process changed the job: $(cat "$work/out")"
kill -TERM "$first"
code=0
wait "$first" || code=$?
[ "$code" -eq 143 ] || fail "the launcher ended with $code after SIGTERM, expected 143"
step=$(grep -o 'stopping after step [0-9]*' "$work/out" | grep -o '[0-9]*$') || fail "no stop: $(cat "$work/out" "$work/err")"
[ -d "$work/ck/step-$(printf '%09d' "$step")" ] || fail "no checkpoint of step $step: $(ls "$work/ck")"
out=$("$weft" "${mlp[@]}" --checkpoint-dir "$work/ck" --resume --max-steps $((step + 2)))
grep -q "\"resumed_from\":$step" <<<"$out" || fail "no resume from step $step: $out"
echo "stopped by SIGTERM after step $step, checkpointed, resumed"

# 5. The job's own schedule, with places offered by a second launcher.
WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --grow-at 4:4,12:3 \
  --sample-log "$work/grow" --save-model "$work/grow.safetensors" >"$work/out" 2>"$work/err" &
launchers+=($!)
first=$!
address=$(join_address "$work/err")
"$weft" launch --join "$address" --nproc-per-node 0:2 -- weft "${mlp[@]}" --grow-at 4:4,12:3 --sample-log "$work/grow" \
  >"$work/join-out" 2>"$work/join-err" &
launchers+=($!)
joiner=$!
wait "$first" || fail "the scheduled job failed: $(cat "$work/out" "$work/err")"
wait "$joiner" || fail "the launcher that offered places failed: $(cat "$work/join-out" "$work/join-err")"
grep -q "resized: 2 -> 4 ranks at step [0-9]* (2 joined)" "$work/out" || fail "the 2 ranks asked for did not join together"
for want in "growing to 4 ranks (--grow-at 4:4): asked the launchers for 2 more" "resized: 2 -> 4 ranks" \
  "shrinking to 3 rank(s) (--grow-at 12:3)" "resized: 4 -> 3 ranks at step 12"; do
  grep -qF "$want" "$work/out" || fail "no '$want': $(cat "$work/out")"
done
cat "$work"/grow-rank* | awk '{ print $3 }' | sort -n | uniq -c >"$work/counts"
[ "$(wc -l <"$work/counts")" -eq 1280 ] && [ "$(awk '$1 != 1' "$work/counts" | wc -l)" -eq 0 ] ||
  fail "the scheduled job did not train each of the 1280 samples once"
printf -- '--grow-at 4:4,12:3 (2 -> 4 -> 3 ranks): '
"$compare" "$work/whole.safetensors" "$work/grow.safetensors" 1e-5 | tail -n 1

# 6. The gradient noise scale grows the job.
noise=(train --model mlp --batch 16 --epochs 1 --limit-train 1280 --limit-test 100 --seed 5 --quiet
       --elastic-batch linear --grow-at noise --max-ranks 3)
WEFT_STRAGGLER=0:50 "$weft" launch --elastic --nproc-per-node 2:3 -- weft "${noise[@]}" >"$work/out" 2>"$work/err" &
launchers+=($!)
first=$!
wait "$first" || fail "the noise-scale job failed: $(cat "$work/out" "$work/err")"
grep -q "growing to 3 ranks (--grow-at noise: gradient noise scale [0-9]*, global batch 16)" "$work/out" ||
  fail "the noise scale did not grow the job: $(cat "$work/out")"
grep -q "resized: 2 -> 3 ranks at step [0-9]* (1 joined): batch 24" "$work/out" || fail "no 2 -> 3: $(cat "$work/out")"
echo "noise: $(grep -o 'growing to 3 ranks ([^)]*)' "$work/out")"

# 7. The parameter server.
ps=("${mlp[@]}" --strategy ps)
"$weft" launch --nproc-per-node 3 -- weft "${ps[@]}" --save-model "$work/ps-whole.safetensors" >/dev/null
WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 3:4 -- weft "${ps[@]}" --grow-at 4:4,12:3 \
  --sample-log "$work/ps" --save-model "$work/ps-live.safetensors" >"$work/out" 2>"$work/err" &
launchers+=($!)
first=$!
wait "$first" || fail "the live parameter-server job failed: $(cat "$work/out" "$work/err")"
for want in "growing to 4 ranks (--grow-at 4:4): asked the launchers for 1 more" "resized: 2 -> 3 workers at step" \
  "layout: 4 ranks, dp 3" "shrinking to 3 rank(s) (--grow-at 12:3)" "resized: 3 -> 2 workers at step 12"; do
  grep -qF "$want" "$work/out" || fail "no '$want': $(cat "$work/out")"
done
cat "$work"/ps-rank* | awk '{ print $3 }' | sort -n | uniq -c >"$work/counts"
[ "$(wc -l <"$work/counts")" -eq 1280 ] && [ "$(awk '$1 != 1' "$work/counts" | wc -l)" -eq 0 ] ||
  fail "the parameter-server job did not train each of the 1280 samples once"
printf 'parameter server, 2 -> 3 -> 2 workers: '
"$compare" "$work/ps-whole.safetensors" "$work/ps-live.safetensors" 1e-5 | tail -n 1
WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 3 -- weft "${ps[@]}" --checkpoint-dir "$work/ps-ck" \
  >"$work/out" 2>"$work/err" &
launchers+=($!)
first=$!
wait_for "$work/out" "layout: 3 ranks"
sleep 1
kill -TERM "$(worker_pid RANK=2)"
wait "$first" || fail "the parameter-server job did not stop well: $(cat "$work/out" "$work/err")"
step=$(grep -o 'stopping after step [0-9]*: a parameter server was asked to leave' "$work/out" | grep -o '[0-9]*:' | tr -d :) ||
  fail "no stop: $(cat "$work/out" "$work/err")"
"$weft" launch --nproc-per-node 3 -- weft "${ps[@]}" --checkpoint-dir "$work/ps-ck" --resume \
  --save-model "$work/ps-resumed.safetensors" >/dev/null
printf 'parameter server asked to leave after step %s; resumed: ' "$step"
"$compare" "$work/ps-whole.safetensors" "$work/ps-resumed.safetensors" 1e-5 | tail -n 1

# 8. Refusals.
expect_refusal "is not HOST:PORT" "$weft" launch --join nowhere -- weft "${mlp[@]}"
expect_refusal "leave out --nnodes" "$weft" launch --elastic --nnodes 2 -- weft "${mlp[@]}"
expect_refusal "needs WEFT_JOB_TOKEN" env -u WEFT_JOB_TOKEN "$weft" launch --elastic -- weft "${mlp[@]}"
expect_refusal "elastic-batch: unknown value .some. (known: fixed, linear)" "$weft" "${mlp[@]}" --elastic-batch some
expect_refusal "data parallelism alone" "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --strategy fedavg
expect_refusal "parameter server is synchronous" "$weft" launch --elastic --nproc-per-node 3 -- weft "${ps[@]}" --staleness 1
expect_refusal "is not noise or STEP:RANKS" "$weft" "${mlp[@]}" --grow-at 5:0
expect_refusal "changes a live job's ranks" "$weft" "${mlp[@]}" --grow-at 5:4
expect_refusal "needs --elastic-batch linear" "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --grow-at noise
expect_refusal "needs --elastic or --join" "$weft" launch --nproc-per-node 2:4 -- weft "${mlp[@]}"
echo "refusals: 10 one-line errors"
