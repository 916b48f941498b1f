#!/usr/bin/env python3
"""The reference weft's Llama-family import is checked against: reads a Llama, Mistral or
Qwen 2 folder in the Hugging Face layout (config.json, model.safetensors or its shards, a
byte-level BPE tokenizer in vocab.json + merges.txt) on its own, and continues a prompt
greedily with the forward pass of Hugging Face's LlamaForCausalLM, MistralForCausalLM and
Qwen2ForCausalLM written out in PyTorch, in float64: RMSNorm, rotary embeddings (rotate_half,
rope_theta, Llama 3.1's rope_scaling), grouped-query attention (keys and values repeated),
Mistral's sliding window, SwiGLU, a tied or untied head.

usage: llama_reference.py DIR PROMPT MAX_TOKENS   prints JSON: prompt_token_ids, tokens, text,
       min_margin (the smallest gap between the top two logits over the steps) and logits
       (each step's, the ones its token was chosen from)
       llama_reference.py DIR --score FILE        FILE: a JSON list of token-id windows;
                                                  prints the mean next-token cross-entropy
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import Encoder, load_weights  # noqa: E402


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


def main():
    folder = sys.argv[1]
    cfg = json.load(open(os.path.join(folder, "config.json")))
    w = load_weights(folder)
    if sys.argv[2] == "--score":
        total, count = 0.0, 0
        for window in json.load(open(sys.argv[3])):
            logits = forward(w, cfg, window[:-1])
            total += float(torch.nn.functional.cross_entropy(logits, torch.tensor(window[1:]), reduction="sum"))
            count += len(window) - 1
        print(json.dumps({"loss": total / count, "tokens": count}))
        return
    prompt, count = sys.argv[2], int(sys.argv[3])
    enc = Encoder(folder)
    prompt_ids = enc.encode(prompt)
    eos = enc.encoder.get("<|endoftext|>")
    ids = list(prompt_ids) or [eos]
    tokens, margin, steps = [], math.inf, []
    for _ in range(count):
        logits = forward(w, cfg, ids[-cfg["max_position_embeddings"]:])[-1]
        top = torch.topk(logits, 2).values
        margin = min(margin, float(top[0] - top[1]))
        steps.append(logits.tolist())
        t = int(logits.argmax())
        tokens.append(t)
        ids.append(t)
        if t == eos:
            break
    text = enc.decode([t for t in tokens if t != eos])
    print(json.dumps({"prompt_token_ids": prompt_ids, "tokens": tokens, "text": text, "min_margin": margin,
                      "logits": steps}))


if __name__ == "__main__":
    main()
