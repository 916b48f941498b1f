"""weft's communicator as a torch.distributed backend.

    import torch.distributed as dist
    import weft_torch            # registers the backend "weft" (weft launch does it for you)
    dist.init_process_group("weft")

Collectives (all_reduce, broadcast, reduce, all_gather, gather, scatter, reduce_scatter,
all_to_all, barrier), send/recv and async work handles run on weft's communicator (shared
memory on one host, TCP across); DistributedDataParallel works unchanged. See
docs/pytorch.md.
"""
import atexit as _atexit
import time as _time

import torch.distributed as _dist

from ._weft_torch import create_process_group

_LEFT = "weft/ranks_left"
_holding = False


def _store_outlives_the_ranks(store, rank, size, timeout):
    """Under weft launch (as with torch's env:// without an agent) rank 0's process serves
    the job's store. At its exit it waits until every rank has left (each says so at its own
    exit), so that none still in init_process_group's barrier, or using the store, loses it
    to a Broken pipe (rank 0 may pass the barrier, finish and exit before another rank's
    last look at the barrier's count)."""
    def leave():
        try:
            store.add(_LEFT, 1)
            if rank != 0:
                return
            deadline = _time.monotonic() + timeout.total_seconds()
            while store.add(_LEFT, 0) < size and _time.monotonic() < deadline:
                _time.sleep(0.005)
        except Exception:  # the store is gone already: nobody is left to wait for
            pass
    _atexit.register(leave)


def _create(store, rank, size, timeout):
    global _holding
    pg = create_process_group(store, rank, size, timeout)
    if not _holding:  # the default group's (the first one made)
        _holding = True
        _store_outlives_the_ranks(store, rank, size, timeout)
    return pg


if "WEFT" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("weft", _create)
