#!/usr/bin/env bash
# usage: expect_error.sh REGEX COMMAND [ARGS...]
# Passes when COMMAND exits with a code in 1..125 (an error, not a crash or a signal) and
# prints exactly one line on stderr, starting with "error: " and matching REGEX (an extended
# regular expression, as grep -E reads it).
# Bash alone reads what the command printed (no temporary file, wc, cat or grep: each such
# process costs this script milliseconds, and some 220 tests run it).
set -u
regex=$1
shift
# The command's stderr, then a newline and its exit code (stdout dropped).
out=$({ timeout 120 "$@" 2>&1 >/dev/null; printf '\n%d' "$?"; })
rc=${out##*$'\n'}
msg=${out%$'\n'*}
newlines=${msg//[!$'\n']/}
lines=${#newlines}  # (as wc -l counts them)
msg=${msg%$'\n'}
if [ "$rc" -eq 0 ]; then echo "FAIL: exit code 0, expected an error"; exit 1; fi
if [ "$rc" -ge 124 ]; then echo "FAIL: exit code $rc (crash, signal or timeout); stderr: $msg"; exit 1; fi
if [ "$lines" -ne 1 ]; then echo "FAIL: expected one line on stderr, got $lines: $msg"; exit 1; fi
case "$msg" in error:\ *) ;; *) echo "FAIL: stderr does not start with 'error: ': $msg"; exit 1;; esac
if ! [[ $msg =~ $regex ]]; then echo "FAIL: '$msg' does not match /$regex/"; exit 1; fi
echo "ok (exit $rc): $msg"
