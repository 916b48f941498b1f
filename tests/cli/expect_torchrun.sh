#!/usr/bin/env bash
# weft launch as a drop-in for torchrun: torchrun's spellings, a Python script run with
# python3, PyTorch's env:// rendezvous, the TORCHELASTIC_* variables across a restart,
# output without the rank prefix, and per-rank log files (--tee, --redirects).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
here=$(cd "$(dirname "$0")" && pwd)
new_work_dir
export PATH=/usr/bin:/bin:$PATH  # Debian's python3, with python3-torch

# torchrun's spellings; the script's first attempt fails on rank 1, the restart succeeds.
"$weft" launch --nproc_per_node 2 --max_restarts 1 --rdzv_id job-7 --no-prefix "$here/torchrun_script.py" \
  > "$work/out" 2> "$work/err" || fail "the job failed: $(tail -n 5 "$work/err")"
grep -q "restarting all ranks (restart 1 of 1)" "$work/err" || fail "no restart: $(cat "$work/err")"
python3 - "$work/out" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
last = runs[-1]
want = {"restart": 1, "sum": 3.0, "world": 2, "local_world": 2, "max_restarts": 1, "run_id": "job-7"}
bad = {k: (last[k], v) for k, v in want.items() if last[k] != v}
assert not bad, f"the restarted attempt saw {bad} (got, wanted)"
assert last["omp_threads"] >= 1 and last["torch_threads"] == last["omp_threads"], last
print("torchrun script: restart count", last["restart"], "of", last["max_restarts"], "and an all-reduce of", last["sum"])
PY

# A job of one rank prints its JSON as it is; --no-prefix does for several.
"$weft" launch -- echo '{"a": 1}' | python3 -c 'import json, sys; assert json.load(sys.stdin) == {"a": 1}'
"$weft" launch --nproc-per-node 2 --no-prefix -- sh -c 'echo "{\"rank\": $RANK}"' |
  python3 -c 'import json, sys; assert sorted(json.loads(l)["rank"] for l in sys.stdin) == [0, 1]'
# With the prefix (the default for several ranks).
"$weft" launch --nproc-per-node 2 sh -c 'echo hi' | sort | tr '\n' ' ' | grep -q "^\[0\] hi \[1\] hi $" || fail "prefix"

# --standalone, auto, python3 -m, and the command's own options after the script.
n=$(nproc)
got=$("$weft" launch --standalone --nproc-per-node auto -m json.tool --sort-keys "$here/torchrun_fixture.json" 2>&1 || true)
echo "$got" | grep -c '"b": 2' | grep -qx "$n" || fail "--standalone auto -m: $got"

# --tee: files and the console; --redirects: files only (rank 1's output). Each launch writes
# into a new folder RUN_ID_XXXXXX (torchrun's layout), named on stderr: a second launch with the
# same id replaces none of the first's logs.
for n in 1 2; do
  "$weft" launch --nproc-per-node 2 --log-dir "$work/logs" --rdzv-id run1 --tee 1 --redirects 1:2 -- \
    sh -c "echo \"out \$RANK launch $n\"; echo \"err \$RANK\" >&2" > "$work/console" 2> "$work/console_err"
  logs=$(sed -n "s|^weft launch: ranks' logs in ||p" "$work/console_err")
  [[ $logs == "$work/logs/run1_"?????? && -d $logs ]] || fail "launch $n: no new log folder named: $(cat "$work/console_err")"
  for r in 0 1; do
    grep -qx "out $r launch $n" "$logs/attempt_0/$r/stdout.log" || fail "rank $r stdout.log"
    grep -q "out $r launch $n" "$work/console" || fail "--tee 1: rank $r's stdout not on the console"
  done
  grep -qx "err 1" "$logs/attempt_0/1/stderr.log" || fail "rank 1 stderr.log"
  if grep -q "err 1" "$work/console_err"; then fail "--redirects 1:2: rank 1's stderr reached the console"; fi
  grep -q "err 0" "$work/console_err" || fail "rank 0's stderr is not redirected"
  [ ! -e "$logs/attempt_0/0/stderr.log" ] || fail "rank 0 has a stderr.log"
done
[[ $(cat "$work"/logs/run1_*/attempt_0/0/stdout.log | sort | tr '\n' ' ') == "out 0 launch 1 out 0 launch 2 " ]] ||
  fail "the second launch's logs did not go beside the first's: $(ls "$work/logs")"
echo "weft launch runs torchrun's command lines"
