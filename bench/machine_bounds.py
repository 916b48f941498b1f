"""usage: machine_bounds.py [--threads N]

What this machine can do at best, for the serving benchmark's bounds (bench/serve):
  - memory bandwidth: a STREAM-like copy of 512 MiB arrays (numpy.copyto, which releases the
    GIL; N threads each copy a slice), bytes read plus bytes written per second, the best of 5;
  - GEMM rate: float32 products of 2048 x 2048 matrices (numpy on OpenBLAS, its own threads),
    2 n^3 FLOPs each, the best of 5.
Prints JSON: {"bandwidth_gb_s", "gemm_gflops", "threads"}.
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
np.copyto(dst, src)  # pages touched before timing
cuts = [n * i // threads for i in range(threads + 1)]


def copy_slice(i):
    np.copyto(dst[cuts[i]:cuts[i + 1]], src[cuts[i]:cuts[i + 1]])


best_copy = float("inf")
for _ in range(5):
    workers = [threading.Thread(target=copy_slice, args=(i,)) for i in range(threads)]
    t = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    best_copy = min(best_copy, time.perf_counter() - t)
bandwidth = 2 * src.nbytes / best_copy / 1e9

m = 2048
a = np.random.default_rng(0).standard_normal((m, m), dtype=np.float32)
b = np.random.default_rng(1).standard_normal((m, m), dtype=np.float32)
a @ b
best_gemm = float("inf")
for _ in range(5):
    t = time.perf_counter()
    a @ b
    best_gemm = min(best_gemm, time.perf_counter() - t)
print(json.dumps({"bandwidth_gb_s": bandwidth, "gemm_gflops": 2 * m ** 3 / best_gemm / 1e9, "threads": threads}))
