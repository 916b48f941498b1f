#!/usr/bin/env python3
"""The reference weft's Llama-family import is checked against: reads a Llama, Mistral or
Qwen 2 folder in the Hugging Face layout (config.json, model.safetensors or its shards, a
byte-level BPE tokenizer in vocab.json + merges.txt) on its own, and continues a prompt
greedily with the forward pass of Hugging Face's LlamaForCausalLM, MistralForCausalLM and
Qwen2ForCausalLM written out in PyTorch, in float64: RMSNorm, rotary embeddings (rotate_half,
rope_theta, Llama 3.1's rope_scaling), grouped-query attention (keys and values repeated),
Mistral's sliding window, SwiGLU, a tied or untied head.

The tokenizer is vocab.json + merges.txt, or a tokenizer.json of a byte-level BPE (with an
unk_token for bytes the vocabulary lacks, as Hugging Face's BPE model maps them). A GPT-2
folder (model_type gpt2) is run by gpt2_reference.py's forward pass.

usage: llama_reference.py DIR PROMPT MAX_TOKENS   prints JSON: prompt_token_ids, tokens, text,
       min_margin (the smallest gap between the top two logits over the steps) and logits
       (each step's, the ones its token was chosen from)
       llama_reference.py DIR --score CORPUS CONTEXT WINDOWS
                                                  the validation loss weft reports: CORPUS read
                                                  as weft reads a text file (fortune's "%"
                                                  lines dropped), tokenized, its last 10% cut
                                                  into WINDOWS windows of CONTEXT + 1 tokens
                                                  spread evenly; prints JSON: loss (the mean
                                                  next-token cross-entropy), tokens
       llama_reference.py DIR --prompt-file FILE MAX_TOKENS   the same, the prompt read from FILE
       llama_reference.py DIR --encode FILE       FILE: a JSON list of texts; prints the JSON
                                                  list of their token ids
       llama_reference.py --jobs FILE             FILE: a JSON list of jobs, each the arguments
                                                  above ("args") and "out", the file to write
                                                  its JSON to (PyTorch loaded once)
"""
import json
import math
import os
import sys

import regex
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference  # noqa: E402
from gpt2_reference import Encoder, load_weights  # noqa: E402


class JsonEncoder(Encoder):
    """A byte-level BPE from tokenizer.json, as Hugging Face's tokenizers runs one: its added
    tokens split out first, words cut by GPT-2's pattern or the file's Split pattern, a word
    the vocabulary holds whole taken whole under ignore_merges, a missing piece the
    unk_token."""

    def __init__(self, path):
        doc = json.load(open(path, encoding="utf-8"))
        model = doc["model"]
        self.encoder = dict(model["vocab"])
        self.specials = {a["content"]: a["id"] for a in doc.get("added_tokens", [])}
        self.encoder.update(self.specials)
        self.decoder = {v: k for k, v in self.encoder.items()}
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        self.ranks = dict(zip(merges, range(len(merges))))
        self.byte_encoder = gpt2_reference.bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.unk = model.get("unk_token")
        self.ignore_merges = model.get("ignore_merges", False)
        pre = doc.get("pre_tokenizer") or {}
        self.pattern = gpt2_reference.PATTERN
        if pre.get("type") == "Sequence":
            self.pattern = regex.compile(pre["pretokenizers"][0]["pattern"]["Regex"])

    def encode_plain(self, text):
        ids = []
        for w in self.pattern.findall(text):
            word = "".join(self.byte_encoder[b] for b in w.encode("utf-8"))
            pieces = [word] if self.ignore_merges and word in self.encoder else self.bpe(word)
            for p in pieces:
                ids.append(self.encoder[p] if p in self.encoder else self.encoder[self.unk])
        return ids

    def encode(self, text):
        if not self.specials:
            return self.encode_plain(text)
        parts = regex.split("(" + "|".join(regex.escape(t) for t in sorted(self.specials, key=len, reverse=True)) + ")", text)
        ids = []
        for k, part in enumerate(parts):
            ids += [self.specials[part]] if k % 2 else self.encode_plain(part)
        return ids

    def decode(self, ids):
        text = "".join(self.decoder[i] for i in ids)
        return bytearray(self.byte_decoder.get(c, 0x3f) for c in text).decode("utf-8", errors="replace")


def tokenizer(folder):
    if os.path.exists(os.path.join(folder, "vocab.json")):
        return Encoder(folder)
    return JsonEncoder(os.path.join(folder, "tokenizer.json"))


def weft_corpus(path):
    """A text file as weft's load_corpus reads it: each line kept but fortune's "%" separators."""
    raw = open(path, "rb").read().decode("utf-8", errors="surrogateescape")
    return "".join(("" if line == "%" else line) + "\n" for line in raw.split("\n"))


def inverse_frequencies(cfg, hd):
    base = float(cfg.get("rope_theta", 10000.0))
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":
        inv = inv / scaling["factor"]
    elif kind == "llama3":  # as transformers' _compute_llama3_parameters
        factor, low, high = scaling["factor"], scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        old = scaling.get("original_max_position_embeddings", 8192)
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        inv = torch.where(medium, smoothed, scaled)
    elif kind not in (None, "default"):
        raise SystemExit(f"rope_scaling {kind} is not in this reference")
    return inv


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(w, cfg, ids):
    if cfg.get("model_type") == "gpt2":
        return gpt2_reference.forward(w, cfg, ids)
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    K = cfg.get("num_key_value_heads", H)
    hd, T, eps = d // H, len(ids), cfg.get("rms_norm_eps", 1e-6)
    window = cfg.get("sliding_window") if cfg["model_type"] == "mistral" else None

    def rms(x, name):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[name]

    def lin(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    angles = torch.arange(T, dtype=torch.float64)[:, None] * inverse_frequencies(cfg, hd)[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    pos = torch.arange(T)
    mask = pos[None, :] > pos[:, None]  # a later key
    if window:
        mask = mask | (pos[:, None] - pos[None, :] >= window)  # a key the window left behind
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, p + "input_layernorm.weight")
        q = lin(h, p + "self_attn.q_proj").reshape(T, H, hd).transpose(0, 1)
        k = lin(h, p + "self_attn.k_proj").reshape(T, K, hd).transpose(0, 1)
        v = lin(h, p + "self_attn.v_proj").reshape(T, K, hd).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // K, dim=0), v.repeat_interleave(H // K, dim=0)
        att = ((q @ k.transpose(1, 2)) / math.sqrt(hd)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + lin((att @ v).transpose(0, 1).reshape(T, H * hd), p + "self_attn.o_proj")
        h = rms(x, p + "post_attention_layernorm.weight")
        x = x + lin(torch.nn.functional.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return rms(x, "model.norm.weight") @ head.T


def run(args):
    """The JSON text of one job (the arguments of the usage above)."""
    args = list(args)
    folder = args[0]
    cfg = json.load(open(os.path.join(folder, "config.json")))
    w = load_weights(folder)
    enc = tokenizer(folder)
    if args[1] == "--encode":
        return json.dumps([enc.encode(t) for t in json.load(open(args[2], encoding="utf-8"))])
    if args[1] == "--score":
        context, windows = int(args[3]), int(args[4])
        text = weft_corpus(args[2])
        ids = enc.encode(text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace"))
        val = ids[len(ids) * 9 // 10:]
        span = len(val) - context - 1
        total, count = 0.0, 0
        for i in range(windows):
            window = val[span * i // windows:][:context + 1]
            logits = forward(w, cfg, window[:-1])
            total += float(torch.nn.functional.cross_entropy(logits, torch.tensor(window[1:]), reduction="sum"))
            count += len(window) - 1
        return json.dumps({"loss": total / count, "tokens": count})
    if args[1] == "--prompt-file":  # (a prompt whose last characters are newlines, which a shell would cut)
        del args[1]
        args[1] = open(args[1], encoding="utf-8").read()
    prompt, count = args[1], int(args[2])
    prompt_ids = enc.encode(prompt)
    eos = cfg.get("eos_token_id", enc.encoder.get("<|endoftext|>"))
    context = cfg.get("max_position_embeddings", cfg.get("n_positions", 1024))
    tokens, margin, steps = gpt2_reference.greedy(lambda ids: forward(w, cfg, ids), prompt_ids, count, context, eos)
    text = enc.decode([t for t in tokens if t != eos])
    return json.dumps({"prompt_token_ids": prompt_ids, "tokens": tokens, "text": text, "min_margin": margin,
                       "logits": steps})


if __name__ == "__main__":
    gpt2_reference.main_with(run)  # (--jobs: one process for many jobs, PyTorch loaded once)
