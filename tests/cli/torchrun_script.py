"""A training script written for torchrun, run unchanged under weft launch: it meets its peers
through torch.distributed's env:// rendezvous (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE),
all-reduces with gloo, and reads what torchrun tells a child. On its first attempt rank 1
fails after the all-reduce, so the launcher restarts both ranks (--max-restarts 1).
Rank 0 prints one JSON line per attempt."""
import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if rank == 0:
    print(json.dumps({
        "restart": restart, "sum": t.item(), "world": world,
        "local_world": int(os.environ["LOCAL_WORLD_SIZE"]),
        "max_restarts": int(os.environ["TORCHELASTIC_MAX_RESTARTS"]),
        "run_id": os.environ["TORCHELASTIC_RUN_ID"],
        "omp_threads": int(os.environ["OMP_NUM_THREADS"]), "torch_threads": torch.get_num_threads(),
    }), flush=True)
dist.barrier()
if restart == 0 and rank == 1:
    sys.exit(3)
dist.destroy_process_group()
