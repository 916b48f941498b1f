#!/usr/bin/env bash
# The pcap of a link decodes as RoCEv2 in tshark: RDMA WRITE First/Middle/Last with RETH,
# ACKs, CE-marked packets and CNPs under incast.
set -euo pipefail
weft=$1
src=$2
command -v tshark >/dev/null || { echo "tshark is missing (scripts/install-deps.sh installs it)"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$weft" sim --topology "$src/examples/topologies/single-switch.yaml" --workload incast:8:4MB \
  --set pcap=host0.gpu0:switch --out "$dir" --quiet >/dev/null
out=$(tshark -r "$dir/link.pcap" 2>/dev/null)
for want in "RDMA Write First" "RDMA Write Middle" "RDMA Write Last" "RC Acknowledge"; do
  n=$(grep -c "$want" <<<"$out" || true)
  [ "$n" -gt 0 ] || { echo "FAIL: no '$want' in the capture"; exit 1; }
  echo "$want: $n"
done
reth=$(tshark -r "$dir/link.pcap" -Y "infiniband.reth" 2>/dev/null | wc -l)
ce=$(tshark -r "$dir/link.pcap" -Y "ip.dsfield.ecn == 3 && udp.dstport == 4791" 2>/dev/null | wc -l)
cnp=$(tshark -r "$dir/link.pcap" -Y "infiniband.bth.opcode == 0x81 && ip.dsfield.dscp == 48" 2>/dev/null | wc -l)
echo "RETH: $reth, CE-marked: $ce, CNPs: $cnp"
[ "$reth" -gt 0 ] && [ "$ce" -gt 0 ] && [ "$cnp" -gt 0 ] || { echo "FAIL"; exit 1; }
echo ok
