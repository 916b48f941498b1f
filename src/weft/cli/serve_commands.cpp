// weft predict, weft generate: inference with a saved model (docs/serving.md).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flag_parser.h"
#include "weft/cli/yaml_config.h"
#include "weft/comm/process.h"
#include "weft/data/dataset.h"
#include "weft/data/text.h"
#include "weft/data/images.h"
#include "weft/serve/classify.h"
#include "weft/serve/evaluate.h"
#include "weft/serve/generation.h"
#include "weft/serve/load.h"
#include "weft/serve/model_file.h"
#include "weft/serve/server.h"
#include "weft/serve/serve_flags.h"
#include "weft/serve/model_parallel.h"
#include "weft/util/parse.h"
#include "weft/util/size.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/machine.h"
#include "weft/util/utf8.h"

namespace weft::cli {

namespace {

// --logits replaces only a logits file: float32 values with no header, told by the values. Each
// 4-byte word of its head is 0, infinite, NaN or of magnitude 1e-30 to 1e30, as logits are,
// and the head is not text; a safetensors model (its header's length reads as a denormal), an
// IDX or NumPy file (the same), a tokenizer or any text is not a logits file.
bool is_logits_file(std::string_view head) {
  if (head.size() % sizeof(float) != 0 || is_text(head)) return false;
  for (std::size_t i = 0; i < head.size(); i += sizeof(float)) {
    float v;
    std::memcpy(&v, head.data() + i, sizeof v);
    if (v != 0 && std::isfinite(v) && (std::fabs(v) < 1e-30f || std::fabs(v) > 1e30f)) return false;
  }
  return true;
}

void check_logits_path(const std::string& path) {
  if (!path.empty()) check_replaceable_file(path, "--logits", "a logits file (float32)", is_logits_file);
}

// --port-file replaces only a port file: a number of up to 5 digits and a line's end.
bool is_port_file(std::string_view head) {
  while (!head.empty() && (head.back() == '\n' || head.back() == '\r')) head.remove_suffix(1);
  return !head.empty() && head.size() <= 5 &&
         std::all_of(head.begin(), head.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The saved model a command loads (weft predict, generate, export, serve).
void add_model_argument(CLI::App* cmd, std::string& model) {
  cmd->add_option("model", model, "a --save-model file, a checkpoint folder, or a folder of checkpoints")->required();
}

struct PredictConfig {
  std::string model, data, data_dir, images, quantize = "fp32", kv_cache_dtype = "fp32", logits;
  std::int64_t limit = 0, batch = 1000, windows = 256;
  int tp = 1, pp = 1, micro_batches = 0;
  bool json = false;
  std::vector<std::string> given;  // the flags on the command line
  std::string kind;                // once the model is loaded: "a language model (gpt)", "an image model (mlp)"
};

bool is_language(const PredictConfig& c) { return serve::is_language_kind(c.kind); }
bool is_image(const PredictConfig& c) { return !is_language(c); }
std::string kind_of(const PredictConfig& c) { return c.kind; }

#define AT(member) [](Options& o) -> FieldRef { return &o.member; }

// weft predict's flags.
const FlagTable<PredictConfig>& predict_flags() {
  using Options = PredictConfig;
  using F = Flag<Options>;
  static const FlagTable<Options> table = [] {
    FlagTable<Options> t;
    serve::add_model_flags(t, "the model");
    for (F& f : t)  // how a GPT is held (--micro-batches: for --pp, itself for a language model)
      if (!f.applies) f.applies = is_language, f.needs = "a language model", f.run_has = kind_of;
    const FlagGroup<Options> add{t, "the data"};
    add(F("--data", AT(data), "images: fashion-mnist or a folder of IDX, NPY or CSV files; text: fortunes or a file or "
                              "folder")
            .defaults("images fashion-mnist, text fortunes"));
    const auto text = [](F f) { return std::move(f).only_for(is_language, "a language model", kind_of); };
    const auto images = [](F f) { return std::move(f).only_for(is_image, "an image model", kind_of); };
    add(text(F("--windows", AT(windows), "text: validation windows (training's --eval-batches x --batch)")
                 .in(1, static_cast<double>(serve::kMaxWindows))));
    add(text(F("--logits", AT(logits), "text: write every scored row of logits to this file (float32, [context][windows][vocab])")));
    add(images(F("--data-dir", AT(data_dir), "where fashion-mnist lives").defaults("/usr/share/datasets/fashion-mnist")));
    add(images(F("--images", AT(images), "an IDX file of images of the model's size ([N, H, W] or [N, H, W, C]): one "
                                         "prediction per image")
                   .excluding({"--data", "--data-dir"})));
    add(images(F("--limit", AT(limit), "only the first N images (0: all)").at_least(0)));
    add(images(F("--batch", AT(batch), "images per forward pass").at_least(1)));
    add(F("--json", AT(json), "print JSON"));
    return t;
  }();
  return table;
}

// A language model's validation loss through its decoder, and against float32 weights and
// cache when they are held smaller.
int run_language_predict(const PredictConfig& c, serve::LoadedModel& m) {
  check_logits_path(c.logits);  // before the validation runs
  const serve::DecoderFormat format = serve::decoder_format(c);
  const bool reduced = format.weights != serve::WeightFormat::kF32 || format.cache != serve::CacheFormat::kF32;
  if (reduced && (c.tp > 1 || c.pp > 1))  // (before the work, and before a job of ranks starts)
    throw ConfigError(std::string(format.weights != serve::WeightFormat::kF32 ? "--quantize" : "--kv-cache-dtype") +
                      " compares with fp32 in one process: drop --tp and --pp");
  const std::vector<std::int32_t> tokens =
      serve::validation_tokens(c.data.empty() ? "fortunes" : c.data, *m.tokenizer,
                               memory_share(comm::process_info_from_env().local_world));
  auto measure = [&](serve::DecoderFormat f) {
    std::unique_ptr<serve::Decoder> d = serve::join_decoder(*m.language_model(), f, c.tp, c.pp, c.micro_batches);
    if (!d) return std::make_pair(serve::LossReport{}, std::int64_t{-1});  // a rank that followed rank 0
    std::vector<float> logits;
    serve::LossReport r = serve::next_token_loss(*d, tokens, c.windows, c.logits.empty() ? nullptr : &logits);
    if (!c.logits.empty() && f.weights == format.weights && f.cache == format.cache)
      write_file_atomic(c.logits, std::string_view(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float)));
    const std::int64_t bytes = d->weight_bytes() > 0 ? d->weight_bytes() : 4 * m.module->num_parameters();
    return std::make_pair(r, bytes);
  };
  auto [r, bytes] = measure(format);
  if (bytes < 0) return 0;  // a model-parallel rank that followed rank 0
  nlohmann::json out = {{"model", m.name}, {"weights", c.quantize}, {"kv_cache_dtype", c.kv_cache_dtype},
                        {"weight_bytes", bytes}, {"val_loss", r.loss}, {"tokens", r.tokens}};
  const std::string cache = format.cache != serve::CacheFormat::kF32 ? ", " + c.kv_cache_dtype + " key-value cache" : "";
  std::string line = fmt::format("{} ({}, {} weights, {:.2f} MB{}): validation loss {:.4f} nats/token over {} predictions",
                                 m.name, m.recipe.model, c.quantize, static_cast<double>(bytes) / 1e6, cache, r.loss, r.tokens);
  if (reduced) {
    auto [ref, ref_bytes] = measure(serve::DecoderFormat{});
    out["fp32_val_loss"] = ref.loss;
    out["fp32_weight_bytes"] = ref_bytes;
    line += fmt::format("; fp32 {:.4f} ({:+.4f})", ref.loss, r.loss - ref.loss);
    if (format.weights != serve::WeightFormat::kF32)
      line += fmt::format(", {:.2f} MB ({:.2f}x the memory)", static_cast<double>(ref_bytes) / 1e6,
                          static_cast<double>(ref_bytes) / static_cast<double>(bytes));
  }
  if (c.json) fmt::print("{}\n", out.dump());
  else fmt::print("{}\n", line);
  return 0;
}

int run_predict(PredictConfig c) {
  serve::LoadedModel m = serve::load_model(c.model);
  // Which flags shape the run depends on the model: a flag for the other kind is an error.
  c.kind = serve::model_kind(m.recipe.is_language_model(), m.recipe.model);
  check_flags_apply(predict_flags(), c.given, c);
  if (m.recipe.is_language_model()) return run_language_predict(c, m);
  Tensor images;
  std::vector<std::int32_t> labels;
  if (!c.images.empty()) {
    images = serve::read_idx_images(c.images, m.recipe);
    if (c.limit > 0 && c.limit < images.size(0)) images = images.slice(0, 0, c.limit).contiguous();
  } else {
    // The data's test split, normalized as the model's training data was.
    ImageSplit test = read_image_split(resolve_data_dir(c.data.empty() ? "fashion-mnist" : c.data, c.data_dir), "test", c.limit);
    const Shape& s = test.images.shape();
    serve::check_image_size(test.source, s[1], s[2], s[3], m.recipe);
    normalize_images(test.images, {m.recipe.mean, m.recipe.stddev});
    images = test.images;
    labels = test.labels;
  }
  const std::int64_t n = images.size(0);
  std::vector<std::int64_t> predicted;
  std::vector<float> confidence;
  for (std::int64_t begin = 0; begin < n; begin += c.batch) {
    const std::int64_t end = std::min(n, begin + c.batch);
    Tensor p = serve::class_probabilities(*m.module, images.slice(0, begin, end).contiguous());
    for (std::int64_t label : ops::argmax_rows(p)) {
      confidence.push_back(p.data<float>()[(static_cast<std::int64_t>(predicted.size()) - begin) * p.size(1) + label]);
      predicted.push_back(label);
    }
  }
  auto name_of = [&](std::int64_t label) { return serve::class_name(m.recipe, label); };
  if (!labels.empty()) {
    std::int64_t correct = 0;
    for (std::int64_t i = 0; i < n; ++i) correct += predicted[static_cast<size_t>(i)] == labels[static_cast<size_t>(i)];
    const double accuracy = static_cast<double>(correct) / static_cast<double>(n);
    if (c.json) {
      fmt::print("{}\n", nlohmann::json{{"model", m.name}, {"images", n}, {"correct", correct}, {"test_accuracy", accuracy}}.dump());
    } else {
      fmt::print("{} ({}): test accuracy {:.2f}% ({} of {} images)\n", m.name, m.recipe.model, 100 * accuracy,
                 correct, n);
    }
    return 0;
  }
  nlohmann::json out = nlohmann::json::array();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto label = predicted[static_cast<size_t>(i)];
    const float p = confidence[static_cast<size_t>(i)];
    if (c.json) out.push_back({{"index", i}, {"label", label}, {"class", name_of(label)}, {"probability", p}});
    else fmt::print("{} {} {} {:.4f}\n", i, label, name_of(label), p);
  }
  if (c.json) fmt::print("{}\n", out.dump());
  return 0;
}

struct GenerateConfig {
  std::string model, prompt, quantize = "fp32", kv_cache_dtype = "fp32", logits, system;
  int tp = 1, pp = 1, micro_batches = 0;
  serve::GenerationOptions options = [] {
    serve::GenerationOptions g;
    g.max_tokens = 200;
    g.sampling.temperature = 0.8;
    return g;
  }();
  bool no_cache = false, json = false, chat = false;
  std::vector<std::string> given;  // the flags on the command line
};

// weft generate's flags.
const FlagTable<GenerateConfig>& generate_flags() {
  using Options = GenerateConfig;
  using F = Flag<Options>;
  static const FlagTable<Options> table = [] {
    FlagTable<Options> t;
    serve::add_model_flags(t, "the model");
    const FlagGroup<Options> text{t, "the text"}, sampling{t, "sampling"}, out{t, "output"};
    text(F("--prompt", AT(prompt), "the text to continue"));
    text(F("--chat", AT(chat), "--prompt is a user's message: put it in the model's chat template "
                                    "(tokenizer_config.json) and stop at its end-of-turn token"));
    text(F("--system", AT(system), "--chat: a system message before it"));
    text(F("--max-tokens", AT(options.max_tokens), "tokens to generate").in(0, 1 << 20));
    text(F("--stop", AT(options.stop), "stop before this text (repeatable)"));
    // Greedy decoding (--temperature 0) draws nothing: the sampler's flags shape only sampling.
    const auto sampled = [](const Options& o) { return o.options.sampling.temperature > 0; };
    const auto greedy = [](const Options&) { return std::string("--temperature 0 (greedy)"); };
    const auto sampler = [&](F f) { return std::move(f).only_for(sampled, "sampling (--temperature above 0)", greedy); };
    sampling(F("--temperature", AT(options.sampling.temperature), "0: greedy").at_least(0));
    sampling(sampler(F("--top-k", AT(options.sampling.top_k), "sample among the k most likely tokens (0: all)").at_least(0)));
    sampling(sampler(F("--top-p", AT(options.sampling.top_p), "sample among the most likely tokens whose probability reaches p")
                      .in(1e-9, 1)));
    sampling(sampler(F("--seed", AT(options.sampling.seed), "the sampler's seed")));
    // The model's own forward: float32 weights in this process (the cache's decoder packs
    // and splits them).
    out(F("--no-cache", AT(no_cache), "recompute the whole window for every token (no key-value cache)")
            .only_for([](const Options& o) { return o.quantize == "fp32" && o.kv_cache_dtype == "fp32" && o.tp == 1 && o.pp == 1; },
                      "float32 weights in one process, no cache to hold (--no-cache runs the model's own forward)",
                      [](const Options& o) {
                        return o.quantize != "fp32"         ? "--quantize " + o.quantize
                               : o.kv_cache_dtype != "fp32" ? "--kv-cache-dtype " + o.kv_cache_dtype
                               : o.tp > 1                   ? "--tp " + std::to_string(o.tp)
                                                            : "--pp " + std::to_string(o.pp);
                      }));
    out(F("--json", AT(json), "print JSON (the tokens, the finish reason)"));
    out(F("--logits", AT(logits), "write the logits each token was chosen from to this file (float32, [tokens][vocab])"));
    return t;
  }();
  return table;
}

#undef AT

int run_generate(GenerateConfig c) {
  check_flags_apply(generate_flags(), c.given, c);
  check_logits_path(c.logits);  // before the model loads
  set_pool_pause(serve::kDecodingPoolPause);
  serve::LoadedModel m = serve::load_model(c.model);
  LanguageModel* lm = m.language_model();
  if (!lm) throw ConfigError(c.model + " is an image model (" + m.recipe.model + "): use weft predict");
  if (!c.system.empty() && !c.chat) throw ConfigError("--system is a chat's first message: it needs --chat");
  const std::string typed = c.prompt;
  if (c.chat) {  // the prompt is the user's message, put in the model's chat template
    nlohmann::json messages = nlohmann::json::array();
    if (!c.system.empty()) messages.push_back({{"role", "system"}, {"content", c.system}});
    messages.push_back({{"role", "user"}, {"content", c.prompt}});
    try {
      c.prompt = m.chat_prompt(messages);
    } catch (const serve::ChatTemplateError& e) {
      throw ConfigError(c.model + ": " + e.what());
    }
    if (!m.eos_token.empty()) c.options.stop.push_back(m.eos_token);
  }
  std::unique_ptr<serve::Decoder> decoder =
      c.no_cache ? std::make_unique<serve::WindowDecoder>(*lm)
                 : serve::join_decoder(*lm, serve::decoder_format(c), c.tp, c.pp, c.micro_batches);
  if (!decoder) return 0;  // a model-parallel rank that followed rank 0
  serve::release_module_held_by(m.module, *decoder);  // (lm is not used past here)
  std::unique_ptr<AtomicFileWriter> logits;  // (opened before the work: a path that cannot be written fails first)
  if (!c.logits.empty()) logits = std::make_unique<AtomicFileWriter>(c.logits);
  c.options.keep_logits = logits != nullptr;
  const std::vector<std::int32_t> prompt_ids = m.tokenizer->encode(c.prompt);
  serve::GenerationResult r = serve::generate(*decoder, *m.tokenizer, c.prompt, prompt_ids, c.options);
  if (logits) {
    logits->write(std::string_view(reinterpret_cast<const char*>(r.logits.data()), r.logits.size() * sizeof(float)));
    logits->commit();
  }
  if (c.json) {
    fmt::print("{}\n", nlohmann::json{{"model", m.name},
                                      {"prompt", c.prompt},
                                      {"chat", c.chat},
                                      {"prompt_token_ids", prompt_ids},
                                      {"text", r.text},
                                      {"tokens", r.tokens},
                                      {"finish_reason", r.finish_reason},
                                      {"prompt_tokens", r.prompt_tokens},
                                      {"completion_tokens", r.tokens.size()}}
                           .dump());
  } else if (c.chat) {
    fmt::print("{}\n", r.text);
  } else {
    fmt::print("{}{}\n", typed, r.text);
  }
  return 0;
}

}  // namespace

struct ExportConfig {
  std::string model, format, out, dtype = "f32";
};

// A saved transformer as a Hugging Face folder (io/hf_export.h).
int run_export(const ExportConfig& c) {
  if (c.format != "hf") throw ConfigError("--format '" + c.format + "' is not hf");
  const std::string dtype = c.dtype == "f32" ? "F32" : c.dtype == "bf16" ? "BF16" : "";
  if (dtype.empty()) throw ConfigError("--dtype '" + c.dtype + "' is not f32 or bf16");
  const serve::LoadedModel m = serve::load_model(c.model);
  const serve::HfExport written = serve::export_hf(m, c.out, dtype);
  fmt::print("{}: {} ({}) written as a Hugging Face folder: config.json, model.safetensors ({}), {}\n", c.out, m.name,
             written.model_type, c.dtype, written.tokenizer_file);
  return 0;
}

void add_predict_command(CLI::App& app, Action& action) {
  auto c = std::make_shared<PredictConfig>();
  CLI::App* cmd = app.add_subcommand("predict", "evaluate a saved model: an image model's test accuracy or predictions, a language model's validation loss");
  add_model_argument(cmd, c->model);
  add_flags(cmd, predict_flags(), *c);
  cmd->callback([c, cmd, &action] {
    c->given = given_options(*cmd);
    action = [c] { return run_predict(*c); };
  });
}

void add_generate_command(CLI::App& app, Action& action) {
  auto c = std::make_shared<GenerateConfig>();
  CLI::App* cmd = app.add_subcommand("generate", "continue a prompt with a saved language model");
  add_model_argument(cmd, c->model);
  add_flags(cmd, generate_flags(), *c);
  cmd->callback([c, cmd, &action] {
    c->given = given_options(*cmd);
    action = [c] { return run_generate(*c); };
  });
}

void add_export_command(CLI::App& app, Action& action) {
  auto c = std::make_shared<ExportConfig>();
  CLI::App* cmd = app.add_subcommand("export", "write a saved transformer in another format (a Hugging Face folder)");
  add_model_argument(cmd, c->model);
  cmd->add_option("--format", c->format, "hf: a Hugging Face folder (config.json, model.safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--out", c->out, "the folder to write (new, or empty)")->required();
  cmd->add_option("--dtype", c->dtype, "the weights' type: f32 | bf16")->capture_default_str();
  cmd->callback([c, &action] { action = [c] { return run_export(*c); }; });
}

FlagDocs serve_flag_docs() { return flag_docs(serve::serve_flags()); }
FlagDocs predict_flag_docs() { return flag_docs(predict_flags()); }
FlagDocs generate_flag_docs() { return flag_docs(generate_flags()); }

void add_serve_command(CLI::App& app, Action& action) {
  auto c = std::make_shared<serve::ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "serve a saved model over HTTP (OpenAI completions, image classification)");
  add_model_argument(cmd, c->model);
  add_flags(cmd, serve::serve_flags(), *c);
  cmd->callback([c, cmd, &action] {
    c->given_flags = given_options(*cmd);
    action = [c] {
      serve::check_serve_flags_apply(*c);  // --replicas' own; the model's once it is loaded
      if (!c->port_file.empty())  // before the model loads
        check_replaceable_file(c->port_file, "--port-file", "a port file", is_port_file);
      return serve::serve(*c, stdout);
    };
  });
}

// weft serve-bench's flags: the load (serve/load.h), the server and the output.
struct ServeBenchFlags : serve::LoadOptions {
  std::string url = "http://127.0.0.1:8000";
  bool json = false;
};

const FlagTable<ServeBenchFlags>& serve_bench_flags() {
  using F = Flag<ServeBenchFlags>;
#define AT(member) [](ServeBenchFlags& o) -> FieldRef { return &o.member; }
  static const FlagTable<ServeBenchFlags> table = [] {
    FlagTable<ServeBenchFlags> t;
    const FlagGroup<ServeBenchFlags> server{t, "the server"}, load{t, "the load"}, asked{t, "the requests"};
    server(F("--url", AT(url), "the server (http://HOST:PORT)"));
    server(F("--token", AT(token), "bearer token").defaults("none").from_env("WEFT_SERVE_TOKEN"));
    server(F("--endpoint", AT(endpoint), "the API to load").one_of({"completions", "classify"}));
    // The runs a flag shapes: the loop (closed or open) and the API.
    const auto closed = [](const ServeBenchFlags& o) { return o.rate == 0; };
    const auto open = [](const ServeBenchFlags& o) { return o.rate > 0; };
    const auto loop_of = [](const ServeBenchFlags& o) { return o.rate > 0 ? std::string("--rate (an open loop)") : "no --rate"; };
    const auto completions = [](const ServeBenchFlags& o) { return o.endpoint == "completions"; };
    const auto classify = [](const ServeBenchFlags& o) { return o.endpoint == "classify"; };
    const auto endpoint_of = [](const ServeBenchFlags& o) { return "--endpoint " + o.endpoint; };
    load(F("--concurrency", AT(concurrency), "closed loop: concurrent clients").in(1, 4096).only_for(closed, "a closed loop (no --rate)", loop_of));
    load(F("--rate", AT(rate), "open loop: Poisson arrivals per second (0: closed loop)").at_least(0));
    load(F("--requests", AT(requests), "measured requests").in(1, 1e7));
    load(F("--warmup", AT(warmup), "requests before the measurement").in(0, 1e4));
    load(F("--seed", AT(seed), "the arrivals' seed").only_for(open, "an open loop (--rate)", loop_of));
    const auto text = [&](F f) { return std::move(f).only_for(completions, "--endpoint completions", endpoint_of); };
    asked(text(F("--prompt", AT(prompts), "prompts, used in turn (repeatable)")));
    asked(text(F("--max-tokens", AT(max_tokens), "tokens per completion").at_least(1)));
    asked(text(F("--temperature", AT(temperature), "0: greedy").at_least(0)));
    asked(text(F("--stop", AT(stop),
                 "a stop sequence sent with every completion (repeatable, at most 4: OpenAI's stop); a completion ends "
                 "at it, before max_tokens")));
    asked(F("--pixels", AT(pixels), "classify: values per image, the model's height x width x channels")
              .in(1, 1 << 24)
              .only_for(classify, "--endpoint classify", endpoint_of));
    asked(F("--json", AT(json), "print JSON"));
    return t;
  }();
#undef AT
  return table;
}

FlagDocs serve_bench_flag_docs() { return flag_docs(serve_bench_flags()); }

void add_serve_bench_command(CLI::App& app, Action& action) {
  auto c = std::make_shared<ServeBenchFlags>();
  CLI::App* cmd = app.add_subcommand("serve-bench", "load an inference server: throughput and latency percentiles");
  add_flags(cmd, serve_bench_flags(), *c);
  cmd->callback([c, cmd, &action] {
    const std::vector<std::string> given = given_options(*cmd);
    action = [c, given] {
      check_flags_apply(serve_bench_flags(), given, *c);
      if (c->stop.size() > 4) throw ConfigError(fmt::format("--stop given {} times: a completion takes at most 4", c->stop.size()));
      const std::string& url = c->url;
      const std::string prefix = "http://";
      const auto colon = url.rfind(':');
      if (url.rfind(prefix, 0) != 0 || colon == std::string::npos || colon < prefix.size())
        throw ConfigError("--url " + url + " is not http://HOST:PORT");
      c->host = url.substr(prefix.size(), colon - prefix.size());
      std::string port = url.substr(colon + 1);
      if (!port.empty() && port.back() == '/') port.pop_back();
      const auto p = parse_integer(port);
      if (!p || *p < 1 || *p > 65535) throw ConfigError("--url " + url + ": '" + port + "' is not a port");
      c->port = static_cast<int>(*p);
      serve::LoadReport r = serve::run_load(*c);
      if (c->json) fmt::print("{}\n", r.to_json().dump());
      else fmt::print("{}", r.table());
      return r.errors == 0 ? 0 : 1;
    };
  });
}

}  // namespace weft::cli
