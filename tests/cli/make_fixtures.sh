#!/usr/bin/env bash
# usage: make_fixtures.sh WEFT DIR
# Builds the broken inputs the bad-input tests feed to weft: truncated and wrong-magic
# IDX files (from the real Fashion-MNIST files), and checkpoints to corrupt or mismatch.
set -euo pipefail
weft=$1
dir=$2
src=${WEFT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
rm -rf "$dir"
mkdir -p "$dir/truncated" "$dir/badmagic" "$dir/ckpt-corrupt" "$dir/ckpt-mlp" "$dir/small16"
for d in truncated badmagic; do
  cp "$src"/t10k-* "$src"/train-labels-idx1-ubyte.gz "$dir/$d/"
done
(gunzip -c "$src/train-images-idx3-ubyte.gz" || true) | head -c 1000000 >"$dir/truncated/train-images-idx3-ubyte"
{ printf '\x12\x34\x08\x03'; gunzip -c "$src/train-images-idx3-ubyte.gz" | tail -c +5; } >"$dir/badmagic/train-images-idx3-ubyte"
# A well-formed data folder of 16x16 images (a user's own data of another size).
/usr/bin/python3 - "$dir/small16" <<'PY'
import struct, sys
d = sys.argv[1]
for prefix, n in (("train", 64), ("t10k", 16)):
    with open(f"{d}/{prefix}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 16, 16) + bytes((i * 7) % 256 for i in range(n * 256)))
    with open(f"{d}/{prefix}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PY
# Files of 1 TiB that take no disk (sparse): a corpus, and images in NPY whose header agrees
# with its size, larger than a machine's memory.
truncate -s 1T "$dir/corpus-1tib.txt"
mkdir -p "$dir/npy-1tib"
/usr/bin/python3 - "$dir" <<'PY'
import struct, sys
d = sys.argv[1]
def npy(path, descr, shape):
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
        n = 1
        for k in shape: n *= k
        f.truncate(f.tell() + n * int(descr[2:]))
n = (1 << 40) // 1024
npy(f"{d}/npy-1tib/train-images.npy", "|u1", (n, 32, 32))
npy(f"{d}/npy-1tib/train-labels.npy", "|u1", (n,))
PY
for d in ckpt-corrupt ckpt-mlp; do
  "$weft" train --model mlp --epochs 1 --limit-train 256 --limit-test 100 --checkpoint-dir "$dir/$d" --quiet >/dev/null
done
# Flip one byte in the middle of the saved parameters.
f=$(ls -d "$dir"/ckpt-corrupt/step-*/model.safetensors | head -n 1)
size=$(stat -c %s "$f")
printf '\xff' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
