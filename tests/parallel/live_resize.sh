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
# The ranks are slowed (WEFT_STRAGGLER) so that the changes land mid-epoch. The scenarios run
# three at a time, each job with its own token and files (the ranks mostly sleep: 16 s of
# processor time in 42 s of wall one after another, 19 s of wall three at a time).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
compare=$2
new_work_dir
new_token() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
WEFT_JOB_TOKEN=$(new_token)
export WEFT_JOB_TOKEN
# 20 steps: in longer runs a rounding difference of the reduction orders sooner or later
# flips a ReLU (its input near 0) and the runs part (on 3200 samples, 1 rank against 4 agree
# within 3e-7 for 15 steps and differ by 3e-4 from step 16 on).
mlp=(train --model mlp --batch 64 --epochs 1 --limit-train 1280 --limit-test 100 --seed 5 --optimizer sgd --lr 0.02
     --quiet)
ps=("${mlp[@]}" --strategy ps)

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
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ") || continue
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
# each_sample_once LOGS...: every one of the 1280 samples in the sample logs trained once
# (the counts in the scenario's folder, $d/counts).
each_sample_once() {
  cat "$@" | awk '{ print $3 }' | sort -n | uniq -c >"$d/counts"
  [ "$(wc -l <"$d/counts")" -eq 1280 ] && [ "$(awk '$1 != 1' "$d/counts" | wc -l)" -eq 0 ]
}
# scenario NAME: a folder of its own ($d) and a job token of its own, for a scenario run in a
# subshell beside others; the subshell stops its launchers when it ends.
scenario() {
  d=$work/$1
  mkdir -p "$d"
  WEFT_JOB_TOKEN=$(new_token)
  export WEFT_JOB_TOKEN
}
launchers=()
stop_launchers() { for p in "${launchers[@]}"; do kill "$p" 2>/dev/null || true; done; }

# 1. 2 ranks, 2 more join, one of them leaves; against an unresized 2-rank run.
grow_and_shrink() {
  scenario grow_and_shrink
  WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --sample-log "$d/samples" \
    --save-model "$d/live.safetensors" >"$d/out" 2>"$d/err" &
  launchers+=($!)
  local first=$! address joiner
  address=$(join_address "$d/err")
  "$weft" launch --join "$address" --nproc-per-node 2 -- weft "${mlp[@]}" --sample-log "$d/samples" \
    >"$d/join-out" 2>"$d/join-err" &
  launchers+=($!)
  joiner=$!
  # (the joining launcher's two ranks join at one step boundary, or at two on a busy machine)
  wait_for "$d/out" "resized: [23] -> 4 ranks"
  kill -TERM "$(worker_pid WEFT_ELASTIC_JOIN=1 LOCAL_RANK=1)"
  wait_for "$d/out" "resized: 4 -> 3 ranks"
  wait "$first" || fail "the live job failed: $(cat "$d/out" "$d/err")"
  wait "$joiner" || fail "the joining launcher failed: $(cat "$d/join-out" "$d/join-err")"
  grep -q "left the job after step" "$d/join-err" || fail "the rank told to leave did not say so: $(cat "$d/join-err")"
  grep -q '"replicas_identical":true' "$d/out" || fail "the replicas differ after the changes"
  grep -q '"resizes":\[{' "$d/out" || fail "the summary records no resizes"
  cat "$d"/samples-rank* | awk '$1 == 0' >"$d/epoch0"
  each_sample_once "$d/epoch0" || fail "the live job did not train each of the 1280 samples once"
  grep -o 'resized: [^;]*; training paused [0-9.]* s' "$d/out"
  printf '2 -> 4 -> 3 ranks (1280 samples, each once): '
  "$compare" "$work/whole.safetensors" "$d/live.safetensors" 1e-5 | tail -n 1
}

# 2. ZeRO-3 on 4 ranks; rank 0 leaves.
zero3_rank0_leaves() {
  scenario zero3
  local zero=("${mlp[@]}" --zero 3)
  "$weft" launch --nproc-per-node 2 -- weft "${zero[@]}" --save-model "$d/whole.safetensors" >/dev/null
  WEFT_STRAGGLER=1:250 "$weft" launch --elastic --nproc-per-node 4 -- weft "${zero[@]}" \
    --save-model "$d/live.safetensors" >"$d/out" 2>"$d/err" &
  launchers+=($!)
  local first=$!
  wait_for "$d/out" "layout: 4 ranks"
  kill -TERM "$(worker_pid RANK=0)"
  wait "$first" || fail "the ZeRO-3 live job failed: $(cat "$d/out" "$d/err")"
  grep -q "resized: 4 -> 3 ranks" "$d/out" || fail "no 4 -> 3 change: $(cat "$d/out")"
  printf 'ZeRO-3, rank 0 leaves (4 -> 3): '
  "$compare" "$d/whole.safetensors" "$d/live.safetensors" 1e-5 | tail -n 1
}

# 2b. A rank dies.
rank_dies() {
  scenario rank_dies
  WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 4 -- weft "${mlp[@]}" \
    --save-model "$d/failed.safetensors" >"$d/out" 2>"$d/err" &
  launchers+=($!)
  local first=$!
  wait_for "$d/out" "layout: 4 ranks"
  sleep 1
  kill -KILL "$(worker_pid RANK=2)"
  wait "$first" || fail "the live job did not survive a dead rank: $(cat "$d/out" "$d/err")"
  grep -q "resized: 4 -> 3 ranks at step [0-9]* (1 failed)" "$d/out" || fail "no recovery: $(cat "$d/out" "$d/err")"
  grep -q "rank 2 failed (killed by signal Killed); the live job goes on without it" "$d/err" ||
    fail "the launcher did not say the job goes on: $(cat "$d/err")"
  printf 'a rank killed (4 -> 3): '
  "$compare" "$work/whole.safetensors" "$d/failed.safetensors" 1e-5 | tail -n 1
}

# 3. The batch follows the ranks.
linear_batch() {
  scenario linear_batch
  WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --elastic-batch linear \
    --scale-lr sqrt >"$d/out" 2>"$d/err" &
  launchers+=($!)
  local first=$! address joiner
  address=$(join_address "$d/err")
  "$weft" launch --join "$address" --nproc-per-node 2 -- weft "${mlp[@]}" --elastic-batch linear --scale-lr sqrt \
    >/dev/null 2>&1 &
  launchers+=($!)
  joiner=$!
  wait "$first" || fail "the linear-batch job failed: $(cat "$d/out" "$d/err")"
  wait "$joiner" || true
  # (the two ranks join at one step boundary, or at two on a busy machine: 2 -> 3 -> 4, batch 96 then 128)
  grep -q "resized: [23] -> 4 ranks at step [0-9]* ([12] joined): batch 128, learning rate 0.0282842" "$d/out" ||
    fail "the batch and rate did not follow 2 -> 4 ranks: $(cat "$d/out")"
  grep -o 'resized: [0-9]* -> [0-9]* ranks at step [0-9]* ([0-9] joined): batch [0-9]*, learning rate [0-9.]*' "$d/out" |
    awk '{ to = $4; batch = $12 + 0; lr = $15
           if (batch != 32 * to || (lr - 0.02 * sqrt(to / 2)) ^ 2 > 1e-12) { print; bad = 1 } } END { exit bad }' ||
    fail "a resize's batch or rate does not follow its ranks: $(cat "$d/out")"
  echo "linear batch: $(grep -o 'resized: [^;]*' "$d/out")"
}

# 4. The whole job asked to stop.
job_stopped() {
  scenario job_stopped
  WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --checkpoint-dir "$d/ck" \
    >"$d/out" 2>"$d/err" &
  launchers+=($!)
  local first=$! code=0 step out
  wait_for "$d/out" "layout: 2 ranks"
  # A process started for another model is refused before it asks to join.
  expect_refusal "the job trains model mlp with sgd, fp32 precision, data fashion-mnist; this process would train model cnn" \
    "$weft" launch --join "$(join_address "$d/err")" --nproc-per-node 1 -- weft train --model cnn --quiet
  grep -q "resized" "$d/out" && fail "the refused process changed the job: $(cat "$d/out")"
  kill -TERM "$first"
  wait "$first" || code=$?
  [ "$code" -eq 143 ] || fail "the launcher ended with $code after SIGTERM, expected 143"
  step=$(grep -o 'stopping after step [0-9]*' "$d/out" | grep -o '[0-9]*$') || fail "no stop: $(cat "$d/out" "$d/err")"
  [ -d "$d/ck/step-$(printf '%09d' "$step")" ] || fail "no checkpoint of step $step: $(ls "$d/ck")"
  out=$("$weft" "${mlp[@]}" --checkpoint-dir "$d/ck" --resume --max-steps $((step + 2)))
  grep -q "\"resumed_from\":$step" <<<"$out" || fail "no resume from step $step: $out"
  echo "stopped by SIGTERM after step $step, checkpointed, resumed"
}

# 5. The job's own schedule, with places offered by a second launcher.
own_schedule() {
  scenario own_schedule
  WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 2 -- weft "${mlp[@]}" --grow-at 4:4,12:3 \
    --sample-log "$d/grow" --save-model "$d/grow.safetensors" >"$d/out" 2>"$d/err" &
  launchers+=($!)
  local first=$! address joiner want
  address=$(join_address "$d/err")
  "$weft" launch --join "$address" --nproc-per-node 0:2 -- weft "${mlp[@]}" --grow-at 4:4,12:3 --sample-log "$d/grow" \
    >"$d/join-out" 2>"$d/join-err" &
  launchers+=($!)
  joiner=$!
  wait "$first" || fail "the scheduled job failed: $(cat "$d/out" "$d/err")"
  wait "$joiner" || fail "the launcher that offered places failed: $(cat "$d/join-out" "$d/join-err")"
  grep -q "resized: 2 -> 4 ranks at step [0-9]* (2 joined)" "$d/out" || fail "the 2 ranks asked for did not join together"
  for want in "growing to 4 ranks (--grow-at 4:4): asked the launchers for 2 more" "resized: 2 -> 4 ranks" \
    "shrinking to 3 rank(s) (--grow-at 12:3)" "resized: 4 -> 3 ranks at step 12"; do
    grep -qF "$want" "$d/out" || fail "no '$want': $(cat "$d/out")"
  done
  each_sample_once "$d"/grow-rank* || fail "the scheduled job did not train each of the 1280 samples once"
  printf -- '--grow-at 4:4,12:3 (2 -> 4 -> 3 ranks): '
  "$compare" "$work/whole.safetensors" "$d/grow.safetensors" 1e-5 | tail -n 1
}

# 6. The gradient noise scale grows the job.
noise_scale() {
  scenario noise_scale
  local noise=(train --model mlp --batch 16 --epochs 1 --limit-train 1280 --limit-test 100 --seed 5 --quiet
               --elastic-batch linear --grow-at noise --max-ranks 3)
  WEFT_STRAGGLER=0:50 "$weft" launch --elastic --nproc-per-node 2:3 -- weft "${noise[@]}" >"$d/out" 2>"$d/err" &
  launchers+=($!)
  local first=$!
  wait "$first" || fail "the noise-scale job failed: $(cat "$d/out" "$d/err")"
  grep -q "growing to 3 ranks (--grow-at noise: gradient noise scale [0-9]*, global batch 16)" "$d/out" ||
    fail "the noise scale did not grow the job: $(cat "$d/out")"
  grep -q "resized: 2 -> 3 ranks at step [0-9]* (1 joined): batch 24" "$d/out" || fail "no 2 -> 3: $(cat "$d/out")"
  echo "noise: $(grep -o 'growing to 3 ranks ([^)]*)' "$d/out")"
}

# 7. The parameter server.
parameter_server() {
  scenario parameter_server
  "$weft" launch --nproc-per-node 3 -- weft "${ps[@]}" --save-model "$d/whole.safetensors" >/dev/null
  WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 3:4 -- weft "${ps[@]}" --grow-at 4:4,12:3 \
    --sample-log "$d/ps" --save-model "$d/live.safetensors" >"$d/out" 2>"$d/err" &
  launchers+=($!)
  local first=$! want step
  wait "$first" || fail "the live parameter-server job failed: $(cat "$d/out" "$d/err")"
  for want in "growing to 4 ranks (--grow-at 4:4): asked the launchers for 1 more" "resized: 2 -> 3 workers at step" \
    "layout: 4 ranks, dp 3" "shrinking to 3 rank(s) (--grow-at 12:3)" "resized: 3 -> 2 workers at step 12"; do
    grep -qF "$want" "$d/out" || fail "no '$want': $(cat "$d/out")"
  done
  each_sample_once "$d"/ps-rank* || fail "the parameter-server job did not train each of the 1280 samples once"
  printf 'parameter server, 2 -> 3 -> 2 workers: '
  "$compare" "$d/whole.safetensors" "$d/live.safetensors" 1e-5 | tail -n 1
  WEFT_STRAGGLER=0:250 "$weft" launch --elastic --nproc-per-node 3 -- weft "${ps[@]}" --checkpoint-dir "$d/ck" \
    >"$d/out" 2>"$d/err" &
  launchers+=($!)
  first=$!
  wait_for "$d/out" "layout: 3 ranks"
  sleep 1
  kill -TERM "$(worker_pid RANK=2)"
  wait "$first" || fail "the parameter-server job did not stop well: $(cat "$d/out" "$d/err")"
  step=$(grep -o 'stopping after step [0-9]*: a parameter server was asked to leave' "$d/out" | grep -o '[0-9]*:' | tr -d :) ||
    fail "no stop: $(cat "$d/out" "$d/err")"
  "$weft" launch --nproc-per-node 3 -- weft "${ps[@]}" --checkpoint-dir "$d/ck" --resume \
    --save-model "$d/resumed.safetensors" >/dev/null
  printf 'parameter server asked to leave after step %s; resumed: ' "$step"
  "$compare" "$d/whole.safetensors" "$d/resumed.safetensors" 1e-5 | tail -n 1
}

# The unresized run that scenarios 1, 2b and 5 are held to; then three groups of scenarios at
# once (each group in a subshell that stops its own launchers), their outputs in order.
"$weft" launch --nproc-per-node 2 -- weft "${mlp[@]}" --save-model "$work/whole.safetensors" >/dev/null
groups=("grow_and_shrink rank_dies job_stopped" "zero3_rank0_leaves linear_batch own_schedule" "noise_scale parameter_server")
pids=()
for i in "${!groups[@]}"; do
  (trap stop_launchers EXIT; for s in ${groups[$i]}; do $s; done) >"$work/group-$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!groups[@]}"; do
  wait "${pids[$i]}" || failed=1
done
cat "$work"/group-*.log
[ "$failed" = 0 ] || fail "a scenario failed (above)"

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
