#!/usr/bin/env bash
# usage: scripts/run-fuzzers.sh BUILD_DIR SECONDS [HARNESS...]
# Runs each libFuzzer harness of fuzz/ for SECONDS from its committed seed corpus (new inputs
# go to a scratch corpus, not the repository) and prints executions and their rate. Fails
# on the first harness that finds a crash, leak, timeout or sanitizer report; the input that
# did it is left in the current folder (crash-*, leak-*, timeout-*).
set -uo pipefail
build=$1
seconds=$2
shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(safetensors topology serve_api idx store trace checkpoint_meta handshake gpt2_tokenizer chakra http_server)
export LSAN_OPTIONS="suppressions=$repo/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
for h in "${harnesses[@]}"; do
  mkdir -p "$scratch/$h"
  log="$scratch/$h.log"
  "$build/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "$scratch/$h" "$repo/fuzz/corpus/$h" >"$log" 2>&1
  rc=$?
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  if [ "$rc" -ne 0 ]; then
    echo "fuzz_$h: FAILED (exit $rc) after ${runs:-?} executions"
    grep -E "ERROR|SUMMARY|==[0-9]+==" "$log" | head -20
    failed=1
  else
    printf 'fuzz_%-16s %10s executions in %s s (%s/s), no crash\n' "$h" "${runs:-?}" "$seconds" "${rate:-?}"
  fi
done
exit $failed
