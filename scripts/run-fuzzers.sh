#!/usr/bin/env bash
# usage: scripts/run-fuzzers.sh BUILD_DIR SECONDS [HARNESS...]
# Runs each libFuzzer harness of fuzz/ for SECONDS from its committed seed corpus (new inputs
# go to a scratch corpus, not the repository) and prints executions and their rate, in the
# order given. FUZZ_JOBS harnesses run side by side (default: the processors), each one
# process for its full SECONDS. Fails if any harness finds a crash, leak, timeout or sanitizer
# report; the input that did it is left in the current folder (crash-*, leak-*, timeout-*).
set -uo pipefail
build=$1
seconds=$2
shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(safetensors topology serve_api idx store trace checkpoint_meta handshake gpt2_tokenizer chakra http_server)
jobs=${FUZZ_JOBS:-$(nproc)}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "error: FUZZ_JOBS must be a positive integer, not '$jobs'" >&2; exit 2; }
for h in "${harnesses[@]}"; do
  [ -x "$build/fuzz_$h" ] || { echo "error: no harness $build/fuzz_$h" >&2; exit 2; }
done
export LSAN_OPTIONS="suppressions=$repo/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

fuzz_one() {  # writes $scratch/$1.log and $scratch/$1.rc
  local h=$1
  mkdir -p "$scratch/$h"
  "$build/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "$scratch/$h" "$repo/fuzz/corpus/$h" >"$scratch/$h.log" 2>&1
  echo $? >"$scratch/$h.rc"
}

for h in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  fuzz_one "$h" &
done
wait

failed=0
for h in "${harnesses[@]}"; do
  log="$scratch/$h.log"
  rc=$(cat "$scratch/$h.rc" 2>/dev/null || echo 1)
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
