#!/usr/bin/python3
"""The PyTorch side of bench/gpt_step: the GPT of `weft train --model gpt` (learned positions,
pre-LN blocks, GELU (tanh), tied head), character tokens of the same corpus, random windows,
AdamW (betas 0.9/0.95, weight decay 0.1). Times forward, backward and update of each step,
like weft; batch assembly excluded. Prints one JSON line."""
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
    p.add_argument("--warmup", type=int, default=0, help="steps run first and left out of the rate")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    text = load_corpus(a.data)
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    tokens = torch.tensor([index[c] for c in text[: len(text) * 9 // 10]], dtype=torch.long)
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
