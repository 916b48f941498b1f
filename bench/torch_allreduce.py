#!/usr/bin/python3
"""torch.distributed all_reduce on a backend (--backend: gloo, the TCP reference of
bench/allreduce_vs_mpi and bench/tcp_ceiling, or weft, for bench/torch_backend), Debian's
python3-torch, run under `weft launch` (torchrun's environment).
Timed like weft comm-bench: barrier, one all-reduce, median over the repeats of the
slowest rank (--late RANK:US: that rank starts each repeat late, as comm-bench --late). Prints one JSON object per size on rank 0."""
import argparse, json, statistics, time

import torch
import torch.distributed as dist

from busbw import late_arg


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min", type=int, default=1 << 20)
    p.add_argument("--max", type=int, default=64 << 20)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--late", type=late_arg, default=(-1, 0.0), metavar="RANK:US", help="RANK:US: that rank starts every repeat US microseconds after the "
                   "others (the others' times include the wait), like weft comm-bench --late")
    a = p.parse_args()
    dist.init_process_group(a.backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    late_rank, late_s = a.late
    size = a.min
    while size <= a.max:
        count = size // 4
        base = torch.tensor([(rank + 1) * 3 + i % 7 for i in range(7)], dtype=torch.float32)
        x = base.repeat(count // 7 + 1)[:count].clone()
        times = []
        for it in range(a.warmup + a.iters):
            y = x.clone()
            dist.barrier()
            if rank == late_rank:
                time.sleep(late_s)
            t0 = time.perf_counter()
            dist.all_reduce(y)
            us = (time.perf_counter() - t0) * 1e6
            if it >= a.warmup:
                times.append(us)
        med = torch.tensor([statistics.median(times)], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        slowest = med.item()
        algbw = size / (slowest * 1e3)
        if rank == 0:
            print(json.dumps({"bytes": size, "time_us": slowest, "algbw_gbps": algbw,
                              "busbw_gbps": algbw * 2 * (world - 1) / world}), flush=True)
        size *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
