#!/usr/bin/env bash
# weft train --config: the file's flags apply, the command line wins, the resolved flags
# are saved in the run's folder and its checkpoints, and training again from the saved
# file gives the same run, bit for bit.
# usage: expect_config.sh WEFT EXAMPLES_DIR
set -euo pipefail
weft=$1
examples=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
field() { python3 -c "import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }

"$weft" train --config "$examples/configs/cnn-short.yaml" --max-steps 30 --lr 0.02 --checkpoint-dir "$work/a" > "$work/a.out"
[ "$(field model < "$work/a.out")" = cnn ] || fail "the file's model did not apply"
[ "$(field steps < "$work/a.out")" = 30 ] || fail "the command line's --max-steps did not win"
grep -qx "lr: 0.02" "$work/a/config.yaml" || fail "config.yaml lacks the command line's lr: $(cat "$work/a/config.yaml")"
grep -qx "batch: 64" "$work/a/config.yaml" || fail "config.yaml lacks the file's batch"
python3 - "$work"/a/step-*/meta.json <<'PY'
import json, sys
assert "lr: 0.02" in json.load(open(sys.argv[1]))["info"]["config"], "the checkpoint lacks the configuration"
PY
"$weft" train --config "$work/a/config.yaml" --checkpoint-dir "$work/b" > "$work/b.out"
[ "$(field train_loss < "$work/a.out")" = "$(field train_loss < "$work/b.out")" ] ||
  fail "the saved configuration trained differently: $(field train_loss < "$work/a.out") vs $(field train_loss < "$work/b.out")"
echo "--config: the file applies, the command line wins, the saved file reproduces the run"
