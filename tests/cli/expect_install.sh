#!/usr/bin/env bash
# weft as a library: docs/library.md's commands as written (`cmake --install` into a fresh
# prefix, the example project outside the tree, examples/library, built against it with
# find_package(weft) and with pkg-config, each run under weft launch and trained), then what
# they left checked: MPI is not on the link line unless the project asks for weft::comm_mpi
# (built and run under mpirun too), and nothing installed hands on -march or -mtune.
# usage: expect_install.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
src=$1
build=$2
new_work_dir

# The page's commands, in a folder of their own that stays for the checks below.
mkdir "$work/page"
page=$(EXAMPLES_DIR="$work/page" bash "$src/tests/docs/run_examples.sh" "$build" "$src/docs/library.md") ||
  fail "docs/library.md's commands: $(tail -n 20 <<<"$page")"
work_page=$work/page
echo "$page" | tail -n 1
# Both programs (CMake's and pkg-config's) trained on 2 ranks without MPI.
trained=$(grep -o "ranks 2, .*" <<<"$page" || true)
echo "$trained"
[ "$(grep -c "MPI transport not linked" <<<"$trained")" -eq 2 ] || fail "not two runs without MPI: $page"
for acc in $(sed 's/.*accuracy \([0-9.]*\).*/\1/' <<<"$trained"); do
  python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.9 else 1)" || fail "accuracy $acc after training"
done
for f in bin/weft include/weft/comm/communicator.h include/weft/parallel/ddp.h lib/libweft_comm.a \
         lib/cmake/weft/weftConfig.cmake lib/cmake/weft/weftTargets.cmake lib/pkgconfig/weft.pc; do
  [ -e "$work_page/weft-prefix/$f" ] || fail "not installed: $f"
done
[ ! -e "$work_page/weft-prefix/include/weft/cli" ] || fail "the command line's private headers were installed"
# What users' programs are handed carries no instruction sets of the build machine.
if grep -rEl -- '-march|-mtune' "$work_page/weft-prefix/lib/pkgconfig" "$work_page/weft-prefix/lib/cmake/weft"; then
  fail "the installed pkg-config or CMake files pass -march or -mtune on"
fi

# CMake's build without MPI: none on its link line.
if grep "LINK_LIBRARIES\|LINK_FLAGS" "$work_page/circle-build/build.ninja" | grep -qi "mpi"; then
  fail "MPI is on the link line of a program that did not ask for it"
fi

# CMake, with the MPI component: the transport is linked and runs under mpirun.
if [ -e "$work_page/weft-prefix/lib/cmake/weft/weftMpiTargets.cmake" ]; then
  cmake -S "$src/examples/library" -B "$work/mpi" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWITH_MPI=ON \
    -DCMAKE_PREFIX_PATH="$work_page/weft-prefix" > "$work/configure-mpi.log" || fail "configure with mpi: $(tail -n 20 "$work/configure-mpi.log")"
  cmake --build "$work/mpi" > "$work/build-mpi.log" 2>&1 || fail "build with mpi: $(tail -n 20 "$work/build-mpi.log")"
  out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 WEFT_TRANSPORT=mpi \
        mpirun --oversubscribe -np 2 "$work/mpi/circle")
  echo "cmake build with mpi: $out"
  echo "$out" | grep -q "^ranks 2, .*MPI transport linked" || fail "unexpected output with mpi: $out"
  # The installed weft command loads its MPI backend from <libdir>/weft on first use, and links
  # no MPI library itself.
  ! ldd "$work_page/weft-prefix/bin/weft" | grep -q "libmpi" || fail "the installed weft links MPI's libraries"
  out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe -np 2 "$work_page/weft-prefix/bin/weft" comm-bench --transport mpi --op allreduce --max 4K) ||
    fail "the installed weft under mpirun: $out"
  echo "$out" | grep -q "transport mpi" || fail "the installed weft's comm-bench did not run over MPI: $out"
  echo "installed weft under mpirun: its MPI backend loaded from $(cd "$work_page/weft-prefix" && ls */weft/libweft_mpi.so)"
fi

echo "the installed weft builds an outside project with CMake and with pkg-config"
