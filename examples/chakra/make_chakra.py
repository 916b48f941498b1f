#!/usr/bin/env python3
"""Writes Chakra execution traces (the protobuf workload format of MLCommons' Chakra that
ASTRA-sim reads: one file per rank, <name>.<rank>.et) for three common training iterations,
to replay with `weft sim --workload FOLDER` (docs/simulator.md, "Chakra execution traces").

  dp        data parallel: each layer's forward, then its backward in reverse, each layer's
            gradients all-reduced as soon as its backward is done (overlapping the
            backward of the layers below), then the optimizer after every all-reduce
  pipeline  one stage per rank, GPipe: each micro-batch's activations sent to the next
            stage, its gradients back, then the stage's optimizer
  hybrid    tensor parallel groups of --tp ranks (an all-reduce after each layer's forward
            and backward, process groups tp0, tp1, ...) inside data parallel groups (dp0,
            dp1, ...; a gradient all-reduce per layer), with comm_group.json

Standard library only: the protobuf wire format is written out by hand.
"""
import argparse
import json
import os
import sys

COMP, SEND, RECV, COLL = 4, 5, 6, 7
ALL_REDUCE = 0


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def uint_field(field, v):
    return key(field, 0) + varint(v)


def bytes_field(field, payload):
    return key(field, 2) + varint(len(payload)) + payload


def attr(name, value, field):
    """An AttributeProto: is_cpu_op a bool (27), comm_* int64 (9) or int32 (7), pg_name a string (29)."""
    body = bytes_field(1, name.encode())
    if isinstance(value, str):
        body += bytes_field(field, value.encode())
    else:
        body += uint_field(field, value & (2**64 - 1))
    return bytes_field(10, body)


class Rank:
    """One rank's nodes, numbered from 1 in the order they are added."""

    def __init__(self):
        self.nodes = []

    def add(self, name, kind, deps=(), duration_us=0, attrs=b""):
        node_id = len(self.nodes) + 1
        body = uint_field(1, node_id) + bytes_field(2, name.encode()) + uint_field(3, kind)
        deps = [d for d in deps if d]
        if deps:
            body += bytes_field(5, b"".join(varint(d) for d in deps))  # data_deps, packed
        body += uint_field(7, duration_us) + attrs
        self.nodes.append(body)
        return node_id

    def compute(self, name, us, deps=()):
        return self.add(name, COMP, deps, us, attr("is_cpu_op", 0, 27))

    def allreduce(self, name, size, deps=(), group=""):
        attrs = attr("comm_type", ALL_REDUCE, 9) + attr("comm_size", size, 9)
        if group:
            attrs += attr("pg_name", group, 29)
        return self.add(name, COLL, deps, 0, attrs)

    def p2p(self, name, send, src, dst, size, tag, deps=()):
        attrs = attr("comm_src", src, 7) + attr("comm_dst", dst, 7) + attr("comm_tag", tag, 7) + attr("comm_size", size, 9)
        return self.add(name, SEND if send else RECV, deps, 0, attrs)

    def write(self, path):
        with open(path, "wb") as f:
            meta = bytes_field(1, b"0.0.4")
            f.write(varint(len(meta)) + meta)
            for n in self.nodes:
                f.write(varint(len(n)) + n)


def data_parallel(a):
    ranks = []
    for _ in range(a.ranks):
        r = Rank()
        prev = 0
        for l in range(a.layers):
            prev = r.compute(f"forward.{l}", a.forward_us, [prev])
        reduces = []
        for l in reversed(range(a.layers)):
            prev = r.compute(f"backward.{l}", a.backward_us, [prev])
            reduces.append(r.allreduce(f"allreduce.grad.{l}", a.grad_bytes, [prev]))
        r.compute("optimizer", a.optimizer_us, reduces + [prev])
        ranks.append(r)
    return ranks, None


def pipeline(a):
    ranks = []
    s_last = a.ranks - 1
    for s in range(a.ranks):
        r = Rank()
        prev = 0
        for m in range(a.micro_batches):
            got = r.p2p(f"recv.act.{m}", False, s - 1, s, a.activation_bytes, m, [prev]) if s > 0 else 0
            prev = r.compute(f"forward.{m}", a.forward_us, [prev, got])
            if s < s_last:
                r.p2p(f"send.act.{m}", True, s, s + 1, a.activation_bytes, m, [prev])
        for m in reversed(range(a.micro_batches)):
            got = r.p2p(f"recv.grad.{m}", False, s + 1, s, a.activation_bytes, 1000 + m, [prev]) if s < s_last else 0
            prev = r.compute(f"backward.{m}", a.backward_us, [prev, got])
            if s > 0:
                r.p2p(f"send.grad.{m}", True, s, s - 1, a.activation_bytes, 1000 + m, [prev])
        r.compute("optimizer", a.optimizer_us, [prev])
        ranks.append(r)
    return ranks, None


def hybrid(a):
    if a.ranks % a.tp:
        sys.exit(f"error: --ranks {a.ranks} is not a multiple of --tp {a.tp}")
    groups = {}
    for g in range(a.ranks // a.tp):
        groups[f"tp{g}"] = list(range(g * a.tp, (g + 1) * a.tp))
    for i in range(a.tp):
        groups[f"dp{i}"] = list(range(i, a.ranks, a.tp))
    ranks = []
    for rank in range(a.ranks):
        tp, dp = f"tp{rank // a.tp}", f"dp{rank % a.tp}"
        r = Rank()
        prev = 0
        for l in range(a.layers):
            prev = r.compute(f"forward.{l}", a.forward_us, [prev])
            prev = r.allreduce(f"allreduce.act.{l}", a.activation_bytes, [prev], tp)
        reduces = []
        for l in reversed(range(a.layers)):
            prev = r.compute(f"backward.{l}", a.backward_us, [prev])
            prev = r.allreduce(f"allreduce.act_grad.{l}", a.activation_bytes, [prev], tp)
            reduces.append(r.allreduce(f"allreduce.grad.{l}", a.grad_bytes, [prev], dp))
        r.compute("optimizer", a.optimizer_us, reduces + [prev])
        ranks.append(r)
    return ranks, groups


def size(text):
    """weft's size syntax: 64K, 1M, 2G binary (as nccl-tests reads them), 1KB, 1MB, 1GB decimal, 1KiB binary."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9,
             "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    digits = text.rstrip("KMGiB")
    if not digits.isdigit() or text[len(digits):] not in units:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size such as 16M or 4MB")
    return int(digits) * units[text[len(digits):]]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", choices=["dp", "pipeline", "hybrid"])
    p.add_argument("--out", required=True, help="the folder to write (created)")
    p.add_argument("--name", default="workload", help="file prefix: NAME.<rank>.et")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tp", type=int, default=2, help="hybrid: ranks per tensor parallel group")
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--forward-us", type=int, default=200)
    p.add_argument("--backward-us", type=int, default=400)
    p.add_argument("--optimizer-us", type=int, default=100)
    p.add_argument("--grad-bytes", type=size, default="16M", help="per layer (weft's sizes: 16M = 16 MiB, 16MB = 16 x 10^6)")
    p.add_argument("--activation-bytes", type=size, default="4M")
    a = p.parse_args()
    if a.ranks < 1 or a.layers < 1 or a.micro_batches < 1 or a.tp < 1:
        sys.exit("error: --ranks, --layers, --micro-batches and --tp must be at least 1")
    ranks, groups = {"dp": data_parallel, "pipeline": pipeline, "hybrid": hybrid}[a.workload](a)
    os.makedirs(a.out, exist_ok=True)
    for i, r in enumerate(ranks):
        r.write(os.path.join(a.out, f"{a.name}.{i}.et"))
    if groups:
        with open(os.path.join(a.out, "comm_group.json"), "w") as f:
            json.dump(groups, f)
    print(f"{a.out}: {len(ranks)} ranks, {sum(len(r.nodes) for r in ranks)} nodes")


if __name__ == "__main__":
    main()
