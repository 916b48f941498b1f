#!/usr/bin/env bash
# weft launch binds each local rank to its share of the launcher's cores: as many ranks as
# cores get one core each, all different; twice as many share them in turn (rank r on core
# r mod n); --bind none leaves every rank all the cores.
set -euo pipefail
weft=$1
mine=$(grep Cpus_allowed_list /proc/self/status | cut -f2)
n=$(nproc)
allowed() { "$weft" launch "$@" -- sh -c 'echo "$LOCAL_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"' |
            sed 's/^\[[0-9]*\] //' | sort -n; }
one=$(allowed --nproc-per-node "$n")
echo "$n ranks on $n cores:"; echo "$one"
[ "$(echo "$one" | wc -l)" = "$n" ] || { echo "FAIL: not $n ranks"; exit 1; }
echo "$one" | awk '{ if ($2 !~ /^[0-9]+$/) exit 1 }' || { echo "FAIL: a rank has more than one core"; exit 1; }
[ "$(echo "$one" | cut -d' ' -f2 | sort -u | wc -l)" = "$n" ] || { echo "FAIL: two ranks share a core"; exit 1; }
two=$(allowed --nproc-per-node $((2 * n)))
echo "$two" | while read -r r core; do
  want=$(echo "$one" | awk -v r=$((r % n)) '$1 == r { print $2 }')
  [ "$core" = "$want" ] || { echo "FAIL: rank $r on core $core, rank $((r % n)) on $want"; exit 1; }
done
free=$(allowed --nproc-per-node 2 --bind none)
echo "--bind none:"; echo "$free"
echo "$free" | awk -v m="$mine" '{ if ($2 != m) exit 1 }' || { echo "FAIL: --bind none restricted a rank"; exit 1; }
echo "ranks bound as expected"
