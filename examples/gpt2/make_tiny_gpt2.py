#!/usr/bin/env python3
"""Writes a small GPT-2 model folder in the Hugging Face layout, the kind weft imports:

    config.json         GPT-2's configuration (model_type gpt2)
    model.safetensors   the parameters by Hugging Face's names (Conv1D weights [in, out])
    vocab.json          GPT-2's byte-level BPE vocabulary (256 byte tokens, the merges'
    merges.txt          tokens and <|endoftext|>), learned here from a corpus

The weights are random (seeded): the folder is for trying the import and checking it
against a reference, not for reading the text it generates. A real GPT-2 folder (from the
model hub, or `save_pretrained`) has the same files.

usage: make_tiny_gpt2.py OUT_DIR [--corpus FILE] [--merges N] [--dim D] [--layers L]
                         [--heads H] [--context T] [--dtype F32|F16|BF16] [--prefix]
                         [--shards N] [--seed S] [--model-vocab V]
"""
import argparse
import collections
import json
import os
import struct
import sys

import numpy as np
import regex  # GPT-2's pattern needs Unicode classes (\p{L}, \p{N})

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 byte values."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def learn_merges(text, count, pattern=PATTERN):
    """Byte-level BPE: the most frequent adjacent pair of each round merges (ties: the pair
    that sorts first); words cut by `pattern` (GPT-2's by default). The pair counts are kept
    up to date word by word: a merge recounts only the words that hold its pair."""
    stand_in = bytes_to_unicode()
    words = collections.Counter("".join(stand_in[b] for b in w.encode("utf-8")) for w in pattern.findall(text))
    split = {w: list(w) for w in words}
    pairs = collections.Counter()
    holders = collections.defaultdict(set)  # pair -> the words that hold it
    for w, freq in words.items():
        for pair in zip(split[w], split[w][1:]):
            pairs[pair] += freq
            holders[pair].add(w)
    merges = []
    for _ in range(count):
        if not pairs:
            break
        top = max(pairs.values())
        best = max((p for p, n in pairs.items() if n == top), key=lambda p: [-ord(c) for c in p[0] + " " + p[1]])
        merges.append(best)
        for w in holders.pop(best):
            pieces, out, i = split[w], [], 0
            while i < len(pieces):
                if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == best:
                    out.append(pieces[i] + pieces[i + 1])
                    i += 2
                else:
                    out.append(pieces[i])
                    i += 1
            for pair in zip(pieces, pieces[1:]):
                pairs[pair] -= words[w]
                if pairs[pair] == 0:
                    del pairs[pair]
                    holders.pop(pair, None)
            for pair in zip(out, out[1:]):
                pairs[pair] += words[w]
                holders[pair].add(w)
            split[w] = out
    return merges


def tensor_bytes(t, dtype):
    """A float32 array's little-endian bytes in `dtype` (bfloat16: rounded to nearest even)."""
    t = np.ascontiguousarray(t, dtype=np.float32)
    if dtype == "F32":
        return t.astype("<f4").tobytes()
    if dtype == "F16":
        return t.astype("<f2").tobytes()
    bits = t.view(np.uint32).astype(np.uint64)  # BF16: the upper half, rounded
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_safetensors(path, tensors, dtype, metadata=None):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_model(out, tensors, dtype, shards):
    """The parameters as model.safetensors, or in `shards` files with model.safetensors.index.json."""
    meta = {"format": "pt"}
    if shards <= 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype, meta)
        return
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(out, file), {n: tensors[n] for n in part}, dtype, meta)
        weight_map.update({n: file for n in part})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--corpus", default="/usr/share/games/fortunes/fortunes")
    p.add_argument("--merges", type=int, default=300)
    p.add_argument("--dim", type=int, default=48)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
    p.add_argument("--prefix", action="store_true", help='names with "transformer." before them, and lm_head.weight')
    p.add_argument("--shards", type=int, default=1, help="split into N files with model.safetensors.index.json")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model-vocab", type=int, default=0,
                   help="rows of the embedding when more than the tokenizer's tokens (padded, as some models are)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)

    text = open(a.corpus, encoding="utf-8", errors="replace").read()[:60000]
    merges = learn_merges(text, a.merges)
    stand_in = bytes_to_unicode()
    vocab = {stand_in[b]: i for i, b in enumerate(sorted(stand_in))}
    for x, y in merges:
        vocab.setdefault(x + y, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(a.out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(a.out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{x} {y}\n" for x, y in merges))

    d, L, V, T = a.dim, a.layers, max(len(vocab), a.model_vocab), a.context
    g = np.random.default_rng(a.seed)
    rand = lambda *shape, std=0.3: (g.standard_normal(shape) * std).astype(np.float32)  # noqa: E731
    pre = "transformer." if a.prefix else ""
    tensors = {pre + "wte.weight": rand(V, d), pre + "wpe.weight": rand(T, d, std=0.1)}
    for i in range(L):
        h = f"{pre}h.{i}."
        tensors.update({
            h + "ln_1.weight": 1 + rand(d, std=0.1), h + "ln_1.bias": rand(d, std=0.1),
            h + "attn.bias": np.tril(np.ones((T, T), np.float32)).reshape(1, 1, T, T),  # the causal mask older files carry
            h + "attn.c_attn.weight": rand(d, 3 * d), h + "attn.c_attn.bias": rand(3 * d, std=0.1),
            h + "attn.c_proj.weight": rand(d, d), h + "attn.c_proj.bias": rand(d, std=0.1),
            h + "ln_2.weight": 1 + rand(d, std=0.1), h + "ln_2.bias": rand(d, std=0.1),
            h + "mlp.c_fc.weight": rand(d, 4 * d), h + "mlp.c_fc.bias": rand(4 * d, std=0.1),
            h + "mlp.c_proj.weight": rand(4 * d, d, std=0.15), h + "mlp.c_proj.bias": rand(d, std=0.1),
        })
    tensors.update({pre + "ln_f.weight": 1 + rand(d, std=0.1), pre + "ln_f.bias": rand(d, std=0.1)})
    if a.prefix:
        tensors["lm_head.weight"] = tensors[pre + "wte.weight"]  # tied
    write_model(a.out, tensors, a.dtype, a.shards)
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V, "n_positions": T,
              "n_embd": d, "n_layer": L, "n_head": a.heads, "n_inner": None, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-05, "bos_token_id": vocab["<|endoftext|>"], "eos_token_id": vocab["<|endoftext|>"],
              "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[a.dtype]}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"{a.out}: GPT-2 with {L} layers, d {d}, {a.heads} heads, context {T}, vocabulary {V} ({len(merges)} merges), {a.dtype}")


if __name__ == "__main__":
    sys.exit(main())
