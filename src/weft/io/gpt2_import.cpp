#include "weft/io/gpt2_import.h"

#include <cmath>
#include <filesystem>
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
                    combined = in_folder(folder, "tokenizer.json");
  try {
    if (file_exists(vocab) && file_exists(merges))
      return Gpt2Tokenizer::from_files(read_file(vocab), read_file(merges), in_folder(folder, "vocab.json and merges.txt"));
    if (file_exists(combined)) return Gpt2Tokenizer::from_tokenizer_json(read_file(combined), combined);
  } catch (const DataError& e) {
    throw CheckpointError(e.what());
  }
  throw CheckpointError((folder.empty() ? std::string(".") : folder) +
                        ": no tokenizer (vocab.json and merges.txt, or tokenizer.json)");
}

}  // namespace

bool is_gpt2_import(const std::string& path) {
  if (is_directory(path)) return file_exists(in_folder(path, "config.json")) && !file_exists(in_folder(path, "meta.json"));
  return path.ends_with(".safetensors") && file_exists(in_folder(folder_of(path), "config.json"));
}

GptConfig gpt2_config(const std::string& config_json, const std::string& source) {
  json c;
  try {
    c = json::parse(config_json);
  } catch (const json::exception&) {
    throw CheckpointError(source + ": not valid JSON");
  }
  if (!c.is_object()) throw CheckpointError(source + ": not a JSON object");
  auto text = [&](const char* key, const std::string& fallback) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    if (!c[key].is_string()) throw CheckpointError(source + ": " + key + " is not a string");
    return c[key].get<std::string>();
  };
  auto flag = [&](const char* key, bool fallback) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    if (!c[key].is_boolean()) throw CheckpointError(source + ": " + key + " is not true or false");
    return c[key].get<bool>();
  };
  const std::string type = text("model_type", "gpt2");
  if (type != "gpt2") throw CheckpointError(source + ": a '" + type + "' model; weft imports GPT-2 (model_type gpt2)");
  GptConfig g;
  g.dim = size_of(c, "n_embd", 768, 1 << 16, source);
  g.layers = size_of(c, "n_layer", 12, 1 << 12, source);
  g.heads = size_of(c, "n_head", 12, 1 << 12, source);
  g.context = size_of(c, "n_positions", size_of(c, "n_ctx", 1024, 1 << 20, source), 1 << 20, source);
  g.vocab = size_of(c, "vocab_size", 50257, 1 << 24, source);
  g.positional = Positional::kLearned;
  g.pre_ln = true;
  if (g.dim % g.heads != 0)
    throw CheckpointError(source + ": n_embd " + std::to_string(g.dim) + " is not divisible by n_head " + std::to_string(g.heads));
  // The variants weft's GPT does not compute.
  const std::string activation = text("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh" && activation != "gelu_fast")
    throw CheckpointError(source + ": activation_function '" + activation +
                          "' (weft's GPT uses GELU's tanh form: gelu_new, gelu_pytorch_tanh or gelu_fast)");
  if (c.contains("layer_norm_epsilon") && !c["layer_norm_epsilon"].is_null()) {
    if (!c["layer_norm_epsilon"].is_number() || std::abs(c["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12)
      throw CheckpointError(source + ": layer_norm_epsilon must be 1e-05 (weft's layer norm)");
  }
  if (c.contains("n_inner") && !c["n_inner"].is_null() && size_of(c, "n_inner", 0, 1 << 20, source) != 4 * g.dim)
    throw CheckpointError(source + ": n_inner must be 4 x n_embd (weft's MLP)");
  if (!flag("scale_attn_weights", true)) throw CheckpointError(source + ": scale_attn_weights false is not supported");
  if (flag("scale_attn_by_inverse_layer_idx", false))
    throw CheckpointError(source + ": scale_attn_by_inverse_layer_idx is not supported");
  if (flag("add_cross_attention", false)) throw CheckpointError(source + ": cross-attention is not supported");
  if (!flag("tie_word_embeddings", true)) throw CheckpointError(source + ": an untied output head is not supported");
  return g;
}

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

GptConfig gpt2_folder_config(const std::string& path) {
  if (!file_exists(path)) throw CheckpointError(path + " does not exist");
  const std::string config = in_folder(folder_of(path), "config.json");
  if (!file_exists(config)) throw CheckpointError(config + " does not exist");
  return gpt2_config(read_file(config), config);
}

std::unique_ptr<Tokenizer> gpt2_folder_tokenizer(const std::string& path, const GptConfig& config) {
  const std::string folder = folder_of(path);
  std::unique_ptr<Tokenizer> t = tokenizer_in(folder);
  if (t->vocab_size() > config.vocab)
    throw CheckpointError(folder + ": the tokenizer has " + std::to_string(t->vocab_size()) +
                          " tokens, more than the model's vocab_size " + std::to_string(config.vocab));
  return t;
}

StateDict gpt2_folder_parameters(const std::string& path, const GptConfig& config) {
  StateDict tensors;
  std::set<std::string> names;
  for (const std::string& file : parameter_files(path)) {
    if (!file_exists(file)) throw CheckpointError(file + " does not exist");
    SafetensorsFile f = decode_safetensors(read_file(file), file);
    for (auto& [name, t] : f.tensors) {
      if (!names.insert(name).second) throw CheckpointError(file + ": '" + name + "' is in two shards");
      tensors.emplace_back(name, std::move(t));
    }
  }
  return gpt2_parameters(tensors, config, path);
}

ImportedGpt2 import_gpt2(const std::string& path) {
  ImportedGpt2 m;
  m.config = gpt2_folder_config(path);
  m.parameters = gpt2_folder_parameters(path, m.config);
  m.tokenizer = gpt2_folder_tokenizer(path, m.config);
  return m;
}

}  // namespace weft
