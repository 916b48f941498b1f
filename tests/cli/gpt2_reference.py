#!/usr/bin/env python3
"""The reference weft's GPT-2 import is checked against: reads a GPT-2 folder in the Hugging
Face layout (config.json, model.safetensors or its shards, vocab.json + merges.txt) on its
own, tokenizes a prompt as OpenAI's encoder.py does (special tokens split out first, as
Hugging Face's tokenizer does), and continues it greedily with GPT-2's forward pass
written out in PyTorch (as in Hugging Face's GPT2LMHeadModel), in float64.

usage: gpt2_reference.py DIR PROMPT MAX_TOKENS   prints JSON: prompt_token_ids, tokens,
       text, and min_margin (the smallest gap between the top two logits over the steps)
       gpt2_reference.py DIR --encode FILE        FILE: a JSON list of texts; prints the JSON
                                                  list of their token ids
       gpt2_reference.py --jobs FILE              FILE: a JSON list of jobs, each the
                                                  arguments above and "out", the file to
                                                  write its JSON to (one process: PyTorch is
                                                  loaded once)
"""
import json
import math
import os
import struct
import sys

import regex
import torch

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Encoder:
    def __init__(self, folder):
        self.encoder = json.load(open(os.path.join(folder, "vocab.json"), encoding="utf-8"))
        self.decoder = {v: k for k, v in self.encoder.items()}
        lines = open(os.path.join(folder, "merges.txt"), encoding="utf-8").read().split("\n")
        merges = [tuple(l.split()) for l in lines if l and not l.startswith("#version")]
        self.ranks = dict(zip(merges, range(len(merges))))
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}

    def bpe(self, token):
        word = list(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            best = min(pairs, key=lambda p: self.ranks.get(p, math.inf))
            if best not in self.ranks:
                break
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        return word

    def encode(self, text):
        ids = []
        parts = text.split("<|endoftext|>")
        for k, part in enumerate(parts):
            for w in PATTERN.findall(part):
                ids += [self.encoder[p] for p in self.bpe("".join(self.byte_encoder[b] for b in w.encode("utf-8")))]
            if k + 1 < len(parts):
                ids.append(self.encoder["<|endoftext|>"])
        return ids

    def decode(self, ids):
        return bytearray(self.byte_decoder[c] for c in "".join(self.decoder[i] for i in ids)).decode("utf-8", errors="replace")


def read_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(b[8 + n + begin:8 + n + end])
        if info["dtype"] == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(raw, dtype={"F32": torch.float32, "F16": torch.float16}[info["dtype"]])
        out[name.removeprefix("transformer.")] = t.reshape(info["shape"]).to(torch.float64)
    return out


def load_weights(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(folder, f)))
    return w


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def forward(w, cfg, ids):
    d, H = cfg["n_embd"], cfg["n_head"]
    T = len(ids)
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), w[p + ".weight"], w[p + ".bias"], 1e-5)  # noqa: E731
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        qkv = ln(x, h + "ln_1") @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]
        q, k, v = (t.reshape(T, H, d // H).transpose(0, 1) for t in qkv.split(d, dim=1))
        att = (q @ k.transpose(1, 2)) / math.sqrt(d // H)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(0, 1).reshape(T, d)
        x = x + y @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        m = gelu_new(ln(x, h + "ln_2") @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"])
        x = x + m @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ w["wte.weight"].T


def run(args):
    """The JSON text of one job: [DIR, PROMPT, MAX_TOKENS] or [DIR, "--encode", FILE]."""
    if args[1] == "--encode":
        enc = Encoder(args[0])
        return json.dumps([enc.encode(t) for t in json.load(open(args[2], encoding="utf-8"))])
    folder, prompt, count = args[0], args[1], int(args[2])
    cfg = json.load(open(os.path.join(folder, "config.json")))
    enc, w = Encoder(folder), load_weights(folder)
    prompt_ids = enc.encode(prompt)
    eos = enc.encoder.get("<|endoftext|>")
    tokens, margin, _ = greedy(lambda ids: forward(w, cfg, ids), prompt_ids, count, cfg["n_positions"], eos)
    text = enc.decode([t for t in tokens if t != eos])
    return json.dumps({"prompt_token_ids": prompt_ids, "tokens": tokens, "text": text, "min_margin": margin})


def greedy(logits_of, prompt_ids, count, context, eos):
    """Continues prompt_ids (or, when empty, eos) greedily for up to `count` tokens, stopping
    at eos, over the last `context` tokens each step: the tokens, the smallest gap between the
    top two logits, and each step's logits."""
    ids = list(prompt_ids) or [eos]
    tokens, margin, steps = [], math.inf, []
    for _ in range(count):
        logits = logits_of(ids[-context:])[-1]
        top = torch.topk(logits, 2).values
        margin = min(margin, float(top[0] - top[1]))
        steps.append(logits.tolist())
        t = int(logits.argmax())
        tokens.append(t)
        ids.append(t)
        if t == eos:
            break
    return tokens, margin, steps


def main_with(run):
    """Runs the job the command line names, or (--jobs FILE) each job of FILE, with `run`."""
    if sys.argv[1] == "--jobs":
        for job in json.load(open(sys.argv[2], encoding="utf-8")):
            with open(job["out"], "w", encoding="utf-8") as f:
                f.write(run(job["args"]) + "\n")
        return
    print(run(sys.argv[1:]))


def main():
    main_with(run)


if __name__ == "__main__":
    main()
