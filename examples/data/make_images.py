#!/usr/bin/env python3
"""Writes a small image classification data set in one of the layouts weft train reads
(docs/training.md, "Your own data"), with the standard library only: class k lights up its
own 2x2 patch of the image, over noise, so that a model can learn it.

    python3 examples/data/make_images.py shapes --format npy --side 12 --channels 3 --classes 13
"""
import argparse
import os
import random
import struct


def images(rng, n, side, channels, classes):
    out = []
    for _ in range(n):
        k = rng.randrange(classes)
        pixels = [[[rng.randrange(60) for _ in range(channels)] for _ in range(side)] for _ in range(side)]
        r, c = divmod(k, side // 2)
        for y in range(2 * r % side, 2 * r % side + 2):
            for x in range(2 * c % side, 2 * c % side + 2):
                pixels[y][x] = [255] * channels
        out.append((k, [v for row in pixels for px in row for v in px]))  # H, W, C order
    return out


def npy(path, descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join(f"{d}, " for d in shape))
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--format", choices=["npy", "csv"], default="npy")
    p.add_argument("--side", type=int, default=12)
    p.add_argument("--channels", type=int, choices=[1, 3], default=3)
    p.add_argument("--classes", type=int, default=13)
    p.add_argument("--train", type=int, default=600)
    p.add_argument("--test", type=int, default=200)
    a = p.parse_args()
    os.makedirs(a.folder, exist_ok=True)
    rng = random.Random(0)
    for split, n in (("train", a.train), ("test", a.test)):
        data = images(rng, n, a.side, a.channels, a.classes)
        if a.format == "npy":
            npy(f"{a.folder}/{split}-images.npy", "|u1", (n, a.side, a.side, a.channels),
                bytes(v for _, px in data for v in px))
            npy(f"{a.folder}/{split}-labels.npy", "<i8", (n,), struct.pack(f"<{n}q", *(k for k, _ in data)))
        else:
            with open(f"{a.folder}/{split}.csv", "w") as f:
                f.write("label," + ",".join(f"p{i}" for i in range(a.side * a.side * a.channels)) + "\n")
                for k, px in data:
                    f.write(f"{k}," + ",".join(map(str, px)) + "\n")
    print(f"{a.folder}: {a.train} training and {a.test} test images of {a.channels}x{a.side}x{a.side}, "
          f"{a.classes} classes ({a.format})")


if __name__ == "__main__":
    main()
