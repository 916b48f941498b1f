#!/usr/bin/python3
"""The PyTorch side of bench/gpt_step and bench/model_step: the GPT of `weft train --model gpt`
(learned positions, pre-LN blocks, GELU (tanh), tied head) or, with --llama, the model of
`weft train --model llama` (RMSNorm, rotary positions as Hugging Face's Llama applies them,
grouped-query attention with --kv-heads, SwiGLU of --mlp-width, no biases, an untied head),
character tokens of the same corpus, random windows, AdamW (betas 0.9/0.95, weight decay
0.1). Times forward, backward and update of each step, like weft; batch assembly excluded.
Prints one JSON line."""
import argparse, json, math, os, time

import torch
import torch.nn as nn
import torch.nn.functional as F


def load_corpus(path):
    if path == "fortunes":
        path = "/usr/share/games/fortunes"
    files = [path]
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if not f.startswith(".") and not f.endswith((".dat", ".u8"))
                       and os.path.isfile(os.path.join(path, f)))
    out = bytearray()
    for f in files:
        for line in open(f, "rb").read().split(b"\n"):
            out += (b"" if line == b"%" else line) + b"\n"
    return bytes(out)


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(B, T, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            a = F.softmax(s, dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, d, layers, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, d, h, kv, f):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, d // h
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
        self.qkv = nn.Linear(d, (h + 2 * kv) * self.hd, bias=False)
        self.proj = nn.Linear(h * self.hd, d, bias=False)
        self.gate_up, self.down = nn.Linear(d, 2 * f, bias=False), nn.Linear(f, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, d = x.shape
        hd = self.hd
        q, k, v = self.qkv(self.ln1(x)).split([self.h * hd, self.kv * hd, self.kv * hd], dim=2)
        q = q.view(B, T, self.h, hd).transpose(1, 2)
        k = k.view(B, T, self.kv, hd).transpose(1, 2)
        v = v.view(B, T, self.kv, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(self.h // self.kv, dim=1), v.repeat_interleave(self.h // self.kv, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            a = F.softmax(s, dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, self.h * hd))
        gate, up = self.gate_up(self.ln2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, vocab, context, d, layers, heads, kv, f, theta=10000.0):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, kv, f) for _ in range(layers))
        self.ln_f, self.head = RMSNorm(d), nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        angles = torch.arange(context, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.wte(ids)
        for b in self.blocks:
            x = b(x, self.cos[:T], self.sin[:T])
        return self.head(self.ln_f(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="fortunes")
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="mixed precision: CPU autocast to bfloat16")
    p.add_argument("--llama", action="store_true", help="the Llama-shaped model (weft's --model llama)")
    p.add_argument("--kv-heads", type=int, default=0, help="--llama: key-value heads (0: --heads)")
    p.add_argument("--mlp-width", type=int, default=0, help="--llama: the MLP's width (0: 8/3 d rounded up to 8)")
    p.add_argument("--warmup", type=int, default=0, help="steps run first and left out of the rate")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    text = load_corpus(a.data)
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    tokens = torch.tensor([index[c] for c in text[: len(text) * 9 // 10]], dtype=torch.long)
    if a.llama:
        width = a.mlp_width or (8 * a.d_model // 3 + 7) // 8 * 8
        net = Llama(len(chars), a.context, a.d_model, a.layers, a.heads, a.kv_heads or a.heads, width)
    else:
        net = GPT(len(chars), a.context, a.d_model, a.layers, a.heads)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    seconds, loss = 0.0, float("nan")
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            seconds = 0.0
        starts = torch.randint(0, len(tokens) - a.context - 1, (a.batch,))
        x = torch.stack([tokens[s: s + a.context] for s in starts])
        y = torch.stack([tokens[s + 1: s + a.context + 1] for s in starts])
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = net(x)
        l = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
        l.backward()
        opt.step()
        seconds += time.perf_counter() - t0
        loss = l.item()
    print(json.dumps({"tokens_per_second": a.steps * a.batch * a.context / seconds, "loss": loss,
                      "parameters": sum(p.numel() for p in net.parameters()), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
