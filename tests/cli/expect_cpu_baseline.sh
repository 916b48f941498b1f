#!/usr/bin/env bash
# usage: expect_cpu_baseline.sh WEFT
# The processor check before main (util/cpu.h): a baseline this processor lacks, simulated
# with WEFT_CPU_BASELINE, stops every command with one line naming what is missing and exit
# status 2, before anything runs; a malformed value is one line too; a baseline it has
# changes nothing. The run summary names the level weft's loops ran at, and WEFT_CPU_ISA caps it.
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

# The level of weft's loops in the run summary, capped by WEFT_CPU_ISA.
run=(train --model mlp --max-steps 2 --limit-train 128 --limit-test 10 --quiet --threads 1)
level=baseline
case $flags in *" avx2 "*) level=avx2 ;; esac
"$weft" "${run[@]}" | tail -n 1 | json_value kernels | grep -q "; loops $level (built for " ||
  fail "the summary does not name the loops' level $level"
WEFT_CPU_ISA=sse41 "$weft" "${run[@]}" | tail -n 1 | json_value kernels | grep -q "^kernels: sse41; loops baseline " ||
  fail "WEFT_CPU_ISA=sse41 did not cap the loops"
echo ok
