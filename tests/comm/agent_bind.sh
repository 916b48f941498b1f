#!/usr/bin/env bash
# usage: agent_bind.sh WEFT
# An elastic launch (--nnodes 1:2) with --master-addr 127.0.0.1: the membership store of
# node 0's launcher listens on loopback only, never on every interface.
set -uo pipefail
weft=$1
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export WEFT_JOB_TOKEN=agent-bind-test-token-0123456789abcdef
"$weft" launch --nproc-per-node 1 --nnodes 1:2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" \
  --join-timeout 20 -- sleep 30 >/dev/null 2>&1 &
launcher=$!
trap 'kill -9 $launcher 2>/dev/null' EXIT
hexport=$(printf '%04X' "$port")
for _ in $(seq 1 100); do
  grep -q ":$hexport 00000000:0000 0A" /proc/net/tcp && break
  sleep 0.1
done
listening=$(grep ":$hexport 00000000:0000 0A" /proc/net/tcp | awk '{print $2}')
echo "listening on: $listening"
[ -n "$listening" ] || { echo "FAIL: the agent never listened on port $port"; exit 1; }
[ "$listening" = "0100007F:$hexport" ] || { echo "FAIL: the agent listens on $listening, not loopback"; exit 1; }
echo ok
