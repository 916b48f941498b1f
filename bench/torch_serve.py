#!/usr/bin/python3
"""The PyTorch side of bench/serve: the same GPT (weights read from weft's safetensors file),
in eager mode with a key-value cache, behind Python's ThreadingHTTPServer, speaking the
subset of OpenAI's completions API the load generator uses (prompt, max_tokens,
temperature, seed, stream with server-sent events, stream_options.include_usage). Each
request decodes on its own thread: the best a user does with PyTorch and the standard
library alone (no batching server).

usage: torch_serve.py MODEL.safetensors PORT [--threads N]"""
import argparse, json, math, struct, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.nn.functional as F


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", e
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + b:base + end]), dtype=torch.float32)
        tensors[name] = t.reshape(e["shape"]) if e["shape"] else t
    return tensors, meta


class Gpt:
    """weft's GPT (pre-LN, learned positions, GELU tanh, tied head) with a key-value cache."""

    def __init__(self, w, meta):
        assert meta["weft_model"] == "gpt" and meta["weft_positional"] == "learned" and meta["weft_pre_ln"] == "1"
        self.w, self.layers = w, int(meta["weft_layers"])
        self.heads, self.d, self.context = int(meta["weft_heads"]), int(meta["weft_dim"]), int(meta["weft_context"])

    def ln(self, x, name):
        return F.layer_norm(x, (self.d,), self.w[name + ".weight"], self.w[name + ".bias"], 1e-5)

    def lin(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def step(self, ids, cache):
        """ids: new tokens [T]; cache: per layer (k, v) [H, L, hd] or None. Returns logits of the last."""
        w, d, H = self.w, self.d, self.heads
        hd, T = d // H, ids.shape[0]
        past = 0 if cache[0] is None else cache[0][0].shape[1]
        x = w["wte.weight"][ids] + w["wpe.weight"][past:past + T]
        for i in range(self.layers):
            h = f"h{i}."
            q, k, v = self.lin(self.ln(x, h + "ln1"), h + "attn.qkv").split(d, dim=1)
            q, k, v = (t.view(T, H, hd).transpose(0, 1) for t in (q, k, v))
            if cache[i] is not None:
                k, v = torch.cat([cache[i][0], k], 1), torch.cat([cache[i][1], v], 1)
            cache[i] = (k, v)
            s = (q @ k.transpose(1, 2)) / math.sqrt(hd)
            if T > 1:
                s = s.masked_fill(torch.ones(T, past + T, dtype=torch.bool).triu(past + 1), float("-inf"))
            a = (F.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(T, d)
            x = x + self.lin(a, h + "attn.proj")
            x = x + self.lin(F.gelu(self.lin(self.ln(x, h + "ln2"), h + "fc"), approximate="tanh"), h + "out")
        return self.ln(x[-1:], "ln_f") @ w["wte.weight"].t()

    def generate(self, ids, max_tokens, temperature, seed):
        """Yields token ids; past the context, the window of the last `context` tokens again."""
        g = torch.Generator().manual_seed(seed)
        cache, tokens = [None] * self.layers, list(ids)
        feed = torch.tensor(tokens[-self.context:])
        for _ in range(max_tokens):
            logits = self.step(feed, cache)[0]
            if temperature <= 0:
                t = int(torch.argmax(logits))
            else:
                t = int(torch.multinomial(F.softmax(logits / temperature, -1), 1, generator=g))
            tokens.append(t)
            yield t
            if cache[0][0].shape[1] >= self.context:
                cache, feed = [None] * self.layers, torch.tensor(tokens[-self.context:])
            else:
                feed = torch.tensor([t])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("port", type=int)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    weights, meta = read_safetensors(a.model)
    model = Gpt(weights, meta)
    assert meta["weft_tokenizer"] == "char"
    chars = bytes.fromhex(meta["weft_tokenizer_vocabulary"])
    index = {c: i for i, c in enumerate(chars)}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send_json(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            if self.path != "/v1/completions":
                return self.send_json(404, {"error": {"message": "not found"}})
            r = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ids = [index.get(b, 0) for b in r["prompt"].encode()] or [0]
            n, temp, seed = int(r.get("max_tokens", 16)), float(r.get("temperature", 1)), int(r.get("seed", 0))
            cid, created = f"cmpl-{seed}", int(time.time())
            with torch.inference_mode():
                if not r.get("stream"):
                    out = bytes(chars[t] for t in model.generate(ids, n, temp, seed))
                    return self.send_json(200, {"id": cid, "object": "text_completion", "created": created,
                                                "choices": [{"text": out.decode(errors="replace"), "index": 0,
                                                             "finish_reason": "length"}],
                                                "usage": {"prompt_tokens": len(ids), "completion_tokens": n}})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def event(obj):
                    data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()

                count = 0
                for t in model.generate(ids, n, temp, seed):
                    count += 1
                    event({"id": cid, "object": "text_completion", "created": created,
                           "choices": [{"text": chr(chars[t]), "index": 0, "finish_reason": None}]})
                event({"id": cid, "object": "text_completion", "created": created,
                       "choices": [{"text": "", "index": 0, "finish_reason": "length"}]})
                if r.get("stream_options", {}).get("include_usage"):
                    event({"id": cid, "object": "text_completion", "created": created, "choices": [],
                           "usage": {"prompt_tokens": len(ids), "completion_tokens": count,
                                     "total_tokens": len(ids) + count}})
                event(b"[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

    ThreadingHTTPServer.request_queue_size = 128  # (the default backlog of 5 drops concurrent connects)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    print(f"torch_serve: listening on 127.0.0.1:{a.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
