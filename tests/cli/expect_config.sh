#!/usr/bin/env bash
# weft train --config: the file's flags apply, the command line wins, the resolved flags
# are saved in the run's folder and its checkpoints, and training again from the saved
# file gives the same run, bit for bit.
# usage: expect_config.sh WEFT EXAMPLES_DIR
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
examples=$2
new_work_dir

"$weft" train --config "$examples/configs/cnn-short.yaml" --max-steps 30 --lr 0.02 --checkpoint-dir "$work/a" > "$work/a.out"
[ "$(json_value model < "$work/a.out")" = cnn ] || fail "the file's model did not apply"
[ "$(json_value steps < "$work/a.out")" = 30 ] || fail "the command line's --max-steps did not win"
grep -qx "lr: 0.02" "$work/a/config.yaml" || fail "config.yaml lacks the command line's lr: $(cat "$work/a/config.yaml")"
grep -qx "batch: 64" "$work/a/config.yaml" || fail "config.yaml lacks the file's batch"
python3 - "$work"/a/step-*/meta.json <<'PY'
import json, sys
assert "lr: 0.02" in json.load(open(sys.argv[1]))["info"]["config"], "the checkpoint lacks the configuration"
PY
"$weft" train --config "$work/a/config.yaml" --checkpoint-dir "$work/b" > "$work/b.out"
[ "$(json_value train_loss < "$work/a.out")" = "$(json_value train_loss < "$work/b.out")" ] ||
  fail "the saved configuration trained differently: $(json_value train_loss < "$work/a.out") vs $(json_value train_loss < "$work/b.out")"
echo "--config: the file applies, the command line wins, the saved file reproduces the run"

# Files that are not a configuration: one line each, exit 2, nothing trained.
printf '\xff\xfe\x00' >"$work/binary.yaml"
expect_refusal "binary.yaml: not UTF-8 text (byte 0 is 0xff)" "$weft" train --config "$work/binary.yaml"
printf 'lr: 0.1\nbatch: 6\0\n' >"$work/nul.yaml"
expect_refusal "nul.yaml: not UTF-8 text (byte 16 is NUL)" "$weft" train --config "$work/nul.yaml"
expect_refusal "config: $work is a folder, not a file" "$weft" train --config "$work"
expect_refusal "threads: must be in \[1, 4096\], got 100000" "$weft" train --threads 100000
echo "--config: bytes that are not UTF-8 text and a folder refused; --threads bounded"
