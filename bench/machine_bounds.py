"""usage: machine_bounds.py [--threads N]

What this machine can do at best, for the serving benchmark's bounds (bench/serve):
  - memory bandwidth: a STREAM-like copy of 512 MiB arrays (numpy.copyto, which releases the
    GIL; N threads each copy a slice), bytes read plus bytes written per second, the best of 5;
  - read bandwidth: the same 512 MiB read once, as a float32 matrix [131072, 1024] times a
    vector (numpy on OpenBLAS's GEMV, its own threads: it reads each element once, as a
    decoding step reads its weights), bytes read per second, the best of 5. On AMD's
    processors reads and writes take separate paths from memory, so a copy's two directions
    add up to more than one direction can carry;
  - GEMM rate: float32 products of 2048 x 2048 matrices (numpy on OpenBLAS, its own threads),
    2 n^3 FLOPs each, the best of 5.
Prints JSON: {"bandwidth_gb_s", "read_gb_s", "gemm_gflops", "threads"}.
"""
import json
import os
import sys
import threading
import time

import numpy as np

threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else os.cpu_count()
n = (512 << 20) // 4
src = np.ones(n, dtype=np.float32)
dst = np.empty_like(src)
cuts = [n * i // threads for i in range(threads + 1)]


def copy_slice(i):
    np.copyto(dst[cuts[i]:cuts[i + 1]], src[cuts[i]:cuts[i + 1]])


def copy():
    workers = [threading.Thread(target=copy_slice, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def best_of_5(fn):
    """The shortest of 5 timed calls of fn, after one untimed call."""
    fn()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


bandwidth = 2 * src.nbytes / best_of_5(copy) / 1e9
matrix = src.reshape(-1, 1024)
vector = np.ones(1024, dtype=np.float32)
read = src.nbytes / best_of_5(lambda: matrix @ vector) / 1e9
m = 2048
a = np.random.default_rng(0).standard_normal((m, m), dtype=np.float32)
b = np.random.default_rng(1).standard_normal((m, m), dtype=np.float32)
gemm = 2 * m ** 3 / best_of_5(lambda: a @ b) / 1e9
print(json.dumps({"bandwidth_gb_s": bandwidth, "read_gb_s": read, "gemm_gflops": gemm, "threads": threads}))
