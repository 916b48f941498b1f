#include "weft/io/hf_import.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "weft/io/safetensors.h"
#include "weft/tensor/ops.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string folder_of(const std::string& path) {
  return is_directory(path) ? path : fs::path(path).parent_path().string();
}

std::string in_folder(const std::string& folder, const std::string& name) {
  return folder.empty() ? name : (fs::path(folder) / name).string();
}

// A size from config.json: a whole number in [1, limit].
std::int64_t size_of(const json& config, const char* key, std::int64_t fallback, std::int64_t limit,
                     const std::string& source) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  const json& v = config[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > limit)
    throw CheckpointError(source + ": " + key + " must be a whole number in 1.." + std::to_string(limit));
  return v.get<std::int64_t>();
}

// Every parameter file of the model: the one named, model.safetensors, or the shards of
// model.safetensors.index.json.
std::vector<std::string> parameter_files(const std::string& path) {
  if (!is_directory(path)) return {path};
  const std::string single = in_folder(path, "model.safetensors"), index = single + ".index.json";
  if (file_exists(single)) return {single};
  if (file_exists(index)) {
    json doc;
    try {
      doc = json::parse(read_file(index));
    } catch (const json::exception&) {
      throw CheckpointError(index + ": not valid JSON");
    }
    if (!doc.contains("weight_map") || !doc["weight_map"].is_object())
      throw CheckpointError(index + ": no weight_map object");
    std::set<std::string> shards;
    for (const auto& [name, file] : doc["weight_map"].items()) {
      if (!file.is_string()) throw CheckpointError(index + ": the file of '" + name + "' is not a string");
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
        throw CheckpointError(index + ": '" + f + "' is not a file name in the model's folder");
      shards.insert(f);
    }
    std::vector<std::string> files;
    for (const auto& f : shards) files.push_back(in_folder(path, f));
    return files;
  }
  if (file_exists(in_folder(path, "pytorch_model.bin")))
    throw CheckpointError(path + ": holds pytorch_model.bin (a Python pickle, which weft does not read), not "
                                 "model.safetensors: convert it, e.g. with safetensors.torch.save_file");
  throw CheckpointError(path + ": no model.safetensors (or model.safetensors.index.json)");
}

std::unique_ptr<Tokenizer> tokenizer_in(const std::string& folder) {
  const std::string vocab = in_folder(folder, "vocab.json"), merges = in_folder(folder, "merges.txt"),
                    combined = in_folder(folder, "tokenizer.json"), sentencepiece = in_folder(folder, "tokenizer.model");
  try {
    if (file_exists(vocab) && file_exists(merges))
      return Gpt2Tokenizer::from_files(read_file(vocab), read_file(merges), in_folder(folder, "vocab.json and merges.txt"));
    if (file_exists(combined)) return Gpt2Tokenizer::from_tokenizer_json(read_file(combined), combined);
    if (file_exists(sentencepiece)) return BpeTokenizer::load(read_file(sentencepiece), sentencepiece);
  } catch (const DataError& e) {
    throw CheckpointError(e.what());
  }
  throw CheckpointError((folder.empty() ? std::string(".") : folder) +
                        ": no tokenizer (vocab.json and merges.txt, tokenizer.json, or tokenizer.model)");
}

}  // namespace

bool is_hf_import(const std::string& path) {
  if (is_directory(path)) return file_exists(in_folder(path, "config.json")) && !file_exists(in_folder(path, "meta.json"));
  return path.ends_with(".safetensors") && file_exists(in_folder(folder_of(path), "config.json"));
}

namespace {

// config.json's values, each checked for its type.
class ConfigReader {
 public:
  ConfigReader(const json& c, const std::string& source) : c_(c), source_(source) {}
  bool has(const char* key) const { return c_.contains(key) && !c_[key].is_null(); }
  std::string text(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!c_[key].is_string()) throw CheckpointError(source_ + ": " + key + " is not a string");
    return c_[key].get<std::string>();
  }
  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!c_[key].is_boolean()) throw CheckpointError(source_ + ": " + key + " is not true or false");
    return c_[key].get<bool>();
  }
  std::int64_t size(const char* key, std::int64_t fallback, std::int64_t limit) const {
    return size_of(c_, key, fallback, limit, source_);
  }
  // A finite number > 0.
  double number(const json& v, const std::string& key) const {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      throw CheckpointError(source_ + ": " + key + " is not a number > 0");
    return v.get<double>();
  }
  double number(const char* key, double fallback) const { return has(key) ? number(c_[key], key) : fallback; }
  const json& at(const char* key) const { return c_[key]; }
  const std::string& source() const { return source_; }

 private:
  const json& c_;
  const std::string& source_;
};

GptConfig gpt2_config(const ConfigReader& r) {
  const std::string& source = r.source();
  GptConfig g;
  g.dim = r.size("n_embd", 768, 1 << 16);
  g.layers = r.size("n_layer", 12, 1 << 12);
  g.heads = r.size("n_head", 12, 1 << 12);
  g.context = r.size("n_positions", r.size("n_ctx", 1024, 1 << 20), 1 << 20);
  g.vocab = r.size("vocab_size", 50257, 1 << 24);
  g.positional = Positional::kLearned;
  g.pre_ln = true;
  if (g.dim % g.heads != 0)
    throw CheckpointError(source + ": n_embd " + std::to_string(g.dim) + " is not divisible by n_head " + std::to_string(g.heads));
  // The variants weft's GPT does not compute.
  const std::string activation = r.text("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh" && activation != "gelu_fast")
    throw CheckpointError(source + ": activation_function '" + activation +
                          "' (weft's GPT uses GELU's tanh form: gelu_new, gelu_pytorch_tanh or gelu_fast)");
  if (r.has("layer_norm_epsilon") && std::abs(r.number("layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12)
    throw CheckpointError(source + ": layer_norm_epsilon must be 1e-05 (weft's layer norm)");
  if (r.has("n_inner") && r.size("n_inner", 0, 1 << 20) != 4 * g.dim)
    throw CheckpointError(source + ": n_inner must be 4 x n_embd (weft's MLP)");
  if (!r.flag("scale_attn_weights", true)) throw CheckpointError(source + ": scale_attn_weights false is not supported");
  if (r.flag("scale_attn_by_inverse_layer_idx", false))
    throw CheckpointError(source + ": scale_attn_by_inverse_layer_idx is not supported");
  if (r.flag("add_cross_attention", false)) throw CheckpointError(source + ": cross-attention is not supported");
  if (!r.flag("tie_word_embeddings", true)) throw CheckpointError(source + ": an untied output head is not supported");
  return g;
}

// Llama 3.1's or linear rope_scaling; the other kinds (dynamic, yarn, longrope) refused.
RopeScaling rope_scaling_of(const ConfigReader& r) {
  RopeScaling s;
  if (!r.has("rope_scaling")) return s;
  const json& j = r.at("rope_scaling");
  const std::string& source = r.source();
  if (!j.is_object()) throw CheckpointError(source + ": rope_scaling is not an object");
  const json& kind = j.contains("rope_type") ? j["rope_type"] : j.contains("type") ? j["type"] : json();
  if (!kind.is_string()) throw CheckpointError(source + ": rope_scaling has no rope_type");
  const std::string k = kind.get<std::string>();
  auto number = [&](const char* key, double fallback) {
    return j.contains(key) && !j[key].is_null() ? r.number(j[key], std::string("rope_scaling.") + key) : fallback;
  };
  if (k == "default") return s;
  if (k != "linear" && k != "llama3")
    throw CheckpointError(source + ": rope_scaling '" + k + "' is not supported (linear and llama3 are)");
  s.kind = k == "linear" ? RopeScaling::kLinear : RopeScaling::kLlama3;
  s.factor = number("factor", 0);
  if (!(s.factor > 0)) throw CheckpointError(source + ": rope_scaling has no factor");
  s.low_frequency_factor = number("low_freq_factor", 1);
  s.high_frequency_factor = number("high_freq_factor", 4);
  if (s.kind == RopeScaling::kLlama3 && !(s.high_frequency_factor > s.low_frequency_factor))
    throw CheckpointError(source + ": rope_scaling's high_freq_factor must exceed its low_freq_factor");
  const double original = number("original_max_position_embeddings", 8192);
  if (original > (1 << 24)) throw CheckpointError(source + ": rope_scaling's original_max_position_embeddings is too large");
  s.original_context = static_cast<std::int64_t>(original);
  return s;
}

// Llama, Mistral and Qwen 2 (their configuration classes' defaults where a key is absent).
GptConfig llama_family_config(const ConfigReader& r, const std::string& type) {
  const std::string& source = r.source();
  GptConfig g;
  g.dim = r.size("hidden_size", 4096, 1 << 16);
  g.layers = r.size("num_hidden_layers", 32, 1 << 12);
  g.heads = r.size("num_attention_heads", 32, 1 << 12);
  g.kv_heads = r.size("num_key_value_heads", g.heads, 1 << 12);
  g.hidden = r.size("intermediate_size", type == "mistral" ? 14336 : 11008, 1 << 20);
  g.context = r.size("max_position_embeddings", type == "mistral" ? 32768 : 2048, 1 << 20);
  g.vocab = r.size("vocab_size", 32000, 1 << 24);
  g.positional = Positional::kRotary;
  g.rope_theta = r.number("rope_theta", 10000);
  g.rope_scaling = rope_scaling_of(r);
  g.norm = Norm::kRms;
  g.norm_eps = r.number("rms_norm_eps", 1e-6);
  g.mlp = Activation::kSwiGlu;
  g.pre_ln = true;
  g.tied_head = r.flag("tie_word_embeddings", false);
  g.bias = false;
  g.qkv_bias = type == "qwen2";
  if (g.dim % g.heads != 0)
    throw CheckpointError(source + ": hidden_size " + std::to_string(g.dim) + " is not divisible by num_attention_heads " +
                          std::to_string(g.heads));
  if (g.heads % g.kv_heads != 0)
    throw CheckpointError(source + ": num_attention_heads " + std::to_string(g.heads) +
                          " is not a multiple of num_key_value_heads " + std::to_string(g.kv_heads));
  if (r.has("head_dim") && r.size("head_dim", 0, 1 << 16) != g.dim / g.heads)
    throw CheckpointError(source + ": head_dim must be hidden_size / num_attention_heads (weft's attention)");
  const std::string act = r.text("hidden_act", "silu");
  if (act != "silu") throw CheckpointError(source + ": hidden_act '" + act + "' (weft's SwiGLU uses silu)");
  if (r.flag("attention_bias", false)) throw CheckpointError(source + ": attention_bias true is not supported");
  if (r.flag("mlp_bias", false)) throw CheckpointError(source + ": mlp_bias true is not supported");
  if (type == "mistral" && r.has("sliding_window")) g.window = r.size("sliding_window", 0, 1 << 24);
  if (type == "qwen2" && r.flag("use_sliding_window", false))
    throw CheckpointError(source + ": use_sliding_window true is not supported (Qwen 2 slides in some layers only)");
  if (g.window >= g.context) g.window = 0;  // a window as long as the context changes nothing
  try {
    g.validate();
  } catch (const ConfigError& e) {
    throw CheckpointError(source + ": " + e.what());
  }
  return g;
}

}  // namespace

GptConfig hf_config(const std::string& config_json, const std::string& source) {
  json c;
  try {
    c = json::parse(config_json);
  } catch (const json::exception&) {
    throw CheckpointError(source + ": not valid JSON");
  }
  if (!c.is_object()) throw CheckpointError(source + ": not a JSON object");
  const ConfigReader r(c, source);
  const std::string type = r.text("model_type", "gpt2");
  if (type == "gpt2") return gpt2_config(r);
  if (type == "llama" || type == "mistral" || type == "qwen2") return llama_family_config(r, type);
  throw CheckpointError(source + ": a '" + type + "' model; weft imports gpt2, llama, mistral and qwen2 (model_type)");
}

std::string hf_model_name(const GptConfig& config) { return config.positional == Positional::kRotary ? "llama" : "gpt"; }

namespace {

StateDict gpt2_parameters(const StateDict& tensors, const GptConfig& c, const std::string& source) {
  // Hugging Face's names without the "transformer." of a GPT2LMHeadModel.
  std::map<std::string, const Tensor*> hf;
  const Tensor* head = nullptr;
  for (const auto& [name, t] : tensors) {
    std::string n = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    if (n == "lm_head.weight") {
      head = &t;
      continue;
    }
    hf[n] = &t;
  }
  std::set<std::string> used;
  StateDict out;
  out.reserve(static_cast<std::size_t>(4 + 12 * c.layers));
  const std::int64_t d = c.dim;
  auto take = [&](const std::string& from, const std::string& to, Shape shape, bool transposed) {
    auto it = hf.find(from);
    if (it == hf.end()) throw CheckpointError(source + ": no tensor '" + from + "'");
    const Tensor& t = *it->second;
    if (t.shape() != shape)
      throw CheckpointError(source + ": '" + from + "' is " + shape_to_string(t.shape()) + ", expected " + shape_to_string(shape) +
                            " for the sizes in config.json");
    Tensor f = t.to(DType::F32);
    out.emplace_back(to, transposed ? f.t().contiguous() : f);
    used.insert(from);
  };
  take("wte.weight", "wte.weight", {c.vocab, d}, false);
  take("wpe.weight", "wpe.weight", {c.context, d}, false);
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    std::string w = "h";  // (not "h" + ...: GCC 12 warns falsely on that concatenation)
    w += std::to_string(i);
    w += ".";
    take(h + "ln_1.weight", w + "ln1.weight", {d}, false);
    take(h + "ln_1.bias", w + "ln1.bias", {d}, false);
    take(h + "attn.c_attn.weight", w + "attn.qkv.weight", {d, 3 * d}, true);
    take(h + "attn.c_attn.bias", w + "attn.qkv.bias", {3 * d}, false);
    take(h + "attn.c_proj.weight", w + "attn.proj.weight", {d, d}, true);
    take(h + "attn.c_proj.bias", w + "attn.proj.bias", {d}, false);
    take(h + "ln_2.weight", w + "ln2.weight", {d}, false);
    take(h + "ln_2.bias", w + "ln2.bias", {d}, false);
    take(h + "mlp.c_fc.weight", w + "fc.weight", {d, 4 * d}, true);
    take(h + "mlp.c_fc.bias", w + "fc.bias", {4 * d}, false);
    take(h + "mlp.c_proj.weight", w + "out.weight", {4 * d, d}, true);
    take(h + "mlp.c_proj.bias", w + "out.bias", {d}, false);
    // The causal-mask buffers some files carry are not parameters.
    used.insert(h + "attn.bias");
    used.insert(h + "attn.masked_bias");
  }
  take("ln_f.weight", "ln_f.weight", {d}, false);
  take("ln_f.bias", "ln_f.bias", {d}, false);
  for (const auto& [name, t] : hf)
    if (!used.count(name))
      throw CheckpointError(source + ": '" + name + "' is not a tensor of a GPT-2 with " + std::to_string(c.layers) + " layers");
  if (head && !ops::equal(head->to(DType::F32), out.front().second))  // (wte.weight, taken first)
    throw CheckpointError(source + ": lm_head.weight differs from wte.weight (an untied output head is not supported)");
  return out;
}

// Llama, Mistral and Qwen 2 by Hugging Face's names (with or without "model.").
StateDict llama_family_parameters(const StateDict& tensors, const GptConfig& c, const std::string& source) {
  // By the names without "model.", each with the file's own name (for the errors).
  std::map<std::string, std::pair<std::string, const Tensor*>> hf;
  for (const auto& [name, t] : tensors) hf[name.rfind("model.", 0) == 0 ? name.substr(6) : name] = {name, &t};
  const bool prefixed = !tensors.empty() && tensors.front().first.rfind("model.", 0) == 0;
  std::set<std::string> used;
  const BlockConfig b = c.block();
  const std::int64_t d = c.dim, q = c.heads * b.head_dim(), kv = b.key_value_heads() * b.head_dim(), f = b.mlp_width();
  auto get = [&](const std::string& name, const Shape& shape) {
    auto it = hf.find(name);
    if (it == hf.end())
      throw CheckpointError(source + ": no tensor '" + (prefixed && name != "lm_head.weight" ? "model." : "") + name + "'");
    const auto& [file_name, t] = it->second;
    if (t->shape() != shape)
      throw CheckpointError(source + ": '" + file_name + "' is " + shape_to_string(t->shape()) + ", expected " +
                            shape_to_string(shape) + " for the sizes in config.json");
    used.insert(name);
    return t->to(DType::F32);
  };
  // Rows stacked: q, k and v into weft's qkv product; gate and up into its fc product.
  auto stacked = [](const std::vector<Tensor>& parts) {
    std::int64_t rows = 0;
    for (const Tensor& p : parts) rows += p.size(0);
    Shape shape = parts[0].shape();
    shape[0] = rows;
    Tensor out = Tensor::empty(shape);
    std::int64_t at = 0;
    for (const Tensor& p : parts) {
      Tensor dst = out.slice(0, at, at + p.size(0));
      dst.copy_(p);
      at += p.size(0);
    }
    return out;
  };
  StateDict out;
  out.emplace_back("wte.weight", get("embed_tokens.weight", {c.vocab, d}));
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string h = "layers." + std::to_string(i) + ".";
    std::string w = "h";  // (not "h" + ...: GCC 12 warns falsely on that concatenation)
    w += std::to_string(i);
    w += ".";
    out.emplace_back(w + "ln1.weight", get(h + "input_layernorm.weight", {d}));
    const std::string a = h + "self_attn.";
    out.emplace_back(w + "attn.qkv.weight", stacked({get(a + "q_proj.weight", {q, d}), get(a + "k_proj.weight", {kv, d}),
                                                     get(a + "v_proj.weight", {kv, d})}));
    if (c.qkv_bias)
      out.emplace_back(w + "attn.qkv.bias",
                       stacked({get(a + "q_proj.bias", {q}), get(a + "k_proj.bias", {kv}), get(a + "v_proj.bias", {kv})}));
    out.emplace_back(w + "attn.proj.weight", get(a + "o_proj.weight", {d, q}));
    out.emplace_back(w + "ln2.weight", get(h + "post_attention_layernorm.weight", {d}));
    out.emplace_back(w + "fc.weight", stacked({get(h + "mlp.gate_proj.weight", {f, d}), get(h + "mlp.up_proj.weight", {f, d})}));
    out.emplace_back(w + "out.weight", get(h + "mlp.down_proj.weight", {d, f}));
    used.insert(a + "rotary_emb.inv_freq");  // (a buffer some files carry)
  }
  out.emplace_back("ln_f.weight", get("norm.weight", {d}));
  if (!c.tied_head) {
    out.emplace_back("lm_head.weight", get("lm_head.weight", {c.vocab, d}));
  } else if (hf.count("lm_head.weight")) {
    if (!ops::equal(get("lm_head.weight", {c.vocab, d}), out.front().second))
      throw CheckpointError(source + ": lm_head.weight differs from embed_tokens.weight, but tie_word_embeddings is true");
  }
  for (const auto& [name, entry] : hf)
    if (!used.count(name))
      throw CheckpointError(source + ": '" + entry.first + "' is not a tensor of this model (" + std::to_string(c.layers) +
                            " layers" + (c.qkv_bias ? ", biases on Q, K and V" : ", no biases") + ")");
  return out;
}

}  // namespace

StateDict hf_parameters(const StateDict& tensors, const GptConfig& c, const std::string& source) {
  return c.positional == Positional::kRotary ? llama_family_parameters(tensors, c, source) : gpt2_parameters(tensors, c, source);
}

GptConfig hf_folder_config(const std::string& path) {
  if (!file_exists(path)) throw CheckpointError(path + " does not exist");
  const std::string config = in_folder(folder_of(path), "config.json");
  if (!file_exists(config)) throw CheckpointError(config + " does not exist");
  return hf_config_file(config);
}

std::unique_ptr<Tokenizer> hf_folder_tokenizer(const std::string& path, const GptConfig& config) {
  const std::string folder = folder_of(path);
  std::unique_ptr<Tokenizer> t = tokenizer_in(folder);
  if (t->vocab_size() > config.vocab)
    throw CheckpointError(folder + ": the tokenizer has " + std::to_string(t->vocab_size()) +
                          " tokens, more than the model's vocab_size " + std::to_string(config.vocab));
  return t;
}

StateDict hf_folder_parameters(const std::string& path, const GptConfig& config) {
  StateDict tensors;
  std::set<std::string> names;
  for (const std::string& file : parameter_files(path)) {
    if (!file_exists(file)) throw CheckpointError(file + " does not exist");
    SafetensorsFile f = read_safetensors(file);
    for (auto& [name, t] : f.tensors) {
      if (!names.insert(name).second) throw CheckpointError(file + ": '" + name + "' is in two shards");
      tensors.emplace_back(name, std::move(t));
    }
  }
  return hf_parameters(tensors, config, path);
}

GptConfig hf_config_file(const std::string& path) {
  if (!file_exists(path) || is_directory(path)) throw CheckpointError(path + " is not a file");
  return hf_config(read_file(path), path);
}

HfChat hf_folder_chat(const std::string& path) {
  const std::string file = in_folder(folder_of(path), "tokenizer_config.json");
  HfChat chat;
  if (!file_exists(file)) return chat;
  json c;
  try {
    c = json::parse(read_file(file));
  } catch (const json::exception&) {
    throw CheckpointError(file + ": not valid JSON");
  }
  if (!c.is_object()) throw CheckpointError(file + ": not a JSON object");
  auto token = [&](const char* key) -> std::string {
    if (!c.contains(key) || c[key].is_null()) return "";
    const json& t = c[key];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
    throw CheckpointError(file + ": " + key + " is not a string or {\"content\": ...}");
  };
  chat.bos_token = token("bos_token");
  chat.eos_token = token("eos_token");
  if (c.contains("chat_template") && !c["chat_template"].is_null()) {
    const json& t = c["chat_template"];
    if (t.is_string()) {
      chat.chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      for (const json& named : t)
        if (named.is_object() && named.value("name", std::string()) == "default" && named.contains("template") &&
            named["template"].is_string())
          chat.chat_template = named["template"].get<std::string>();
      if (chat.chat_template.empty()) throw CheckpointError(file + ": chat_template lists no \"default\" template");
    } else {
      throw CheckpointError(file + ": chat_template is not a string or a list of named templates");
    }
  }
  return chat;
}

ImportedHf import_hf(const std::string& path) {
  ImportedHf m;
  m.chat = hf_folder_chat(path);
  m.config = hf_folder_config(path);
  m.model = hf_model_name(m.config);
  m.parameters = hf_folder_parameters(path, m.config);
  m.tokenizer = hf_folder_tokenizer(path, m.config);
  return m;
}

}  // namespace weft
