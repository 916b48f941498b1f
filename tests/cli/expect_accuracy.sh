#!/usr/bin/env bash
# usage: expect_accuracy.sh MIN COMMAND [ARGS...]
# Runs a training command and passes when its final JSON summary reports
# test_accuracy >= MIN.
set -u
min=$1
shift
out=$("$@")
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: exit code $rc"; exit 1; }
acc=$(echo "$out" | tail -n 1 | grep -o '"test_accuracy":[0-9.]*' | cut -d: -f2)
[ -n "$acc" ] || { echo "FAIL: no test_accuracy in the summary"; exit 1; }
if awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }'; then
  echo "ok: test accuracy $acc >= $min"
else
  echo "FAIL: test accuracy $acc < $min"
  exit 1
fi
