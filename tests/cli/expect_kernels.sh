#!/usr/bin/env bash
# usage: expect_kernels.sh WEFT
# The kernel table as a user meets it: each library forced by WEFT_KERNELS trains the CNN
# and the MLP to the same accuracy; a processor without AVX512-BF16 is simulated
# (WEFT_CPU_ISA) and bf16 training falls back to emulated products, saying so in the
# summary; mistakes in either variable are one-line errors with exit 2; --profile's shares
# add up to the step.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
new_work_dir
short=(--epochs 1 --limit-train 2400 --limit-test 1000 --batch 32 --lr 0.02 --momentum 0.9 --quiet --threads 2)

# (2,400 samples: 75 steps, 0.75-0.77 on this machine; every library within 0.03 of the first.)
for model in cnn mlp; do
  first=""
  for k in "conv=im2col,gemm=openblas" "conv=onednn,gemm=onednn" "gemm=libxsmm" ""; do
    out=$(WEFT_KERNELS=$k "$weft" train --model "$model" "${short[@]}" | tail -n 1)
    acc=$(echo "$out" | json_value test_accuracy)
    echo "$model [$k]: test accuracy $acc; $(echo "$out" | json_value kernels)"
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.72) }' || fail "$model with '$k' reached only $acc"
    first=${first:-$acc}
    awk -v a="$acc" -v b="$first" 'BEGIN { d = a - b; exit !(d <= 0.03 && d >= -0.03) }' ||
      fail "$model with '$k' reached $acc, the first library $first"
  done
done

# bf16 on a processor without the instructions: emulated, and said.
gpt=(train --model gpt --layers 1 --d-model 32 --heads 2 --context 16 --batch 4 --max-steps 5 --eval-every 5
     --eval-batches 1 --sample 0 --quiet --precision bf16)
out=$(WEFT_CPU_ISA=avx512_core "$weft" "${gpt[@]}" | tail -n 1)
echo "$out" | json_value kernels | grep -q "avx512_core; .*bf16 emulated" || fail "no fallback: $out"
if grep -q avx512_bf16 /proc/cpuinfo; then
  "$weft" "${gpt[@]}" | tail -n 1 | json_value kernels | grep -q "bf16 native" || fail "bf16 instructions unused"
fi

# Mistakes: one line, exit 2.
for bad in "WEFT_KERNELS=gemm=mkl" "WEFT_KERNELS=conv" "WEFT_CPU_ISA=avx9" "WEFT_KERNELS=bf16=native WEFT_CPU_ISA=avx2"; do
  set +e
  err=$(env $bad "$weft" "${gpt[@]}" 2>&1 >/dev/null)
  rc=$?
  set -e
  echo "$bad -> exit $rc: $err"
  [ "$rc" -eq 2 ] || fail "$bad: exit $rc"
  [ "$(echo "$err" | wc -l)" -eq 1 ] || fail "$bad: more than one line"
  echo "$err" | grep -q "WEFT_" || fail "$bad: the error does not name the variable"
done

# --profile: a table whose shares add up to the whole step (within rounding).
out=$("$weft" train --model cnn --max-steps 12 --batch 32 --limit-test 100 --quiet --threads 2 --profile)
echo "$out" | grep -A6 '^profile'
echo "$out" | grep -A6 '^profile' | awk '/%/ { s += $(NF-2) } END { exit !(s > 99.0 && s < 101.0) }' ||
  fail "the profile's shares do not add up to 100%"
echo "$out" | tail -n 1 | json_value profile | grep -q "'conv'" || fail "no profile in the summary"
echo ok
