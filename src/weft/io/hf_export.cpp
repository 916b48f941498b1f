#include "weft/io/hf_export.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "weft/io/safetensors.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft {

namespace {

using json = nlohmann::json;

// "h3." (built with +=: GCC 12 warns falsely on "h" + std::to_string(i) + ".").
std::string block(std::int64_t i) {
  std::string s = "h";
  s += std::to_string(i);
  s += '.';
  return s;
}

// Rows [begin, begin + n) of a 2-D or 1-D tensor, as a new tensor.
Tensor rows(const Tensor& t, std::int64_t begin, std::int64_t n) { return t.slice(0, begin, begin + n).contiguous().clone(); }

}  // namespace

std::string hf_model_type(const GptConfig& c) {
  const BlockConfig b = c.block();
  auto refuse = [&](const std::string& what) {
    throw ConfigError("a model with " + what + " has no Hugging Face form (GPT-2's or the Llama family's)");
  };
  if (!c.pre_ln) refuse("post-LN blocks");
  if (c.positional == Positional::kLearned) {
    if (c.norm != Norm::kLayer || std::abs(c.norm_eps - 1e-5) > 1e-12) refuse("learned positions and another norm");
    if (c.mlp != Activation::kGelu || b.mlp_width() != 4 * c.dim) refuse("learned positions and another MLP");
    if (b.key_value_heads() != c.heads) refuse("learned positions and grouped-query attention");
    if (!c.bias || !c.qkv_bias || !c.tied_head || c.window > 0)
      refuse("learned positions and no biases, an untied head or a window");
    return "gpt2";
  }
  if (c.positional != Positional::kRotary) refuse(std::string(positional_name(c.positional)) + " positions");
  if (c.norm != Norm::kRms || c.mlp != Activation::kSwiGlu) refuse("rotary positions and LayerNorm or GELU");
  if (c.bias) refuse("rotary positions and biases on every product");
  if (c.qkv_bias && c.window > 0) refuse("biases on Q, K and V and a sliding window");
  return c.qkv_bias ? "qwen2" : c.window > 0 ? "mistral" : "llama";
}

std::string hf_config_json(const GptConfig& c, std::int32_t eos, const std::string& dtype) {
  const std::string type = hf_model_type(c);
  json j;
  if (type == "gpt2") {
    j = {{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}, {"vocab_size", c.vocab},
         {"n_positions", c.context}, {"n_embd", c.dim}, {"n_layer", c.layers}, {"n_head", c.heads},
         {"n_inner", nullptr}, {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5},
         {"tie_word_embeddings", true}};
  } else {
    const BlockConfig b = c.block();
    const std::map<std::string, std::string> architecture{
        {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}};
    j = {{"model_type", type}, {"architectures", {architecture.at(type)}}, {"vocab_size", c.vocab},
         {"hidden_size", c.dim}, {"intermediate_size", b.mlp_width()}, {"num_hidden_layers", c.layers},
         {"num_attention_heads", c.heads}, {"num_key_value_heads", b.key_value_heads()},
         {"max_position_embeddings", c.context}, {"hidden_act", "silu"}, {"rms_norm_eps", c.norm_eps},
         {"rope_theta", c.rope_theta}, {"tie_word_embeddings", c.tied_head}};
    if (type == "llama") {
      j["attention_bias"] = false;
      j["mlp_bias"] = false;
    }
    if (type == "mistral") j["sliding_window"] = c.window;
    if (type == "qwen2") j["use_sliding_window"] = false;
    const RopeScaling& s = c.rope_scaling;
    if (s.kind == RopeScaling::kLinear) j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.factor}};
    if (s.kind == RopeScaling::kLlama3)
      j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", s.factor}, {"low_freq_factor", s.low_frequency_factor},
                           {"high_freq_factor", s.high_frequency_factor},
                           {"original_max_position_embeddings", s.original_context}};
  }
  if (eos >= 0) {
    j["bos_token_id"] = eos;
    j["eos_token_id"] = eos;
  }
  j["torch_dtype"] = dtype == "BF16" ? "bfloat16" : "float32";
  return j.dump(2);
}

StateDict hf_tensors(const GptConfig& c, const StateDict& parameters) {
  std::map<std::string, Tensor> p;
  for (const auto& [name, t] : parameters) p[name] = t.contiguous().to(DType::F32);
  auto get = [&](const std::string& name) {
    auto it = p.find(name);
    if (it == p.end()) throw InternalError("hf_tensors: the model has no parameter " + name);
    return it->second;
  };
  StateDict out;
  if (hf_model_type(c) == "gpt2") {  // Conv1D weights [in, out]
    auto conv = [&](const std::string& name) { return get(name).t().contiguous().clone(); };
    out.emplace_back("wte.weight", get("wte.weight"));
    out.emplace_back("wpe.weight", get("wpe.weight"));
    for (std::int64_t i = 0; i < c.layers; ++i) {
      const std::string w = block(i), h = "h." + std::to_string(i) + ".";
      out.emplace_back(h + "ln_1.weight", get(w + "ln1.weight"));
      out.emplace_back(h + "ln_1.bias", get(w + "ln1.bias"));
      out.emplace_back(h + "attn.c_attn.weight", conv(w + "attn.qkv.weight"));
      out.emplace_back(h + "attn.c_attn.bias", get(w + "attn.qkv.bias"));
      out.emplace_back(h + "attn.c_proj.weight", conv(w + "attn.proj.weight"));
      out.emplace_back(h + "attn.c_proj.bias", get(w + "attn.proj.bias"));
      out.emplace_back(h + "ln_2.weight", get(w + "ln2.weight"));
      out.emplace_back(h + "ln_2.bias", get(w + "ln2.bias"));
      out.emplace_back(h + "mlp.c_fc.weight", conv(w + "fc.weight"));
      out.emplace_back(h + "mlp.c_fc.bias", get(w + "fc.bias"));
      out.emplace_back(h + "mlp.c_proj.weight", conv(w + "out.weight"));
      out.emplace_back(h + "mlp.c_proj.bias", get(w + "out.bias"));
    }
    out.emplace_back("ln_f.weight", get("ln_f.weight"));
    out.emplace_back("ln_f.bias", get("ln_f.bias"));
    return out;
  }
  const BlockConfig b = c.block();
  // A fused product's rows cut into Hugging Face's separate ones, by the block's own parts
  // (nn/decoder_block.h: Q, K, V; gate, up).
  auto unstack = [&](const Tensor& t, Product product, const std::vector<std::string>& names) {
    std::int64_t at = 0;
    const std::vector<std::int64_t> parts = product_parts(product, b);
    for (std::size_t k = 0; k < parts.size(); ++k) {
      out.emplace_back(names[k], rows(t, at, parts[k]));
      at += parts[k];
    }
  };
  out.emplace_back("model.embed_tokens.weight", get("wte.weight"));
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string w = block(i), h = "model.layers." + std::to_string(i) + ".", a = h + "self_attn.";
    out.emplace_back(h + "input_layernorm.weight", get(w + "ln1.weight"));
    for (const char* kind : {"weight", "bias"}) {
      if (std::string(kind) == "bias" && !c.qkv_bias) continue;
      unstack(get(w + "attn.qkv." + kind), Product::kQkv,
              {a + "q_proj." + kind, a + "k_proj." + kind, a + "v_proj." + kind});
    }
    out.emplace_back(a + "o_proj.weight", get(w + "attn.proj.weight"));
    out.emplace_back(h + "post_attention_layernorm.weight", get(w + "ln2.weight"));
    unstack(get(w + "fc.weight"), Product::kFc, {h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"});
    out.emplace_back(h + "mlp.down_proj.weight", get(w + "out.weight"));
  }
  out.emplace_back("model.norm.weight", get("ln_f.weight"));
  if (!c.tied_head) out.emplace_back("lm_head.weight", get("lm_head.weight"));
  return out;
}

void write_hf_folder(const std::string& dir, const GptConfig& c, const StateDict& parameters,
                     const HfTokenizerFile& tokenizer, const std::string& dtype, std::int32_t eos) {
  if (dtype != "F32" && dtype != "BF16") throw ConfigError("--dtype '" + dtype + "' is not f32 or bf16");
  const std::string config = hf_config_json(c, eos, dtype);  // (refuses a shape without a form before anything is written)
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !(is_directory(dir) && std::filesystem::is_empty(dir, ec)))
    throw ConfigError(dir + " exists and is not an empty folder: nothing in it is overwritten");
  make_directories(dir);
  const StateDict tensors = hf_tensors(c, parameters);
  std::map<std::string, std::string> dtypes;
  for (const auto& [name, t] : tensors) dtypes[name] = dtype;
  const std::filesystem::path d(dir);
  write_safetensors((d / "model.safetensors").string(), tensors, {{"format", "pt"}}, dtypes);
  if (tokenizer.name != "tokenizer.json" && tokenizer.name != "tokenizer.model")
    throw InternalError("write_hf_folder: a tokenizer file named " + tokenizer.name);
  write_file_atomic((d / tokenizer.name).string(), tokenizer.bytes);
  write_file_atomic((d / "config.json").string(), config + "\n");
}

}  // namespace weft
