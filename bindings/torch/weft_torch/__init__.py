"""weft's communicator as a torch.distributed backend.

    import torch.distributed as dist
    import weft_torch            # registers the backend "weft" (weft launch does it for you)
    dist.init_process_group("weft")

Collectives (all_reduce, broadcast, reduce, all_gather, gather, scatter, reduce_scatter,
all_to_all, barrier), send/recv and async work handles run on weft's communicator (shared
memory on one host, TCP across); DistributedDataParallel works unchanged. See
docs/pytorch.md.
"""
import torch.distributed as _dist

from ._weft_torch import create_process_group

if "WEFT" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("weft", create_process_group)
