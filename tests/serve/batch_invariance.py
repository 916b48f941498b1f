"""usage: batch_invariance.py WEFT

A request's tokens and logprobs do not depend on what else weft serve batches with it
(docs/serving.md, "The same tokens under any load"): for float32, bf16 and int8 weights (and int8 with a bf16
key-value cache, and float32 with prompts fed in pieces of 16 tokens, which must also give the
whole prompts' bits), a greedy completion, a seeded sampled one, a greedy one after a 20-token
prompt (its attention in panels) and one after 32 tokens, each asked alone and then while 6 other streams decode (their steps
share every product with it, the probe's prompt prefilled among their rows), give the same
text and the same logprobs to the last bit. The server's batch-size histogram shows that the
second asking shared its steps. And float32 servers capped at AVX2 and at the scalar baseline
(WEFT_CPU_ISA) give the same bits as the widest path.
"""
import http.client
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_lib import metric_in, start_server, train_tiny_gpt  # noqa: E402

weft = sys.argv[1]
work = tempfile.mkdtemp()
model = train_tiny_gpt(weft, work)

PROBES = [{"prompt": "The meaning of", "max_tokens": 40, "temperature": 0, "logprobs": 2},
          {"prompt": "Once upon", "max_tokens": 40, "temperature": 0.9, "seed": 11, "logprobs": 2},
          {"prompt": "The question and the", "max_tokens": 30, "temperature": 0,
           "logprobs": 2},
          {"prompt": "A question, and then the answer.", "max_tokens": 20, "temperature": 0, "logprobs": 2}]


def complete(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    got = json.loads(r.read())
    if r.status != 200:
        sys.exit(f"FAIL: {r.status} {got}")
    choice = got["choices"][0]
    return choice["text"], choice["logprobs"]


def shared_steps(port):
    """Decoding steps of more than one sequence so far."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    return metric_in(text, "weft_batch_size_count") - metric_in(text, 'weft_batch_size_bucket{le="1"}')


HOLDINGS = [("fp32", []), ("bf16", []), ("int8", []), ("int8", ["--kv-cache-dtype", "bf16"]),
            ("fp32", ["--max-prefill-tokens", "16"])]
for quantize, more in HOLDINGS:
    fmt = quantize + (" weights, " + " ".join(more) if more else "")
    server, port = start_server(weft, model, work, "--quantize", quantize, "--max-tokens", "100000", *more)
    alone = [complete(port, p) for p in PROBES]
    before = shared_steps(port)
    others = []
    for i in range(6):  # streams in flight: each has sent its first token before the probes go
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/completions", json.dumps({"prompt": f"Other text {i}", "max_tokens": 3000,
                                                         "temperature": 0.7, "seed": i, "stream": True}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.status
        r.fp.readline()
        others.append((c, r))
    together = [complete(port, p) for p in PROBES]
    during = shared_steps(port) - before
    for c, _ in others:
        c.close()
    server.terminate()
    server.wait(timeout=30)
    if during < 40:
        sys.exit(f"FAIL: {fmt}: only {during} steps shared by several sequences while the probes ran")
    for p, a, t in zip(PROBES, alone, together):
        if a != t:
            sys.exit(f"FAIL: {fmt}: {p['prompt']!r} alone gave {a[0]!r} {a[1]['token_logprobs'][:4]}, among 6 "
                     f"streams {t[0]!r} {t[1]['token_logprobs'][:4]}")
    print(f"{fmt}: the same text and logprobs alone and among 6 streams ({during:.0f} shared steps)")
    if fmt == "fp32":
        reference = alone
    if "--max-prefill-tokens" in more and alone != reference:  # the 32-token prompt in 2 pieces
        sys.exit(f"FAIL: {fmt}: {alone[3][1]['token_logprobs'][:4]} against whole prompts' "
                 f"{reference[3][1]['token_logprobs'][:4]}")
# The same bits on every instruction-set path (AVX-512 where the processor has it, AVX2 with
# FMA, the scalar baseline), float32 weights.
for isa in ["avx2", "sse41"]:
    os.environ["WEFT_CPU_ISA"] = isa
    server, port = start_server(weft, model, work, "--max-tokens", "100000")
    got = [complete(port, p) for p in PROBES]
    server.terminate()
    server.wait(timeout=30)
    if got != reference:
        sys.exit(f"FAIL: WEFT_CPU_ISA={isa}: {got[0][1]['token_logprobs'][:4]} against {reference[0][1]['token_logprobs'][:4]}")
    print(f"WEFT_CPU_ISA={isa}: the same text and logprobs as on the widest path")
del os.environ["WEFT_CPU_ISA"]
print("PASS")
