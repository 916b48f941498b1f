#!/usr/bin/python3
"""The PyTorch side of bench/ddp: the CNN trained with DistributedDataParallel over the
gloo backend, run under `weft launch` (torchrun's environment). Same data, global batch,
optimizer and timing as `weft train` (batch assembly, forward, backward with the
all-reduce, optimizer step). Rank 0 prints one JSON line with the total samples/s."""
import argparse, json, os, sys, time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from busbw import late_arg  # noqa: E402
from torch_train import find, model, read_idx  # noqa: E402

import numpy as np  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=0, help="steps left out of samples/s")
    p.add_argument("--late", type=late_arg, default=(-1, 0.0), metavar="RANK:US",
                   help="that rank sleeps US microseconds in each step (a straggler, as WEFT_STRAGGLER)")
    a = p.parse_args()
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    late_rank, late_s = a.late
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    images = read_idx(find(a.data_dir, "train-images-idx3-ubyte"))
    labels = read_idx(find(a.data_dir, "train-labels-idx1-ubyte"))
    x_all = torch.from_numpy(((images.astype(np.float32) / 255.0 - 0.2860) / 0.3530).reshape(-1, 1, 28, 28))
    y_all = torch.from_numpy(labels.astype(np.int64))
    net = DDP(model(a.model))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    order = torch.randperm(x_all.shape[0], generator=torch.Generator().manual_seed(0))
    shard = order[rank::world]
    per = a.batch // world
    seconds, samples = 0.0, 0
    for step in range(a.steps):
        b = step % (shard.shape[0] // per)
        t0 = time.perf_counter()
        if rank == late_rank:
            time.sleep(late_s)
        idx = shard[b * per:(b + 1) * per]
        x, y = x_all[idx], y_all[idx]
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        if step >= a.warmup:
            seconds += time.perf_counter() - t0
            samples += x.shape[0]
    rate = torch.tensor([samples / seconds], dtype=torch.float64)
    dist.all_reduce(rate)
    if rank == 0:
        print(json.dumps({"ranks": world, "samples_per_second": rate.item()}), flush=True)
    # The teardown of examples/pytorch/ddp_fashion_mnist.py: every rank done, the model dropped
    # while the group lives, then the group (PyTorch 1.13 can deadlock when the DDP model takes
    # the gloo group down with it as main returns).
    dist.barrier()
    del net, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
