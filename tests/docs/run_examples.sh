#!/usr/bin/env bash
# usage: run_examples.sh BIN_DIR PAGE.md [shown-output]
# Runs every command of a user page as written: each line "$ ..." inside a ```console
# block, in a fresh folder, with BIN_DIR first on PATH (so "weft" is the built binary).
# A command must succeed, unless the page shows "error: ..." as its first line of output:
# then it must fail with that message. With "shown-output" (pages whose commands print the
# same thing on every machine), every line the page shows under a command must be a line of
# what it printed, but for the machine's speed (wall time, events/s, peak memory, available
# memory); a shown line ending in "..." is a line's beginning. With EXAMPLES_DIR set, the
# commands run in that (empty) folder, which is kept for the caller's own checks.
set -u
bin_dir=$(cd "$1" && pwd)
page=$2
shown_output=${3:-}
# What differs between machines and runs, blanked on both sides.
normalize() {
  sed -E 's/wall [0-9.]+ s, [0-9.]+ M events\/s, peak memory [0-9]+ MiB/wall _ s, _ M events\/s, peak memory _ MiB/;
          s/the [0-9.]+ GiB this machine has available/the _ GiB this machine has available/'
}
if [[ -n ${EXAMPLES_DIR:-} ]]; then
  work=$EXAMPLES_DIR
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
export PATH="$bin_dir:$PATH"
repo=$(cd "$(dirname "$page")/.." && pwd)
cd "$work"
# Pages refer to the repository's example files as examples/..., and to the build folder
# (the one holding the weft binary) as build/.
ln -s "$repo/examples" examples
ln -s "$bin_dir" build

mapfile -t lines <"$page"
in_block=0
failures=0
count=0
for ((i = 0; i < ${#lines[@]}; i++)); do
  line=${lines[$i]}
  if [[ $line == '```console'* ]]; then in_block=1; continue; fi
  if [[ $line == '```'* ]]; then in_block=0; continue; fi
  [[ $in_block -eq 1 && $line == '$ '* ]] || continue
  cmd=${line#\$ }
  expected=""
  next=${lines[$((i + 1))]:-}
  [[ $next == error:* ]] && expected=$next
  count=$((count + 1))
  echo "--- \$ $cmd"
  started=$SECONDS
  out=$(timeout 900 bash -c "$cmd" 2>&1)
  rc=$?
  echo "$out" | tail -n 5
  echo "(exit $rc, $((SECONDS - started)) s)"
  if [[ -n $shown_output ]]; then
    printed=$(normalize <<<"$out")
    for ((j = i + 1; j < ${#lines[@]}; j++)); do
      shown=${lines[$j]}
      [[ $shown == '$ '* || $shown == '```'* ]] && break
      [[ $shown == error:* ]] && continue
      want=$(normalize <<<"$shown")
      if [[ $want == *... ]]; then
        grep -qF -- "${want%...}" <<<"$printed" && continue
      else
        grep -qxF -- "$want" <<<"$printed" && continue
      fi
      echo "FAIL: the page shows a line the command did not print: $shown"; failures=$((failures + 1))
    done
  fi
  if [[ -n $expected ]]; then
    if [[ $rc -eq 0 || $rc -ge 124 ]]; then
      echo "FAIL: expected an error ('$expected'), exit code $rc"; failures=$((failures + 1))
    elif ! grep -qF -- "${expected%...}" <<<"$out"; then
      echo "FAIL: expected '$expected'"; failures=$((failures + 1))
    fi
  elif [[ $rc -ne 0 ]]; then
    echo "FAIL: exit code $rc"; failures=$((failures + 1))
  fi
done
echo "$count examples, $failures failed"
[[ $count -gt 0 && $failures -eq 0 ]]
