#!/usr/bin/env bash
# usage: expect_error.sh REGEX COMMAND [ARGS...]
# Passes when COMMAND exits with a code in 1..125 (an error, not a crash or a signal) and
# prints exactly one line on stderr, starting with "error: " and matching REGEX.
set -u
regex=$1
shift
err=$(mktemp)
trap 'rm -f "$err"' EXIT
timeout 120 "$@" >/dev/null 2>"$err"
rc=$?
lines=$(wc -l <"$err")
msg=$(cat "$err")
if [ "$rc" -eq 0 ]; then echo "FAIL: exit code 0, expected an error"; exit 1; fi
if [ "$rc" -ge 124 ]; then echo "FAIL: exit code $rc (crash, signal or timeout); stderr: $msg"; exit 1; fi
if [ "$lines" -ne 1 ]; then echo "FAIL: expected one line on stderr, got $lines: $msg"; exit 1; fi
case "$msg" in error:\ *) ;; *) echo "FAIL: stderr does not start with 'error: ': $msg"; exit 1;; esac
if ! grep -Eq -- "$regex" "$err"; then echo "FAIL: '$msg' does not match /$regex/"; exit 1; fi
echo "ok (exit $rc): $msg"
