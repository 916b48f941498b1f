#!/usr/bin/env bash
# The pcap of a link decodes as RoCEv2 in tshark: RDMA WRITE First/Middle/Last with RETH,
# ACKs, CE-marked packets and CNPs under incast, with the fields the RoCE specification
# gives them: an ACK's BTH PSN is the last PSN it acknowledges and its AETH MSN counts the
# completed messages, a RETH's DMA length is the whole message's, a CNP sets BECN.
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
tshark -r "$dir/link.pcap" -T fields -e infiniband.bth.opcode -e infiniband.bth.destqp -e infiniband.bth.psn \
  -e infiniband.aeth.syndrome -e infiniband.aeth.msn -e infiniband.reth.dmalen -e udp.payload 2>/dev/null >"$dir/fields"
python3 - "$dir/fields" <<'PY'
import sys
last_data, last_ack, dmalens, cnps = {}, {}, set(), 0
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if not f[0]:
        continue  # PFC frames
    op, qp, psn = int(f[0]), f[1], int(f[2])
    if op in (6, 7, 8, 10):
        last_data[qp] = max(last_data.get(qp, -1), psn)
    if op in (6, 10):
        dmalens.add(int(f[5]))
    if op == 17 and int(f[3], 0) >> 5 == 0:  # ACK (not NAK)
        last_ack[qp] = (psn, int(f[4]))
    if op == 0x81:
        cnps += 1
        assert int(f[6][8:10], 16) & 0x40, f"CNP without BECN: BTH {f[6][:24]}"
assert dmalens == {4000000}, f"RETH DMA lengths {dmalens}, the messages are 4000000 bytes"
assert last_ack and last_ack.keys() == last_data.keys(), (last_ack, last_data)
for qp, (psn, msn) in last_ack.items():
    assert psn == last_data[qp], f"QP {qp}: last ACK's PSN {psn}, last data PSN {last_data[qp]}"
    assert msn == 1, f"QP {qp}: last ACK's MSN {msn}, one message completed"
print(f"spec fields: {len(last_ack)} QPs' last ACKs name their last PSN and MSN 1, RETH DMA length 4000000, {cnps} CNPs with BECN")
PY
echo ok
