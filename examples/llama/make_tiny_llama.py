#!/usr/bin/env python3
"""Writes a small Llama-family model folder in the Hugging Face layout, the kind weft imports:

    config.json         the configuration: model_type llama, qwen2 or mistral
    model.safetensors   the parameters by Hugging Face's names ("model.layers.0.self_attn.
                        q_proj.weight", ...), or shards with model.safetensors.index.json
    vocab.json          a byte-level BPE vocabulary (256 byte tokens, the merges' tokens and
    merges.txt          <|endoftext|>), learned here from a corpus (as make_tiny_gpt2.py does);
                        or with --tokenizer llama3, tokenizer.json as Llama 3's is made: words
                        cut by Llama 3's pattern (a Split before ByteLevel), ignore_merges,
                        and its special tokens <|begin_of_text|>, <|end_of_text|>, <|eot_id|>,
                        <|start_header_id|>, <|end_header_id|>; and tokenizer_config.json with
                        Llama 3's chat template

The families differ as their configuration classes do:
    llama    grouped-query attention (--kv-heads), no biases, an untied head, rope_theta
             500000 and Llama 3.1's rope_scaling
    qwen2    biases on q_proj, k_proj and v_proj only, a tied head (as Qwen 2's small models)
    mistral  a sliding window of --window keys, an untied head

The weights are random (seeded): the folder is for trying the import and checking it against
a reference, not for reading the text it generates. A real folder (from the model hub, or
`save_pretrained`) has the same files.

usage: make_tiny_llama.py OUT_DIR [--family llama|qwen2|mistral] [--dim D] [--layers L]
                          [--heads H] [--kv-heads K] [--mlp-width F] [--context T]
                          [--window W] [--dtype F32|F16|BF16] [--shards N] [--seed S]
                          [--corpus FILE] [--merges N] [--tokenizer gpt2|llama3]
"""
import argparse
import json
import os
import sys

import numpy as np
import regex

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpt2"))
from make_tiny_gpt2 import bytes_to_unicode, learn_merges, write_model  # noqa: E402

# Llama 3's pre-tokenizer pattern (its tokenizer.json's Split).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
# Meta-Llama-3-8B-Instruct's chat template, as its tokenizer_config.json holds it.
LLAMA3_CHAT = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
               "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
               "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
               "{% endif %}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--family", choices=["llama", "qwen2", "mistral"], default="llama")
    p.add_argument("--corpus", default="/usr/share/games/fortunes/fortunes")
    p.add_argument("--merges", type=int, default=300)
    p.add_argument("--dim", type=int, default=48)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--mlp-width", type=int, default=128)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--window", type=int, default=6, help="mistral: the sliding window's keys")
    p.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
    p.add_argument("--shards", type=int, default=1, help="split into N files with model.safetensors.index.json")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tokenizer", choices=["gpt2", "llama3"], default="gpt2")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)

    text = open(a.corpus, encoding="utf-8", errors="replace").read()[:60000]
    llama3 = a.tokenizer == "llama3"
    merges = learn_merges(text, a.merges, regex.compile(LLAMA3_PATTERN)) if llama3 else learn_merges(text, a.merges)
    stand_in = bytes_to_unicode()
    vocab = {stand_in[b]: i for i, b in enumerate(sorted(stand_in))}
    for x, y in merges:
        vocab.setdefault(x + y, len(vocab))
    if llama3:
        added = [{"id": len(vocab) + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True} for i, t in enumerate(LLAMA3_SPECIALS)]
        doc = {"version": "1.0", "added_tokens": added, "normalizer": None,
               "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                   {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
                   {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
               "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
               "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                         "vocab": vocab, "merges": [f"{x} {y}" for x, y in merges]}}
        with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
        for t in LLAMA3_SPECIALS:
            vocab[t] = len(vocab)
        with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3_CHAT,
                       "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
    else:
        vocab["<|endoftext|>"] = len(vocab)
        with open(os.path.join(a.out, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(os.path.join(a.out, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "".join(f"{x} {y}\n" for x, y in merges))

    d, L, V, H, K, F = a.dim, a.layers, len(vocab), a.heads, a.kv_heads, a.mlp_width
    hd = d // H
    tied = a.family == "qwen2"
    g = np.random.default_rng(a.seed)
    rand = lambda *shape, std=0.3: (g.standard_normal(shape) * std).astype(np.float32)  # noqa: E731
    # Products at 1/sqrt(fan-in), as trained models keep their activations in range.
    w_in, w_down = d ** -0.5, F ** -0.5
    tensors = {"model.embed_tokens.weight": rand(V, d, std=1.0)}
    for i in range(L):
        h = f"model.layers.{i}."
        tensors.update({
            h + "input_layernorm.weight": 1 + rand(d, std=0.1),
            h + "self_attn.q_proj.weight": rand(H * hd, d, std=2 * w_in), h + "self_attn.k_proj.weight": rand(K * hd, d, std=2 * w_in),
            h + "self_attn.v_proj.weight": rand(K * hd, d, std=w_in), h + "self_attn.o_proj.weight": rand(d, H * hd, std=w_in),
            h + "post_attention_layernorm.weight": 1 + rand(d, std=0.1),
            h + "mlp.gate_proj.weight": rand(F, d, std=w_in), h + "mlp.up_proj.weight": rand(F, d, std=w_in),
            h + "mlp.down_proj.weight": rand(d, F, std=w_down),
        })
        if a.family == "qwen2":
            tensors.update({h + "self_attn.q_proj.bias": rand(H * hd, std=0.1), h + "self_attn.k_proj.bias": rand(K * hd, std=0.1),
                            h + "self_attn.v_proj.bias": rand(K * hd, std=0.1)})
    tensors["model.norm.weight"] = 1 + rand(d, std=0.1)
    if not tied:
        tensors["lm_head.weight"] = rand(V, d, std=w_in * 4)
    write_model(a.out, tensors, a.dtype, a.shards)
    eos = vocab["<|eot_id|>" if llama3 else "<|endoftext|>"]
    config = {"model_type": a.family, "vocab_size": V, "hidden_size": d, "intermediate_size": F,
              "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": K,
              "max_position_embeddings": a.context, "hidden_act": "silu", "rms_norm_eps": 1e-6,
              "tie_word_embeddings": tied, "bos_token_id": eos, "eos_token_id": eos,
              "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[a.dtype]}
    if a.family == "llama":
        config.update({"architectures": ["LlamaForCausalLM"], "attention_bias": False, "mlp_bias": False,
                       "rope_theta": 500000.0,
                       "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}})
    elif a.family == "qwen2":
        config.update({"architectures": ["Qwen2ForCausalLM"], "rope_theta": 1000000.0, "use_sliding_window": False})
    else:
        config.update({"architectures": ["MistralForCausalLM"], "rope_theta": 10000.0, "sliding_window": a.window})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"{a.out}: {a.family} with {L} layers, d {d}, {H} heads over {K} key-value heads, MLP {F}, context {a.context}, "
          f"vocabulary {V} ({len(merges)} merges), {a.dtype}")


if __name__ == "__main__":
    sys.exit(main())
