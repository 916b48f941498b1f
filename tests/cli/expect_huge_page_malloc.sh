#!/usr/bin/env bash
# usage: expect_huge_page_malloc.sh WEFT
# weft's memory-holding commands restart once with glibc.malloc.hugetlb=1 where the kernel
# gives transparent huge pages on advice (util/huge_page_malloc.h): a launched rank inherits
# the tunable (and so does not restart again); a user's own setting, either way, is kept; and
# where the kernel's mode is not "madvise" nothing is added. The process keeps its name.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
mode=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || true)
tunables() { grep '^GLIBC_TUNABLES=' || true; }
got=$(env -u GLIBC_TUNABLES "$weft" launch --nproc-per-node 1 --no-prefix /usr/bin/env | tunables)
if [ "$mode" = madvise ]; then
  [ "$got" = "GLIBC_TUNABLES=glibc.malloc.hugetlb=1" ] || fail "a rank's environment has '$got' (kernel mode $mode)"
else
  [ -z "$got" ] || fail "the tunable was added with the kernel's mode '$mode': $got"
fi
# The restarted launcher keeps its name (ps, top and pgrep read it).
name=$(env -u GLIBC_TUNABLES "$weft" launch --nproc-per-node 1 --no-prefix -- sh -c 'cat /proc/$PPID/comm')
[ "$name" = "$(basename "$weft")" ] || fail "the restarted launcher is called '$name'"
got=$(GLIBC_TUNABLES=glibc.malloc.hugetlb=0 "$weft" launch --nproc-per-node 1 --no-prefix /usr/bin/env | tunables)
[ "$got" = "GLIBC_TUNABLES=glibc.malloc.hugetlb=0" ] || fail "the user's setting became '$got'"
got=$(GLIBC_TUNABLES=glibc.malloc.arena_max=4 "$weft" launch --nproc-per-node 1 --no-prefix /usr/bin/env | tunables)
want="GLIBC_TUNABLES=glibc.malloc.arena_max=4"
[ "$mode" != madvise ] || want="$want:glibc.malloc.hugetlb=1"
[ "$got" = "$want" ] || fail "with another tunable set: '$got', expected '$want'"
echo "kernel mode '$mode': ranks start with ${got#GLIBC_TUNABLES=}; a user's setting is kept"
