#!/usr/bin/env bash
# usage: compiler_guard.sh CROSS_TUNED_COMPILER_TEST GCC_VERSION WEFT
# The fault GCC 12 has with AVX-512 processors' tuning, and the guards against it:
#  1. the compiler test (tests/util/test_compiler.cpp), built with the flags that miscompile
#     (-march=x86-64-v3 -mtune=cascadelake: AVX2 code tuned for an AVX-512 processor), fails:
#     the test catches the fault (GCC 12; a compiler without the fault may pass);
#  2. the instruction-set reader (check_instruction_sets.py) finds that program's AVX2 outside
#     any dispatched function, and finds none outside them in weft, the default build.
# The default build passes the compiler test itself (test_util: Compiler.*).
set -euo pipefail
bad=$1 gcc_version=$2 weft=$3
here=$(dirname "$0")
if ! grep -qw avx2 /proc/cpuinfo; then
  echo "SKIP: this processor has no AVX2 to run the cross-tuned build"
  exit 77
fi
set +e
out=$("$bad" --gtest_filter='Compiler.*' 2>&1)
rc=$?
set -e
echo "$out" | grep -E '^\[  (FAILED|PASSED|  OK) ' || true
case $gcc_version in
  12.*)
    [ "$rc" -eq 1 ] || { echo "FAIL: the cross-tuned build exited $rc: GCC $gcc_version's fault went unseen"; exit 1; }
    echo "$out" | grep -q '^\[  FAILED  \] Compiler.ConstantVectorsKeepTheirZeros' ||
      { echo "FAIL: the compiler test did not fail on the cross-tuned build"; exit 1; } ;;
  *)
    [ "$rc" -le 1 ] || { echo "FAIL: the cross-tuned build exited $rc"; exit 1; }
    echo "GCC $gcc_version: the cross-tuned build's compiler test exited $rc (the fault is GCC 12's)" ;;
esac
echo "the cross-tuned build fails the compiler test, as it should"

set +e
python3 "$here/check_instruction_sets.py" "$bad" | head -c 400
rc=${PIPESTATUS[0]}
set -e
echo
[ "$rc" -eq 1 ] || { echo "FAIL: the reader did not see the cross-tuned program's AVX2"; exit 1; }
python3 "$here/check_instruction_sets.py" "$weft"
echo ok
