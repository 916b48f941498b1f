#!/usr/bin/python3
"""The PyTorch side of bench/train_throughput: the same models, data, batch and optimizer
as `weft train`, timed the same way (forward, backward and update of each step; batch
assembly included, evaluation excluded), after --warmup untimed steps. Prints one JSON line."""
import argparse, gzip, json, os, time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def find(d, stem):
    for ext in (".gz", ""):
        if os.path.exists(os.path.join(d, stem + ext)):
            return os.path.join(d, stem + ext)
    raise SystemExit(f"error: {d} has no {stem}")


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    raise SystemExit(f"error: unknown model {name}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=0, help="steps run first and left out of the rate")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    images = read_idx(find(a.data_dir, "train-images-idx3-ubyte"))
    labels = read_idx(find(a.data_dir, "train-labels-idx1-ubyte"))
    x_all = torch.from_numpy(((images.astype(np.float32) / 255.0 - 0.2860) / 0.3530).reshape(-1, 1, 28, 28))
    y_all = torch.from_numpy(labels.astype(np.int64))
    net = model(a.model)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(a.seed)
    order = torch.randperm(x_all.shape[0], generator=g)
    steps_per_epoch = (x_all.shape[0] + a.batch - 1) // a.batch
    train_seconds, samples = 0.0, 0
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            train_seconds, samples = 0.0, 0
        b = step % steps_per_epoch
        t0 = time.perf_counter()
        idx = order[b * a.batch:(b + 1) * a.batch]
        x, y = x_all[idx], y_all[idx]
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        train_seconds += time.perf_counter() - t0
        samples += x.shape[0]
    print(json.dumps({"model": a.model, "threads": a.threads, "steps": a.steps, "warmup": a.warmup, "samples": samples,
                      "train_seconds": train_seconds, "samples_per_second": samples / train_seconds,
                      "final_loss": float(loss)}))


if __name__ == "__main__":
    main()
