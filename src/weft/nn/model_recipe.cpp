#include "weft/nn/model_recipe.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "weft/nn/models.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"

namespace weft {

namespace {

const std::vector<std::string> kRecurrentCells = {"rnn", "rnn-sigmoid", "lstm", "lstm-seed"};

bool is_recurrent(const std::string& model) {
  return std::find(kRecurrentCells.begin(), kRecurrentCells.end(), model) != kRecurrentCells.end();
}

class Reader {
 public:
  Reader(const Metadata& m, const std::string& source) : m_(m), source_(source) {}
  const std::string& text(const std::string& key) const {
    auto it = m_.find(key);
    if (it == m_.end()) throw CheckpointError(source_ + ": the model's " + key + " is not recorded");
    return it->second;
  }
  // A size in [1, 2^31).
  std::int64_t size(const std::string& key) const {
    const std::string& t = text(key);
    std::optional<std::int64_t> v = parse_integer(t);
    if (!v || *v < 1 || *v >= (std::int64_t{1} << 31))
      throw CheckpointError(source_ + ": " + key + " '" + t + "' is not a positive size");
    return *v;
  }
  bool has(const std::string& key) const { return m_.count(key) != 0; }
  // A size in [0, 2^31), or `otherwise` when the key is absent.
  std::int64_t count_or(const std::string& key, std::int64_t otherwise) const {
    if (!has(key)) return otherwise;
    const std::string& t = text(key);
    std::optional<std::int64_t> v = parse_integer(t);
    if (!v || *v < 0 || *v >= (std::int64_t{1} << 31))
      throw CheckpointError(source_ + ": " + key + " '" + t + "' is not a size");
    return *v;
  }
  // 0 or 1, or `otherwise` when absent.
  bool flag_or(const std::string& key, bool otherwise) const {
    if (!has(key)) return otherwise;
    const std::string& t = text(key);
    if (t != "0" && t != "1") throw CheckpointError(source_ + ": " + key + " '" + t + "' is not 0 or 1");
    return t == "1";
  }
  // A finite number > 0, or `otherwise` when absent.
  double positive_or(const std::string& key, double otherwise) const {
    if (!has(key)) return otherwise;
    const auto list = parse_number_list(text(key), ',');
    if (!list || list->size() != 1 || !((*list)[0] > 0) || !std::isfinite((*list)[0]))
      throw CheckpointError(source_ + ": " + key + " '" + text(key) + "' is not a number > 0");
    return (*list)[0];
  }
  // One of `names` (its index), or `otherwise` when absent.
  int choice_or(const std::string& key, const std::vector<std::string>& names, int otherwise) const {
    if (!has(key)) return otherwise;
    const std::string& t = text(key);
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == t) return static_cast<int>(i);
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    throw CheckpointError(source_ + ": " + key + " '" + t + "' is not one of " + known);
  }
  // One finite number, or one per channel, comma-separated.
  std::vector<double> numbers(const std::string& key, std::int64_t channels) const {
    const std::string& t = text(key);
    const auto list = parse_number_list(t, ',');
    if (!list) throw CheckpointError(source_ + ": " + key + " '" + t + "' is not a list of numbers");
    const std::vector<double>& out = *list;
    if (out.size() != 1 && static_cast<std::int64_t>(out.size()) != channels)
      throw CheckpointError(source_ + ": " + key + " holds " + std::to_string(out.size()) + " values for " +
                            std::to_string(channels) + " channels");
    return out;
  }

 private:
  const Metadata& m_;
  const std::string& source_;
};

}  // namespace

std::vector<std::int64_t> parse_hidden(const std::string& text) {
  const auto list = parse_integer_list(text, ',', 64);
  if (!list || std::any_of(list->begin(), list->end(), [](std::int64_t v) { return v < 1 || v > 65536; }))
    throw ConfigError(fmt::format("hidden widths '{}' are not up to 64 widths from 1 to 65536, such as 1024,1024", text));
  const std::vector<std::int64_t>& widths = *list;
  std::int64_t weights = 0;  // between the hidden layers (the input's and the classes' come with the data)
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) weights += widths[i] * widths[i + 1];
  if (weights > (std::int64_t{1} << 31))
    throw ConfigError(fmt::format("hidden widths '{}' make {} weights between the hidden layers: at most 2^31", text, weights));
  return widths;
}

bool is_transformer_model(const std::string& model) { return model == "gpt" || model == "llama"; }

GptConfig llama_config(GptConfig c) {
  c.norm = Norm::kRms;
  c.mlp = Activation::kSwiGlu;
  if (c.hidden == 0) c.hidden = (8 * c.dim / 3 + 7) / 8 * 8;
  c.bias = c.qkv_bias = false;
  c.tied_head = false;
  return c;
}

bool ModelRecipe::is_language_model() const { return is_transformer_model(model) || is_recurrent(model); }

Metadata ModelRecipe::to_metadata() const {
  Metadata m{{"weft_model", model}};
  if (is_transformer_model(model)) {
    m["weft_vocab"] = std::to_string(gpt.vocab);
    m["weft_context"] = std::to_string(gpt.context);
    m["weft_dim"] = std::to_string(gpt.dim);
    m["weft_layers"] = std::to_string(gpt.layers);
    m["weft_heads"] = std::to_string(gpt.heads);
    m["weft_positional"] = std::string(positional_name(gpt.positional));
    m["weft_pre_ln"] = std::string(1, gpt.pre_ln ? '1' : '0');
    // The block's kind (absent in files saved before the Llama family: GPT-2's).
    m["weft_norm"] = gpt.norm == Norm::kRms ? "rms" : "layer";
    m["weft_norm_eps"] = fmt::format("{}", gpt.norm_eps);
    m["weft_mlp"] = gpt.mlp == Activation::kSwiGlu ? "swiglu" : "gelu";
    m["weft_mlp_width"] = std::to_string(gpt.block().mlp_width());
    m["weft_kv_heads"] = std::to_string(gpt.block().key_value_heads());
    m["weft_bias"] = gpt.bias ? "1" : "0";
    m["weft_qkv_bias"] = gpt.qkv_bias ? "1" : "0";
    m["weft_tied_head"] = gpt.tied_head ? "1" : "0";
    m["weft_window"] = std::to_string(gpt.window);
    if (gpt.positional == Positional::kRotary) {
      m["weft_rope_theta"] = fmt::format("{}", gpt.rope_theta);
      const RopeScaling& rs = gpt.rope_scaling;
      if (rs.kind != RopeScaling::kNone) {
        m["weft_rope_scaling"] = rs.kind == RopeScaling::kLinear ? "linear" : "llama3";
        m["weft_rope_factor"] = fmt::format("{}", rs.factor);
        m["weft_rope_low_frequency_factor"] = fmt::format("{}", rs.low_frequency_factor);
        m["weft_rope_high_frequency_factor"] = fmt::format("{}", rs.high_frequency_factor);
        m["weft_rope_original_context"] = std::to_string(rs.original_context);
      }
    }
  } else if (is_recurrent(model)) {
    m["weft_vocab"] = std::to_string(recurrent.vocab);
    m["weft_context"] = std::to_string(recurrent.context);
    m["weft_dim"] = std::to_string(recurrent.dim);
    m["weft_layers"] = std::to_string(recurrent.layers);
  } else {
    m["weft_channels"] = std::to_string(image.channels);
    m["weft_height"] = std::to_string(image.height);
    m["weft_width"] = std::to_string(image.width);
    m["weft_classes"] = std::to_string(image.classes);
    std::string widths;
    for (std::int64_t w : hidden) {
      if (!widths.empty()) widths += ',';
      widths += std::to_string(w);
    }
    if (!widths.empty()) m["weft_hidden"] = widths;
    auto list = [](const std::vector<double>& v) {
      std::string s;
      for (double x : v) {
        if (!s.empty()) s += ',';
        s += fmt::format("{}", x);
      }
      return s;
    };
    m["weft_mean"] = list(mean);
    m["weft_std"] = list(stddev);
  }
  return m;
}

ModelRecipe ModelRecipe::from_metadata(const Metadata& metadata, const std::string& source) {
  Reader r(metadata, source);
  ModelRecipe recipe;
  recipe.model = r.text("weft_model");
  if (is_transformer_model(recipe.model)) {
    GptConfig& g = recipe.gpt;
    g.vocab = r.size("weft_vocab");
    g.context = r.size("weft_context");
    g.dim = r.size("weft_dim");
    g.layers = r.size("weft_layers");
    g.heads = r.size("weft_heads");
    if (g.dim % g.heads != 0)
      throw CheckpointError(source + ": weft_dim " + std::to_string(g.dim) + " is not divisible by weft_heads " +
                            std::to_string(g.heads));
    try {
      g.positional = parse_positional(r.text("weft_positional"));
    } catch (const ConfigError& e) {
      throw CheckpointError(source + ": " + e.what());
    }
    const std::string& pre_ln = r.text("weft_pre_ln");
    if (pre_ln != "0" && pre_ln != "1") throw CheckpointError(source + ": weft_pre_ln '" + pre_ln + "' is not 0 or 1");
    g.pre_ln = pre_ln == "1";
    g.norm = r.choice_or("weft_norm", {"layer", "rms"}, 0) == 1 ? Norm::kRms : Norm::kLayer;
    g.norm_eps = r.positive_or("weft_norm_eps", 1e-5);
    g.mlp = r.choice_or("weft_mlp", {"gelu", "swiglu"}, 0) == 1 ? Activation::kSwiGlu : Activation::kGelu;
    g.hidden = r.count_or("weft_mlp_width", 0);
    g.kv_heads = r.count_or("weft_kv_heads", 0);
    g.bias = r.flag_or("weft_bias", true);
    g.qkv_bias = r.flag_or("weft_qkv_bias", true);
    g.tied_head = r.flag_or("weft_tied_head", true);
    g.window = r.count_or("weft_window", 0);
    g.rope_theta = r.positive_or("weft_rope_theta", 10000);
    if (r.has("weft_rope_scaling")) {
      RopeScaling& rs = g.rope_scaling;
      rs.kind = r.choice_or("weft_rope_scaling", {"linear", "llama3"}, 0) == 0 ? RopeScaling::kLinear : RopeScaling::kLlama3;
      rs.factor = r.positive_or("weft_rope_factor", 1);
      rs.low_frequency_factor = r.positive_or("weft_rope_low_frequency_factor", 1);
      rs.high_frequency_factor = r.positive_or("weft_rope_high_frequency_factor", 4);
      rs.original_context = r.count_or("weft_rope_original_context", 8192);
    }
    try {
      g.validate();
    } catch (const ConfigError& e) {
      throw CheckpointError(source + ": " + e.what());
    }
  } else if (is_recurrent(recipe.model)) {
    RecurrentConfig& c = recipe.recurrent;
    c.cell = recipe.model;
    c.vocab = r.size("weft_vocab");
    c.context = r.size("weft_context");
    c.dim = r.size("weft_dim");
    c.layers = r.size("weft_layers");
  } else {
    const auto& names = model_names();
    if (std::find(names.begin(), names.end(), recipe.model) == names.end())
      throw CheckpointError(source + ": unknown model '" + recipe.model + "'");
    if (metadata.count("weft_channels")) {  // else a Fashion-MNIST model saved before these keys
      ImageInput& in = recipe.image;
      in.channels = r.size("weft_channels");
      in.height = r.size("weft_height");
      in.width = r.size("weft_width");
      in.classes = r.size("weft_classes");
      if (in.channels > 4096 || in.height > 65536 || in.width > 65536 || in.classes < 2 || in.classes > (1 << 20))
        throw CheckpointError(source + ": the recorded image input or classes are out of range");
      recipe.mean = r.numbers("weft_mean", in.channels);
      recipe.stddev = r.numbers("weft_std", in.channels);
      for (double sd : recipe.stddev)
        if (!(sd > 0)) throw CheckpointError(source + ": weft_std holds a value that is not positive");
    }
    if (metadata.count("weft_hidden")) {
      try {
        recipe.hidden = parse_hidden(metadata.at("weft_hidden"));
      } catch (const ConfigError& e) {
        throw CheckpointError(source + ": " + e.what());
      }
    }
  }
  return recipe;
}

std::shared_ptr<Module> ModelRecipe::build(Rng& rng) const {
  if (is_transformer_model(model)) return std::make_shared<GPT>(gpt, rng);
  if (is_recurrent(model)) return std::make_shared<RecurrentLM>(recurrent, rng);
  return make_model(model, rng, image, hidden);
}

}  // namespace weft
