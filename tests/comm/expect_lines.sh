#!/usr/bin/env bash
# usage: expect_lines.sh N REGEX COMMAND...
# Runs COMMAND (expected to fail) and passes when its output has at least N lines matching
# REGEX. Prints the output.
set -u
n=$1
regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
echo "$out"
echo "exit code: $rc"
got=$(grep -cE -- "$regex" <<<"$out")
if [ "$rc" -eq 0 ]; then echo "FAIL: the job succeeded"; exit 1; fi
if [ "$got" -lt "$n" ]; then echo "FAIL: $got lines match /$regex/, expected $n"; exit 1; fi
echo "ok: $got lines match"
