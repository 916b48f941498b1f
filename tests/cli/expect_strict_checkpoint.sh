#!/usr/bin/env bash
# usage: expect_strict_checkpoint.sh WEFT
# A checkpoint whose weights hold NaN (its checksums fixed, so only the values are wrong)
# is refused on resume with the tensor named; --allow-nonfinite resumes from it anyway.
# meta.json's batch near 2^63 (it overflowed the position) is refused with its name.
set -uo pipefail
weft=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(train --model mlp --limit-train 640 --limit-test 100 --quiet --checkpoint-dir "$work/ck")
"$weft" "${args[@]}" --max-steps 5 >/dev/null 2>&1 || { echo "FAIL: the first run failed"; exit 1; }
python3 - "$work"/ck/step-* <<'PY'
import json, struct, sys, zlib
folder = sys.argv[1]
path = folder + "/model.safetensors"
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
name = sorted(k for k in header if k != "__metadata__")[0]
start = 8 + n + header[name]["data_offsets"][0]
data[start:start + 4] = struct.pack("<f", float("nan"))
open(path, "wb").write(data)
meta = json.load(open(folder + "/meta.json"))
meta["checksums"]["model.safetensors"] = "%08x" % zlib.crc32(bytes(data))
meta.pop("meta_crc32")  # meta.json's own checksum: over its other fields, compact
meta["meta_crc32"] = "%08x" % zlib.crc32(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
json.dump(meta, open(folder + "/meta.json", "w"))
print("poisoned", name)
PY
out=$("$weft" "${args[@]}" --max-steps 8 --resume 2>&1)
rc=$?
echo "$out" | tail -2
[ "$rc" -ne 0 ] || { echo "FAIL: a checkpoint holding NaN was resumed"; exit 1; }
echo "$out" | grep -qE "error: .*step-0+5: parameter '.*' holds nan \(element 0\): the run had diverged" ||
  { echo "FAIL: the error does not name the tensor"; exit 1; }
out=$("$weft" "${args[@]}" --max-steps 8 --resume --allow-nonfinite 2>&1)
rc=$?
# The NaN weight makes the loss NaN: the run stops there, as a diverged run does.
echo "$out" | grep -q "resumed from" || { echo "FAIL: --allow-nonfinite did not resume ($rc)"; echo "$out"; exit 1; }
python3 - "$(ls -d "$work"/ck/step-* | tail -1)" <<'PY'
import json, sys, zlib
p = sys.argv[1] + "/meta.json"
m = json.load(open(p))
m["info"]["batch"] = "9223372036854775807"
m.pop("meta_crc32")
m["meta_crc32"] = "%08x" % zlib.crc32(json.dumps(m, sort_keys=True, separators=(",", ":")).encode())
json.dump(m, open(p, "w"))
PY
out=$("$weft" "${args[@]}" --max-steps 8 --resume --allow-nonfinite --batch 32 2>&1)
echo "$out" | tail -1
echo "$out" | grep -q "meta.json's batch '9223372036854775807' is not a positive whole number" ||
  { echo "FAIL: a batch of 2^63-1 in meta.json was not refused by name"; exit 1; }
echo ok
