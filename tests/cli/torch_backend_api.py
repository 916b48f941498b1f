"""Every torch.distributed call of the "weft" backend against the values it must give, run
under `weft launch` (which registers the backend: the script never imports weft_torch).
Rank 0 prints 'torch backend: N checks' when every rank passed."""
import torch
import torch.distributed as dist

dist.init_process_group("weft")
r, w = dist.get_rank(), dist.get_world_size()
checks = 0


def expect(ok, what):
    global checks
    checks += 1
    assert ok, f"rank {r}: {what}"


assert dist.get_backend() == "weft"
t = torch.full((5,), float(r + 1))
dist.all_reduce(t)
expect(t.tolist() == [w * (w + 1) / 2] * 5, f"all_reduce sum {t}")
for op, want in ((dist.ReduceOp.MAX, w - 1), (dist.ReduceOp.MIN, 0), (dist.ReduceOp.PRODUCT, 0)):
    t = torch.tensor([r], dtype=torch.int64)
    dist.all_reduce(t, op=op)
    expect(t.item() == want, f"all_reduce {op}: {t}")
t = torch.full((3,), float(r), dtype=torch.float64)
dist.all_reduce(t, op=dist.ReduceOp.AVG)
expect(t.tolist() == [(w - 1) / 2] * 3, f"all_reduce avg {t}")
for dtype in (torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.uint8):
    t = torch.ones(7, dtype=dtype)
    dist.all_reduce(t)
    expect(t.tolist() == [w] * 7, f"all_reduce {dtype}: {t}")
t = torch.tensor([r == 1, True])
dist.all_reduce(t, op=dist.ReduceOp.MAX)
expect(t.tolist() == [True, True], f"all_reduce bool max {t}")
t = torch.arange(4, dtype=torch.float64) * (r + 1)
dist.broadcast(t, w - 1)
expect(t.tolist() == [0.0, w, 2.0 * w, 3.0 * w], f"broadcast {t}")
t = torch.full((2,), float(r + 1))
dist.reduce(t, dst=0)
expect(r != 0 or t.tolist() == [w * (w + 1) / 2] * 2, f"reduce {t}")
out = [torch.zeros(3, dtype=torch.int64) for _ in range(w)]
dist.all_gather(out, torch.full((3,), r))
expect([o.tolist() for o in out] == [[i] * 3 for i in range(w)], f"all_gather {out}")
flat = torch.empty(2 * w)
dist.all_gather_into_tensor(flat, torch.full((2,), float(r))) if hasattr(dist, "all_gather_into_tensor") else \
    dist._all_gather_base(flat, torch.full((2,), float(r)))
expect(flat.tolist() == [float(i) for i in range(w) for _ in range(2)], f"all_gather base {flat}")
got = [torch.zeros(2) for _ in range(w)] if r == 0 else None
dist.gather(torch.full((2,), float(r * r)), got, dst=0)
expect(r != 0 or [g.tolist() for g in got] == [[float(i * i)] * 2 for i in range(w)], f"gather {got}")
o = torch.zeros(3)
dist.scatter(o, [torch.full((3,), float(10 + i)) for i in range(w)] if r == 1 else None, src=1)
expect(o.tolist() == [10.0 + r] * 3, f"scatter {o}")
o = torch.zeros(2)
dist.reduce_scatter(o, [torch.full((2,), float(r * 10 + j)) for j in range(w)])
expect(o.tolist() == [float(sum(q * 10 + r for q in range(w)))] * 2, f"reduce_scatter {o}")
a = torch.arange(w * 2, dtype=torch.float32) + 100 * r
b = torch.empty_like(a)
dist.all_to_all_single(b, a)
expect(b.tolist() == [100.0 * j + 2 * r + k for j in range(w) for k in range(2)], f"all_to_all_single {b}")
# Uneven splits: rank r sends j + 1 rows to rank j, so it receives r + 1 rows from each.
send = torch.cat([torch.full((j + 1, 2), float(10 * r + j)) for j in range(w)])
recv = torch.empty((w * (r + 1), 2))
dist.all_to_all_single(recv, send, [r + 1] * w, [j + 1 for j in range(w)])
expect(recv[:, 0].tolist() == [float(10 * j + r) for j in range(w) for _ in range(r + 1)], f"uneven all_to_all {recv}")
outs = [torch.empty(j + 1) for j in range(w)]
dist.all_to_all(outs, [torch.full((r + 1,), float(r)) for _ in range(w)])
expect([o.tolist() for o in outs] == [[float(j)] * (j + 1) for j in range(w)], f"all_to_all {outs}")
# Point to point: a ring, posted as isend/irecv, then blocking send/recv.
x = torch.zeros(4)
ops = [dist.P2POp(dist.isend, torch.full((4,), float(r)), (r + 1) % w),
       dist.P2POp(dist.irecv, x, (r + w - 1) % w)]
for req in dist.batch_isend_irecv(ops):
    req.wait()
expect(x.tolist() == [float((r + w - 1) % w)] * 4, f"batch_isend_irecv {x}")
if r == 0:
    dist.send(torch.tensor([7.5]), 1)
elif r == 1:
    y = torch.zeros(1)
    dist.recv(y, 0)
    expect(y.item() == 7.5, f"send/recv {y}")
# Async handles and futures.
h = dist.all_reduce(torch.ones(1000), async_op=True)
h.wait()
expect(h.is_completed(), "async all_reduce completed after wait")
f = dist.all_reduce(torch.ones(10), async_op=True).get_future()
expect(f.wait()[0].sum().item() == 10 * w, "future of all_reduce")
f = dist.all_reduce(torch.ones(3), async_op=True).get_future().then(lambda fut: fut.value()[0] * 2)
expect(f.wait().tolist() == [2.0 * w] * 3, "future then")
dist.barrier()
objs = [None] * w
dist.all_gather_object(objs, {"rank": r})
expect(objs == [{"rank": i} for i in range(w)], f"all_gather_object {objs}")
box = [{"from": "root"}] if r == 0 else [None]
dist.broadcast_object_list(box, src=0)
expect(box == [{"from": "root"}], f"broadcast_object_list {box}")
# A sub-group of the even ranks.
evens = dist.new_group([i for i in range(w) if i % 2 == 0])
if r % 2 == 0:
    t = torch.ones(2)
    dist.all_reduce(t, group=evens)
    expect(t.tolist() == [float((w + 1) // 2)] * 2, f"sub-group all_reduce {t}")
# Errors are reported, not crashed on.
try:
    dist.all_reduce(torch.ones(4)[::2])
    expect(False, "a non-contiguous tensor was accepted")
except RuntimeError as e:
    expect("contiguous" in str(e), f"error text: {e}")
try:
    dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
    expect(False, "BAND was accepted")
except RuntimeError as e:
    expect("not supported" in str(e), f"error text: {e}")
# Sizes and types a flat buffer would misread are refused before anything is sent (every
# rank makes the same mistake, so none waits for another).
for call, words in (
        (lambda: dist.all_gather([torch.zeros(2) for _ in range(w)], torch.ones(3)), "all_gather's output"),
        (lambda: dist.reduce_scatter(torch.zeros(2), [torch.ones(5) for _ in range(w)]), "reduce_scatter's input"),
        (lambda: dist._all_gather_base(torch.zeros(2 * w, dtype=torch.float64), torch.ones(2)), "in one call"),
        (lambda: dist.all_to_all_single(torch.zeros(w), torch.zeros(w), [1] * w, [-1] + [1] * (w - 1)), "split -1")):
    try:
        call()
        expect(False, f"accepted: {words}")
    except RuntimeError as e:
        expect(words in str(e), f"error text: {e}")
total = torch.tensor([checks])
dist.all_reduce(total)
if r == 0:
    print(f"torch backend: {total.item()} checks on {w} ranks", flush=True)
# Ranks that call different operations: refused (torch_mismatch.py, beside this script).
import torch_mismatch  # noqa: E402

torch_mismatch.check()
dist.destroy_process_group()
