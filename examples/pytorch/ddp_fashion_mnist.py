#!/usr/bin/python3
"""A plain PyTorch DistributedDataParallel script: the CNN on Fashion-MNIST, written for
torchrun. Under weft launch it runs unchanged on weft's communicator with --backend weft,
or on gloo with --backend gloo (the only line that differs is init_process_group's backend).

    weft launch --nproc-per-node 2 examples/pytorch/ddp_fashion_mnist.py --backend weft

Rank 0 prints one JSON line: test accuracy, last loss, and samples/s over the timed steps
(the first --warmup steps excluded)."""
import argparse
import contextlib
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def read_idx(path):
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(data[3])]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * data[3]).reshape(dims)


def load(data_dir, kind):
    def path(stem):
        for ext in (".gz", ""):
            if os.path.exists(os.path.join(data_dir, stem + ext)):
                return os.path.join(data_dir, stem + ext)
        raise SystemExit(f"error: {data_dir} has no {stem}")
    images = read_idx(path(f"{kind}-images-idx3-ubyte")).astype(np.float32) / 255.0
    labels = read_idx(path(f"{kind}-labels-idx1-ubyte")).astype(np.int64)
    return torch.from_numpy(((images - 0.2860) / 0.3530).reshape(-1, 1, 28, 28)), torch.from_numpy(labels)


def late_arg(text):
    rank, _, us = text.partition(":")
    if not (rank.isdigit() and us.isdigit()):
        raise argparse.ArgumentTypeError(f"'{text}' is not RANK:MICROSECONDS (whole numbers)")
    return int(rank), int(us) / 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="weft")
    p.add_argument("--model", default="cnn", choices=["cnn", "mlp"],
                   help="cnn (422k parameters) or mlp (784-96-10, 76k parameters: each step is mostly waiting)")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch", type=int, default=64, help="global batch, split over the ranks")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=10, help="steps left out of samples/s")
    p.add_argument("--test", type=int, default=2000, help="test images for the accuracy")
    p.add_argument("--no-sync", action="store_true",
                   help="skip DDP's gradient all-reduce (each rank trains alone): the ceiling no backend can beat")
    p.add_argument("--late", type=late_arg, default=(-1, 0.0), metavar="RANK:US",
                   help="that rank sleeps US microseconds before each step (a straggler)")
    p.add_argument("--sync-only", action="store_true",
                   help="skip DDP's gradient all-reduce but all-reduce one number per step: what keeping the ranks "
                        "in step costs by itself, the ceiling of any synchronous backend")
    p.add_argument("--hook-only", action="store_true",
                   help="DDP's gradient buckets filled and averaged as usual but handed back by a comm hook that "
                        "sends nothing, and one number all-reduced per step: DDP's own work without the "
                        "gradients' communication, the ceiling of any backend under DDP")
    a = p.parse_args()
    if a.no_sync + a.sync_only + a.hook_only > 1:
        p.error("--no-sync, --sync-only and --hook-only are three different runs: give one")
    dist.init_process_group(a.backend)  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x_all, y_all = load(a.data_dir, "train")
    late_rank, late_s = a.late
    if a.model == "cnn":
        body = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    else:
        body = nn.Sequential(nn.Flatten(), nn.Linear(784, 96), nn.ReLU(), nn.Linear(96, 10))
    net = DDP(body)
    if a.hook_only:
        def average_in_place(_, bucket):  # what DDP's default hook does before its all-reduce
            done = torch.futures.Future()
            done.set_result(bucket.buffer().div_(world))
            return done
        net.register_comm_hook(None, average_in_place)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    shard = torch.randperm(x_all.shape[0], generator=torch.Generator().manual_seed(0))[rank::world]
    per = a.batch // world
    seconds, samples = 0.0, 0
    for step in range(a.steps):
        t0 = time.perf_counter()
        if rank == late_rank:
            time.sleep(late_s)
        b = step % (shard.shape[0] // per)
        idx = shard[b * per:(b + 1) * per]
        opt.zero_grad()
        with net.no_sync() if a.no_sync or a.sync_only else contextlib.nullcontext():
            loss = loss_fn(net(x_all[idx]), y_all[idx])
            loss.backward()
        if a.sync_only or a.hook_only:
            dist.all_reduce(torch.zeros(1))
        opt.step()
        if step >= a.warmup:
            seconds += time.perf_counter() - t0
            samples += per
    x_test, y_test = (t[:a.test] for t in load(a.data_dir, "t10k"))
    with torch.no_grad():  # (in chunks of 100: 2,000 images at once take 11x longer on PyTorch 1.13's CPU convolution)
        right = sum((net.module(x_test[i:i + 100]).argmax(1) == y_test[i:i + 100]).sum().item() for i in range(0, a.test, 100))
    rate = torch.tensor([samples / seconds if seconds > 0 else 0.0], dtype=torch.float64)
    dist.all_reduce(rate)  # total samples/s of the job
    if rank == 0:
        print(json.dumps({"backend": a.backend, "ranks": world, "accuracy": right / a.test, "loss": loss.item(),
                          "samples_per_second": rate.item()}), flush=True)
    # Every rank done with its collectives, then the model dropped while the group lives, then
    # the group: PyTorch 1.13 can deadlock when the DDP model takes the gloo group down with it
    # as main returns (the group's worker thread, freeing a tensor, waits for the lock on
    # Python that the main thread, joining that worker, holds).
    dist.barrier()
    del net, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
