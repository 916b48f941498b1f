# Helpers the test scripts share (sourced).

# new_work_dir: sets $work to a fresh folder, removed when the script exits.
new_work_dir() {
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
}

# fail MESSAGE...: prints FAIL: MESSAGE and ends the script.
fail() { echo "FAIL: $*"; exit 1; }

# pause SECONDS: sleeps without starting a process (a read that times out on a FIFO only this
# script holds open): a polling loop's /usr/bin/sleep, curl and grep at 10 Hz took half a core
# of the machine while serve.replicas waited for its front end to scale.
pause() {
  if [ -z "${pause_fd:-}" ]; then
    local fifo
    fifo=$(mktemp -u)
    mkfifo "$fifo"
    exec {pause_fd}<>"$fifo"
    rm -f "$fifo"
  fi
  read -r -t "$1" -u "$pause_fd" _ || true
}

# count_lines GLOB FILE: sets $count to the number of FILE's lines that GLOB (a bash pattern
# for the whole line) matches, with bash alone (no grep process).
count_lines() {
  count=0
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    # shellcheck disable=SC2053  # (a pattern, on purpose)
    if [[ $line == $1 ]]; then count=$((count + 1)); fi
  done < "$2"
  return 0
}

# wait_gone SECONDS PID...: waits up to SECONDS for the processes to end; sets $alive to those
# still running (empty when none is).
wait_gone() {
  local tenths=$(($1 * 10)) pid
  shift
  for _ in $(seq "$tenths"); do
    alive=""
    for pid in "$@"; do ! kill -0 "$pid" 2>/dev/null || alive+=" $pid"; done
    [ -z "$alive" ] && return 0
    sleep 0.1
  done
}

# json_value NAME: field NAME of the JSON object on the last line of standard input (any
# JSON value, printed as Python prints it).
json_value() { python3 -c "import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }

# json_field NAME: the last value of "NAME": in the JSON summaries read from standard input.
json_field() { grep -o "\"$1\":[-0-9.e+]*" | tail -n 1 | cut -d: -f2; }

# rank0_field NAME: json_field of rank 0's summary in weft launch's output (standard input).
rank0_field() { grep '^\[0\] {' | json_field "$1"; }

# close_to A B REL: succeeds when |A - B| <= REL * |B|.
close_to() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; exit !(d <= r * b) }'; }

# expect_same_run LABEL REF.safetensors RUN.safetensors REF_LOSS LOSS: prints LABEL and how far
# RUN's parameters are from REF's ($compare, the checkpoint comparer, fails the script beyond
# a relative 1e-5), and fails the script unless the losses agree within a relative 1e-5.
expect_same_run() {
  local label=$1 ref=$2 run=$3 ref_loss=$4 loss=$5
  printf '%s: ' "$label"
  "$compare" "$ref" "$run" 1e-5 | tail -n 1
  close_to "$loss" "$ref_loss" 1e-5 || { echo "FAIL: loss $loss vs $ref_loss ($label)"; exit 1; }
}

# expect_bitwise_resume DIR LABEL COMMAND...: COMMAND (a training run of 20 steps) checkpoints
# every 10 steps into DIR; with its step-20 checkpoint removed, as if it had died after step
# 10, COMMAND --resume must continue from step 10 and save the very same parameters.
# Leaves DIR/step-000000010 and the model DIR-full.safetensors.
expect_bitwise_resume() {
  local dir=$1 label=$2
  shift 2
  rm -rf "$dir"
  "$@" --checkpoint-dir "$dir" --checkpoint-every 10 --save-model "$dir-full.safetensors" >/dev/null
  rm -rf "$dir/step-000000020"
  local out
  out=$("$@" --checkpoint-dir "$dir" --resume --save-model "$dir-resumed.safetensors")
  grep -q '"resumed_from":10' <<<"$out" || { echo "FAIL: did not resume at step 10 ($label)"; exit 1; }
  cmp -s "$dir-full.safetensors" "$dir-resumed.safetensors" || { echo "FAIL: the resumed run differs ($label)"; exit 1; }
  echo "$label: resumed at step 10, bitwise equal to the uninterrupted run"
}

# expect_refusal PATTERN COMMAND...: COMMAND fails with exit code 2 (a configuration error)
# and an output that matches PATTERN (grep), or the script fails.
expect_refusal() {
  local want=$1
  shift
  local code=0 got
  got=$("$@" 2>&1) || code=$?
  [ "$code" -eq 2 ] || fail "exit $code (expected 2) for $*: $got"
  grep -q -- "$want" <<<"$got" || fail "no '$want' for $*: $got"
}

# refused_folder LABEL EXPECTED-TEXT DIR: weft generate on the model folder DIR ($weft) fails
# with one line that holds EXPECTED-TEXT.
refused_folder() {
  local out
  if out=$("$weft" generate "$3" --prompt "a" --max-tokens 1 2>&1); then fail "$1: no error"; fi
  [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "$1: more than one line: $out"
  grep -qF -- "$2" <<<"$out" || fail "$1: expected '$2' in: $out"
  echo "refused ($1): $out"
}

# broken_folder FROM NAME PYTHON-EDIT: $work/NAME, a copy of the model folder FROM whose
# config.json (the dict c) or files (in the folder d) PYTHON-EDIT changes.
broken_folder() {
  rm -rf "$work/$2" && cp -r "$1" "$work/$2"
  python3 - "$work/$2" "$3" <<'PY'
import json, os, sys
d, edit = sys.argv[1], sys.argv[2]
c = json.load(open(os.path.join(d, "config.json")))
exec(edit)
json.dump(c, open(os.path.join(d, "config.json"), "w"))
PY
}

# same_generation A B LABEL TOKENS: the models A and B ($weft) continue a prompt greedily with
# the same prompt ids, tokens and text.
same_generation() {
  local a b
  a=$("$weft" generate "$1" --prompt "The meaning of" --max-tokens "$4" --temperature 0 --json)
  b=$("$weft" generate "$2" --prompt "The meaning of" --max-tokens "$4" --temperature 0 --json)
  python3 - "$a" "$b" "$3" <<'PY' || fail "$3: other tokens"
import json, sys
a, b = (json.loads(t) for t in sys.argv[1:3])
for key in ("prompt_token_ids", "tokens", "text"):
    assert a[key] == b[key], f"{key}:\n {a[key]!r}\n {b[key]!r}"
print(f"{sys.argv[3]}: the same {len(a['tokens'])} tokens from the same prompt ids")
PY
}
