#!/usr/bin/env bash
# A user's own image data: IDX of 16x16 pixels, NPY of 3-channel 12x12 images in 13 classes,
# CSV of 8x8 pixels in 12 classes with a header. Each trains (the model's input layer and
# classes sized from the data, the normalization computed from the training set and saved
# with the model), and weft predict reads the saved model and the data back. Then the
# mistakes: a test split of another size, a test label the training set lacks, a file
# instead of a folder, a ragged CSV row.
# usage: expect_own_data.sh WEFT FIXTURES
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
fix=$2
new_work_dir
export PATH=/usr/bin:/bin:$PATH  # Debian's python3, with numpy

# Learnable data: class k lights up its own patch of the image, plus noise.
python3 - "$work" <<'PY'
import numpy as np, os, sys
d = sys.argv[1]
rng = np.random.RandomState(0)
def images(n, side, channels, classes):
    y = rng.randint(0, classes, n)
    x = rng.randint(0, 60, (n, side, side, channels)).astype(np.float64)
    for i, k in enumerate(y):
        r, c = divmod(int(k), side // 2)
        x[i, 2 * r % side:2 * r % side + 2, 2 * c % side:2 * c % side + 2, :] = 255
    return x, y
os.makedirs(f"{d}/npy"); os.makedirs(f"{d}/csv")
for split, n in (("train", 600), ("test", 200)):
    x, y = images(n, 12, 3, 13)
    np.save(f"{d}/npy/{split}-images.npy", x.astype(np.uint8))
    np.save(f"{d}/npy/{split}-labels.npy", y.astype(np.int64))
    x, y = images(n, 8, 1, 12)
    with open(f"{d}/csv/{split}.csv", "w") as f:
        f.write("label," + ",".join(f"p{i}" for i in range(64)) + "\n")
        for img, k in zip(x, y):
            f.write(str(k) + "," + ",".join(str(int(v)) for v in img.reshape(-1)) + "\n")
PY

# IDX, 16x16, mlp and cnn.
for model in mlp cnn; do
  "$weft" train --model "$model" --data "$fix/small16" --batch 16 --max-steps 8 --save-model "$work/idx-$model.safetensors" \
    --quiet > "$work/out" || fail "IDX 16x16 with $model"
  "$weft" predict "$work/idx-$model.safetensors" --data "$fix/small16" | grep -q "test accuracy" || fail "predict IDX 16x16 ($model)"
done
echo "IDX 16x16: mlp and cnn train, predict reads them back"

# NPY, 3 channels, 13 classes: the CNN learns it.
"$weft" train --model cnn --data "$work/npy" --batch 32 --epochs 4 --lr 0.05 --save-model "$work/npy.safetensors" \
  --quiet > "$work/out"
acc=$(json_value test_accuracy < "$work/out")
python3 -c "import sys; sys.exit(0 if $acc > 0.8 else 1)" || fail "NPY 3x12x12, 13 classes: test accuracy $acc"
python3 - "$work/npy.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
meta = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])["__metadata__"]
assert (meta["weft_channels"], meta["weft_height"], meta["weft_width"], meta["weft_classes"]) == ("3", "12", "12", "13"), meta
assert len(meta["weft_mean"].split(",")) == 3 and len(meta["weft_std"].split(",")) == 3, meta
PY
p=$("$weft" predict "$work/npy.safetensors" --data "$work/npy" --json | json_value test_accuracy)
[ "$p" = "$acc" ] || fail "predict's accuracy $p is not training's $acc"
echo "NPY 3x12x12, 13 classes: test accuracy $acc (predict agrees)"

# CSV, 8x8, 12 classes, a header row; given normalization.
"$weft" train --model mlp --data "$work/csv" --batch 32 --epochs 4 --lr 0.05 --norm-mean 0.3 --norm-std 0.4 \
  --save-model "$work/csv.safetensors" --quiet > "$work/out"
acc=$(json_value test_accuracy < "$work/out")
python3 -c "import sys; sys.exit(0 if $acc > 0.8 else 1)" || fail "CSV 8x8, 12 classes: test accuracy $acc"
grep -a -q '"weft_mean":"0.3"' "$work/csv.safetensors" || fail "--norm-mean was not saved"
echo "CSV 8x8, 12 classes: test accuracy $acc"

# Mistakes.
expect_error() {  # REGEX ARGS...
  local regex=$1; shift
  if out=$("$weft" "$@" 2>&1); then fail "succeeded: $*"; fi
  echo "$out" | grep -Eq -- "$regex" || fail "'$out' does not match /$regex/"
}
mkdir "$work/mixed" && cp "$work/npy"/train-* "$work/mixed/"
python3 -c "import numpy as np; np.save('$work/mixed/test-images.npy', np.zeros((4, 10, 10, 3), np.uint8)); np.save('$work/mixed/test-labels.npy', np.zeros(4, np.int64))"
expect_error "test-images.npy: test images are 3x10x10, the training images 3x12x12" train --model mlp --data "$work/mixed" --max-steps 1
python3 -c "import numpy as np; np.save('$work/mixed/test-images.npy', np.zeros((4, 12, 12, 3), np.uint8)); np.save('$work/mixed/test-labels.npy', np.full(4, 40, np.int64))"
expect_error "test label 40 at index 0 is not among the training set's 13 classes" train --model mlp --data "$work/mixed" --max-steps 1
expect_error "is a file: image data is a folder" train --model mlp --data "$work/csv/train.csv" --max-steps 1
mkdir "$work/ragged" && printf '1,2,3,4,5\n2,1,2,3\n' > "$work/ragged/train.csv"
expect_error "train.csv: line 2 holds 3 pixels, line 1 4" train --model mlp --data "$work/ragged" --max-steps 1
printf 'label,a,b,c,d\n1,2,3,4,5\n2,1,2,3\n' > "$work/ragged/train.csv"  # after a header: the lines of the file
expect_error "train.csv: line 3 holds 3 pixels, line 2 4" train --model mlp --data "$work/ragged" --max-steps 1
mkdir "$work/tiny" && printf '0,1,2,3,4,5,6,7,8,9\n1,9,8,7,6,5,4,3,2,1\n' | tee "$work/tiny/train.csv" > "$work/tiny/test.csv"
expect_error "--model cnn takes images of at least 4x4 pixels, the data's are 3x3" train --model cnn --data "$work/tiny" --max-steps 1
expect_error "test-images.npy: images of 3x12x12 pixels; the model takes 8x8" predict "$work/csv.safetensors" --data "$work/npy"
echo "each mistake is one line that names the file"
