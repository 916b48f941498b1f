"""Ranks that call different operations of the "weft" backend, even of equal byte counts,
are refused with one line naming both sides (the message header's signature), never left
with garbage. Each case runs on its own group of ranks 0 and 1 (a refused operation ends its
group); the others only take part in making the groups. torch_backend_api.py runs check()
after its own checks, under each launcher (PyTorch loaded once per rank); run alone, under
`weft launch --nproc-per-node 2`, it does the same. Rank 0 prints
'mismatches: N refusals in M cases'."""
import torch
import torch.distributed as dist

ones = torch.ones


def broadcast_then_more(group):
    dist.broadcast(torch.arange(4.0), 0, group=group)  # returns: rank 0 only sends
    dist.all_reduce(torch.ones(3), group=group)


# (case, what rank 0 calls, what rank 1 calls, the ranks that refuse, words of the refusal)
cases = [
    # 80 bytes both: each rank receives the other's message, and both refuse.
    ("20 f32 against 10 f64", lambda g: dist.all_reduce(ones(20), group=g),
     lambda g: dist.all_reduce(ones(10, dtype=torch.float64), group=g), {0, 1},
     ["allreduce (sum) of 20 f32", "allreduce (sum) of 10 f64"]),
    ("f32 against i32", lambda g: dist.all_reduce(ones(8), group=g),
     lambda g: dist.all_reduce(ones(8, dtype=torch.int32), group=g), {0, 1}, ["of 8 f32", "of 8 i32"]),
    ("SUM against MAX", lambda g: dist.all_reduce(ones(6), group=g),
     lambda g: dist.all_reduce(ones(6), op=dist.ReduceOp.MAX, group=g), {0, 1},
     ["allreduce (sum) of 6 f32", "allreduce (max) of 6 f32"]),
    # Rank 0 only sends in its broadcast: rank 1 refuses the message, rank 0's call returns,
    # and rank 0's next operation with rank 1 is refused.
    ("broadcast against all_reduce", lambda g: broadcast_then_more(g),
     lambda g: dist.all_reduce(torch.arange(4.0), group=g), {0, 1},
     ["allreduce (sum) of 4 f32"]),
    ("a send of 20 f32 against a receive of 10 f64", lambda g: dist.send(ones(20), 1, group=g),
     lambda g: dist.recv(torch.zeros(10, dtype=torch.float64), 0, group=g), {1},
     ["send/recv of 20 f32", "send/recv of 10 f64"]),
]


def check():
    r = dist.get_rank()
    assert dist.get_world_size() >= 2, "two ranks at least"
    refused = 0
    for case, call0, call1, refusing, words in cases:
        group = dist.new_group([0, 1])  # (every rank makes the group; ranks 0 and 1 use it)
        if r > 1:
            continue
        try:
            (call0 if r == 0 else call1)(group)
            assert r not in refusing, f"rank {r}, {case}: the call returned"
        except RuntimeError as e:
            text = str(e).strip()
            assert r in refusing, f"rank {r}, {case}: refused unexpectedly: {text}"
            for word in words:
                assert word in text, f"rank {r}, {case}: '{word}' not in: {text}"
            assert "\n" not in text, f"rank {r}, {case}: more than one line: {text}"
            refused += 1
    # The world group still works, and the ranks together refused what they should.
    total = torch.tensor([refused])
    dist.all_reduce(total)
    want = sum(len(c[3]) for c in cases)
    assert total.item() == want, f"{total.item()} refusals, expected {want}"
    if r == 0:
        print(f"mismatches: {total.item()} refusals in {len(cases)} cases", flush=True)


if __name__ == "__main__":
    dist.init_process_group("weft")
    check()
    dist.destroy_process_group()
