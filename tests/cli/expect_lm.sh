#!/usr/bin/env bash
# usage: expect_lm.sh MARGIN MIN_KNOWN COMMAND [ARGS...]
# Runs a language-model training command and passes when its final JSON summary reports a
# validation loss at least MARGIN nats below the unigram entropy (the best a model that
# ignores context can do) and at least MIN_KNOWN of the generated words occur in the corpus.
set -u
margin=$1
min_known=$2
shift 2
out=$("$@")
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: exit code $rc"; exit 1; }
summary=$(echo "$out" | tail -n 1)
field() { echo "$summary" | grep -o "\"$1\":[-0-9.e]*" | cut -d: -f2; }
val=$(field val_loss)
ent=$(field unigram_entropy)
known=$(field sample_known_words)
[ -n "$val" ] && [ -n "$ent" ] && [ -n "$known" ] || { echo "FAIL: no val_loss/unigram_entropy/sample_known_words"; exit 1; }
if ! awk -v v="$val" -v e="$ent" -v m="$margin" 'BEGIN { exit !(v <= e - m) }'; then
  echo "FAIL: validation loss $val is not $margin below the unigram entropy $ent"
  exit 1
fi
if ! awk -v k="$known" -v m="$min_known" 'BEGIN { exit !(k >= m) }'; then
  echo "FAIL: only $known of the generated words occur in the corpus (want >= $min_known)"
  exit 1
fi
echo "ok: validation loss $val <= $ent - $margin; $known of the generated words are real"
