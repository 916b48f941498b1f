#include "weft/serve/model_file.h"

#include <filesystem>

#include "weft/io/checkpoint.h"
#include "weft/io/hf_export.h"
#include "weft/io/hf_import.h"
#include "weft/io/safetensors.h"
#include "weft/nn/init.h"
#include "weft/tensor/allocator.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::serve {

namespace {

struct Saved {
  StateDict parameters;
  Metadata metadata;
  std::string name;
};

Saved read_saved(const std::string& path) {
  if (!file_exists(path)) throw CheckpointError(path + " does not exist");
  if (!is_directory(path)) {
    SafetensorsFile f = read_safetensors(path);
    std::string name = std::filesystem::path(path).filename().string();
    if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors") name.resize(name.size() - 12);
    return {std::move(f.tensors), std::move(f.metadata), name};
  }
  std::string folder = path;
  if (!file_exists(path + "/meta.json")) {
    std::optional<std::string> latest = latest_checkpoint(path);
    if (!latest) throw CheckpointError(path + ": neither a checkpoint folder (meta.json) nor a folder of checkpoints");
    folder = *latest;
  }
  Checkpoint c = load_checkpoint(folder);
  return {std::move(c.model), std::move(c.meta.info), std::filesystem::path(folder).filename().string()};
}

// The recorded sizes come from a file: before anything is allocated by them, they must fit
// the parameters the file holds (a GPT's embedding is vocab x dim and each block its products' weights;
// a recurrent layer at least dim^2) and the context a sane bound.
void check_sizes(const ModelRecipe& r, const StateDict& parameters, const std::string& path) {
  double elements = 0;
  for (const auto& [name, t] : parameters) elements += static_cast<double>(t.numel());
  auto require = [&](double need, const char* what) {
    if (need > elements)
      throw CheckpointError(path + ": the recorded " + what + " needs more parameters than the file holds");
  };
  auto d = [](std::int64_t v) { return static_cast<double>(v); };
  if (is_transformer_model(r.model)) {
    const BlockConfig b = r.gpt.block();
    const double attention = d(b.dim) * d(b.head_dim()) * d(2 * b.heads + 2 * b.key_value_heads());
    const double mlp = d(b.mlp == Activation::kSwiGlu ? 3 : 2) * d(b.dim) * d(b.mlp_width());
    require(d(r.gpt.vocab) * d(r.gpt.dim), "vocabulary and width");
    require(d(r.gpt.layers) * (attention + mlp), "layers and width");
    if (r.gpt.context > (1 << 20)) throw CheckpointError(path + ": the recorded context is over 2^20 tokens");
  } else if (r.is_language_model()) {
    require(d(r.recurrent.vocab) * d(r.recurrent.dim), "vocabulary and width");
    require(d(r.recurrent.layers) * d(r.recurrent.dim) * d(r.recurrent.dim), "layers and width");
    if (r.recurrent.context > (1 << 20)) throw CheckpointError(path + ": the recorded context is over 2^20 tokens");
  } else {
    // Every image model has a weight per input pixel (C <= 512) and per class at least.
    require(d(r.image.pixels()), "image size");
    require(d(r.image.classes), "number of classes");
  }
}

// Whether a safetensors file's metadata names a weft model (its header only is read; a
// broken file is reported by whichever reader takes it).
bool records_weft_model(const std::string& path) {
  try {
    return read_safetensors_metadata(path).count("weft_model") > 0;
  } catch (const CheckpointError&) {
    return false;
  }
}

// The recipe's model, its weights left at zero: every parameter is about to be loaded.
std::shared_ptr<Module> build_to_load(const ModelRecipe& recipe) {
  SkipInitialization every_parameter_is_loaded;
  Rng rng(0);
  return recipe.build(rng);
}

// A model in the Hugging Face layout (io/hf_import.h: GPT-2 or the Llama family), with its own tokenizer.
LoadedModel load_hf(const std::string& path) {
  ImportedHf imported = import_hf(path);
  LoadedModel m;
  m.source = path;
  std::filesystem::path p(path);
  if (!is_directory(path)) p = p.parent_path();
  const std::filesystem::path folder = std::filesystem::absolute(p).lexically_normal();
  m.name = folder.filename().empty() ? folder.parent_path().filename().string() : folder.filename().string();
  m.recipe.model = imported.model;
  m.recipe.gpt = imported.config;
  m.module = build_to_load(m.recipe);
  m.module->load_state_dict(imported.parameters);
  m.module->eval();
  m.tokenizer = std::move(imported.tokenizer);
  m.bos_token = imported.chat.bos_token;
  m.eos_token = imported.chat.eos_token;
  if (!imported.chat.chat_template.empty()) {
    try {
      m.chat = std::make_shared<const ChatTemplate>(imported.chat.chat_template);
      m.chat_error.clear();
    } catch (const ChatTemplateError& e) {
      m.chat_error = std::string("the model's chat template is not one weft reads: ") + e.what();
    }
  }
  return m;
}

}  // namespace

// ChatML (as Qwen's and many others' templates write it): the chat template of a language
// model that has none of its own.
const char* const kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string LoadedModel::chat_prompt(const nlohmann::json& messages) const {
  if (!chat) throw ChatTemplateError(chat_error);
  return chat->render({{"messages", messages}, {"add_generation_prompt", true}, {"bos_token", bos_token},
                       {"eos_token", eos_token}});
}

namespace {
// A language model without a chat template of its own (or a folder without one) gets ChatML,
// its generation stopped at "<|im_end|>"; one whose own template does not parse keeps the error.
void give_chatml_if_none(LoadedModel& m) {
  if (m.chat || !m.language_model() || m.chat_error != "the model has no chat template") return;
  m.chat = std::make_shared<const ChatTemplate>(kChatMl);
  m.chat_error.clear();
  m.eos_token = "<|im_end|>";
  m.chat_is_default = true;
}
}  // namespace

LoadedModel load_model(const std::string& path) {
  // Within the memory the machine has available: a model too large for it is one line.
  const auto ceiling = ceiling_at_available_memory("loading " + path);
  if (is_hf_import(path)) {
    // A .safetensors file written by weft records its recipe; one beside a config.json
    // without it is a Hugging Face file.
    if (is_directory(path) || !records_weft_model(path)) {
      LoadedModel hf = load_hf(path);
      give_chatml_if_none(hf);
      return hf;
    }
  }
  Saved saved = read_saved(path);
  LoadedModel m;
  m.source = path;
  m.name = saved.name;
  m.recipe = ModelRecipe::from_metadata(saved.metadata, path);
  check_sizes(m.recipe, saved.parameters, path);
  m.module = build_to_load(m.recipe);
  m.module->load_state_dict(saved.parameters);
  m.module->eval();
  if (m.recipe.is_language_model()) {
    auto kind = saved.metadata.find("weft_tokenizer");
    auto vocabulary = saved.metadata.find("weft_tokenizer_vocabulary");
    if (kind == saved.metadata.end() || vocabulary == saved.metadata.end())
      throw CheckpointError(path + ": the language model's tokenizer is not recorded");
    try {
      m.tokenizer = make_tokenizer(kind->second, vocabulary->second);
    } catch (const DataError& e) {
      throw CheckpointError(path + ": " + e.what());
    }
    // (A model may have more rows than its tokenizer has tokens: padded, as imported folders are.)
    if (m.tokenizer->vocab_size() > m.language_model()->vocab())
      throw CheckpointError(path + ": the tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
                            " tokens but the model's vocabulary is " + std::to_string(m.language_model()->vocab()));
  }
  give_chatml_if_none(m);
  return m;
}

HfExport export_hf(const LoadedModel& m, const std::string& out, const std::string& dtype) {
  if (!is_transformer_model(m.recipe.model))
    throw ConfigError(m.source + " is a " + m.recipe.model + " model: only transformers (gpt, llama) export to --format hf");
  HfExport result{hf_model_type(m.recipe.gpt), ""};  // (a shape without a form, refused before the tokenizer is converted)
  HfTokenizerFile tokenizer;
  if (const auto* sentencepiece = dynamic_cast<const BpeTokenizer*>(m.tokenizer.get())) {
    tokenizer = {"tokenizer.model", sentencepiece->model_file()};
  } else {
    try {
      tokenizer = {"tokenizer.json", hf_tokenizer_json(*m.tokenizer)};
    } catch (const DataError& e) {
      throw ConfigError(m.source + ": " + e.what());
    }
  }
  write_hf_folder(out, m.recipe.gpt, m.module->state_dict(), tokenizer, dtype, m.tokenizer->end_token());
  result.tokenizer_file = tokenizer.name;
  return result;
}

}  // namespace weft::serve
