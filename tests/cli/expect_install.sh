#!/usr/bin/env bash
# weft as a library: `cmake --install` into a fresh prefix, then the example project outside
# the tree (examples/library) builds against it with find_package(weft) and runs under weft
# launch; MPI is not on its link line unless it asks for weft::comm_mpi; a pkg-config build
# of the same program links too; neither is handed -march or -mtune.
# usage: expect_install.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
src=$1
build=$2
new_work_dir

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log" || fail "install: $(tail -n 5 "$work/install.log")"
for f in bin/weft include/weft/comm/communicator.h include/weft/parallel/ddp.h lib/libweft_comm.a \
         lib/cmake/weft/weftConfig.cmake lib/cmake/weft/weftTargets.cmake lib/pkgconfig/weft.pc; do
  [ -e "$work/prefix/$f" ] || fail "not installed: $f"
done
[ ! -e "$work/prefix/include/weft/cli" ] || fail "the command line's private headers were installed"
# What users' programs are handed carries no instruction sets of the build machine.
if grep -rEl -- '-march|-mtune' "$work/prefix/lib/pkgconfig" "$work/prefix/lib/cmake/weft"; then
  fail "the installed pkg-config or CMake files pass -march or -mtune on"
fi

# CMake, without MPI.
cmake -S "$src/examples/library" -B "$work/plain" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" || fail "configure: $(tail -n 20 "$work/configure.log")"
cmake --build "$work/plain" > "$work/build.log" 2>&1 || fail "build: $(tail -n 20 "$work/build.log")"
if grep "LINK_LIBRARIES\|LINK_FLAGS" "$work/plain/build.ninja" | grep -qi "mpi"; then fail "MPI is on the link line of a program that did not ask for it"; fi
out=$("$work/prefix/bin/weft" launch --nproc-per-node 2 --no-prefix "$work/plain/circle")
echo "cmake build: $out"
echo "$out" | grep -q "^ranks 2, .*MPI transport not linked" || fail "unexpected output: $out"
acc=$(echo "$out" | sed 's/.*accuracy \([0-9.]*\).*/\1/')
python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.9 else 1)" || fail "accuracy $acc after training"

# CMake, with the MPI component: the transport is linked and runs under mpirun.
if [ -e "$work/prefix/lib/cmake/weft/weftMpiTargets.cmake" ]; then
  cmake -S "$src/examples/library" -B "$work/mpi" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWITH_MPI=ON \
    -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure-mpi.log" || fail "configure with mpi: $(tail -n 20 "$work/configure-mpi.log")"
  cmake --build "$work/mpi" > "$work/build-mpi.log" 2>&1 || fail "build with mpi: $(tail -n 20 "$work/build-mpi.log")"
  out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 WEFT_TRANSPORT=mpi \
        mpirun --oversubscribe -np 2 "$work/mpi/circle")
  echo "cmake build with mpi: $out"
  echo "$out" | grep -q "^ranks 2, .*MPI transport linked" || fail "unexpected output with mpi: $out"
  # The installed weft command loads its MPI backend from <libdir>/weft on first use, and links
  # no MPI library itself.
  ! ldd "$work/prefix/bin/weft" | grep -q "libmpi" || fail "the installed weft links MPI's libraries"
  out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe -np 2 "$work/prefix/bin/weft" comm-bench --transport mpi --op allreduce --max 4K) ||
    fail "the installed weft under mpirun: $out"
  echo "$out" | grep -q "transport mpi" || fail "the installed weft's comm-bench did not run over MPI: $out"
  echo "installed weft under mpirun: its MPI backend loaded from $(cd "$work/prefix" && ls */weft/libweft_mpi.so)"
fi

# pkg-config.
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
g++ -O1 "$src/examples/library/main.cpp" -o "$work/circle-pc" $(pkg-config --cflags --libs weft) \
  || fail "pkg-config build"
out=$("$work/prefix/bin/weft" launch --nproc-per-node 2 --no-prefix "$work/circle-pc")
echo "pkg-config build: $out"
echo "$out" | grep -q "^ranks 2, .*MPI transport not linked" || fail "unexpected output (pkg-config): $out"
echo "the installed weft builds an outside project with CMake and with pkg-config"
