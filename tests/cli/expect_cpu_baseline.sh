#!/usr/bin/env bash
# usage: expect_cpu_baseline.sh WEFT
# The processor check before main (util/cpu.h): a baseline this processor lacks, simulated
# with WEFT_CPU_BASELINE, stops every command with one line naming what is missing and exit
# status 2, before anything runs; a malformed value is one line too; a baseline it has
# changes nothing. Ranks at different levels keep identical replicas. The run summary names
# the level weft's loops ran at, and WEFT_CPU_ISA caps it.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1

flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
absent=""
for f in avx512_fp16 amx_tile avx512f avx2 sse4a; do
  case $flags in *" $f "*) ;; *) absent=$f; break ;; esac
done
[ -n "$absent" ] || fail "this processor has every candidate; add one it lacks"

expect_refusal() {  # WEFT_CPU_BASELINE pattern command...
  local value=$1 pattern=$2
  shift 2
  set +e
  err=$(WEFT_CPU_BASELINE=$value "$weft" "$@" 2>&1 >/dev/null)
  rc=$?
  set -e
  echo "WEFT_CPU_BASELINE=$value weft $* -> exit $rc: $err"
  [ "$rc" -eq 2 ] || fail "exit $rc, not 2"
  [ "$(echo "$err" | wc -l)" -eq 1 ] || fail "more than one line"
  echo "$err" | grep -qE "$pattern" || fail "the line does not say '$pattern'"
}
expect_refusal "$absent" "^error: this processor lacks $absent, which this build of weft needs \(baseline " --version
expect_refusal "x86-64-v2,$absent" "lacks $absent," train --model mlp --max-steps 1
expect_refusal "x86-64-v7" "^error: WEFT_CPU_BASELINE: unknown level or instruction set 'x86-64-v7'" --version
WEFT_CPU_BASELINE=x86-64-v2,sse4_2 "$weft" --version | grep -q "^weft" || fail "a baseline the processor has was refused"

# A data-parallel job whose ranks run at different levels (as on nodes of different kinds:
# two launchers, the first capped at the baseline) keeps bitwise identical replicas: the libraries'
# products differ in their last bits, but every rank applies the same averaged gradient with
# the same loops.
new_work_dir
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
job=(train --model mlp --max-steps 30 --limit-train 1920 --limit-test 100 --quiet)
for node in 0 1; do
  isa=""
  [ "$node" -eq 0 ] && isa=sse41
  WEFT_CPU_ISA=$isa WEFT_JOB_TOKEN=$token "$weft" launch --nproc-per-node 1 --nnodes 2 --node-rank "$node" \
    --master-addr 127.0.0.1 --master-port "$port" -- "$weft" "${job[@]}" > "$work/node$node.txt" 2>&1 &
done
wait
grep -q '"replicas_identical":true' "$work/node0.txt" || fail "ranks at two levels: $(cat "$work"/node*.txt)"
grep -q 'loops baseline' "$work/node0.txt" || fail "the first node's rank did not run at the baseline: $(cat "$work/node0.txt")"
echo "a job with ranks at the baseline and at the processor's level: replicas identical"

# The level of weft's loops in the run summary, capped by WEFT_CPU_ISA.
run=(train --model mlp --max-steps 2 --limit-train 128 --limit-test 10 --quiet --threads 1)
level=baseline
case $flags in *" avx2 "*) level=avx2 ;; esac
"$weft" "${run[@]}" | tail -n 1 | json_value kernels | grep -q "; loops $level (built for " ||
  fail "the summary does not name the loops' level $level"
WEFT_CPU_ISA=sse41 "$weft" "${run[@]}" | tail -n 1 | json_value kernels | grep -q "^kernels: sse41; loops baseline " ||
  fail "WEFT_CPU_ISA=sse41 did not cap the loops"
echo ok
