#include "weft/serve/api.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <optional>

#include "weft/serve/classify.h"
#include "weft/tensor/ops.h"
#include "weft/util/parse.h"
#include "weft/util/utf8.h"

namespace weft::serve {

namespace {

using nlohmann::json;

json parse_object(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) throw RequestError(400, "the body is not valid JSON");
  if (!j.is_object()) throw RequestError(400, "the body must be a JSON object");
  return j;
}

double number_field(const json& j, const char* name, double fallback, double lo, double hi) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw RequestError(400, fmt::format("'{}' must be a number", name), name);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) throw RequestError(400, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, v), name);
  return v;
}

std::int64_t integer_field(const json& j, const char* name, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  const bool whole_float = it->is_number_float() && std::floor(it->get<double>()) == it->get<double>();
  if (whole_float && std::abs(it->get<double>()) < 9e15) {
    const auto v = static_cast<std::int64_t>(it->get<double>());
    if (v < lo || v > hi) throw RequestError(400, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, v), name);
    return v;
  }
  if (whole_float) throw RequestError(400, fmt::format("'{}' must be between {} and {}", name, lo, hi), name);
  if (!it->is_number_integer()) throw RequestError(400, fmt::format("'{}' must be an integer", name), name);
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    throw RequestError(400, fmt::format("'{}' must be between {} and {}", name, lo, hi), name);
  const auto v = it->get<std::int64_t>();
  if (v < lo || v > hi) throw RequestError(400, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, v), name);
  return v;
}

bool bool_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_boolean()) throw RequestError(400, fmt::format("'{}' must be true or false", name), name);
  return it->get<bool>();
}

// A field no endpoint of OpenAI's API (as weft serves it) knows: refused with OpenAI's words,
// so that a misspelt field is not silently ignored.
void refuse_unknown(const json& j, std::initializer_list<const char*> known) {
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) throw RequestError(400, fmt::format("Unrecognized request argument supplied: {}", key), key);
  }
}

// {"50256": -100, ...}: token ids (below the vocabulary) and biases in [-100, 100].
std::vector<std::pair<std::int32_t, double>> logit_bias_field(const json& j, const ApiLimits& limits) {
  std::vector<std::pair<std::int32_t, double>> out;
  auto it = j.find("logit_bias");
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_object() || it->size() > 1024)
    throw RequestError(400, "'logit_bias' must be an object of up to 1024 token ids and biases", "logit_bias");
  for (const auto& [key, value] : it->items()) {
    const std::int64_t id = parse_integer(key).value_or(-1);
    if (id < 0 || id > INT32_MAX || (limits.vocab > 0 && id >= limits.vocab))
      throw RequestError(400, fmt::format("'logit_bias': '{}' is not a token id of this model's {} tokens", key, limits.vocab),
                         "logit_bias");
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
      throw RequestError(400, fmt::format("'logit_bias': the bias of token {} must be a number in [-100, 100]", key),
                         "logit_bias");
    out.emplace_back(static_cast<std::int32_t>(id), value.get<double>());
  }
  return out;
}

// One image as H x W x C numbers (flat), or H rows of W x C numbers.
std::vector<float> pixels_of(const json& image, std::size_t index, const ImageInput& in) {
  const auto total = static_cast<std::size_t>(in.pixels()), height = static_cast<std::size_t>(in.height);
  const auto row_size = static_cast<std::size_t>(in.width * in.channels);
  std::vector<float> pixels;
  pixels.reserve(total);
  auto add = [&](const json& v) {
    if (!v.is_number()) throw RequestError(400, fmt::format("image {}: pixel values must be numbers", index), "images");
    const double p = v.get<double>();
    if (!(p >= 0 && p <= 255)) throw RequestError(400, fmt::format("image {}: pixel values must be in [0, 255]", index), "images");
    pixels.push_back(static_cast<float>(p));
  };
  if (!image.is_array()) throw RequestError(400, fmt::format("image {} must be an array", index), "images");
  if (image.size() == height && !image.empty() && image[0].is_array()) {
    for (const auto& row : image) {
      if (!row.is_array() || row.size() != row_size)
        throw RequestError(400, fmt::format("image {}: rows must hold {} values", index, row_size), "images");
      for (const auto& v : row) add(v);
    }
  } else if (image.size() == total) {
    for (const auto& v : image) add(v);
  } else {
    throw RequestError(400, fmt::format("image {}: expected {} values or {} rows of {}, got {} entries", index, total,
                                        height, row_size, image.size()), "images");
  }
  return pixels;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

std::vector<float> pixels_of_base64(const json& image, std::size_t index, const ImageInput& in) {
  const auto total = static_cast<std::size_t>(in.pixels());
  if (!image.is_string()) throw RequestError(400, fmt::format("images_base64[{}] must be a string", index), "images_base64");
  const std::string& s = image.get_ref<const std::string&>();
  std::vector<float> pixels;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    const int v = base64_value(c);
    if (v < 0) throw RequestError(400, fmt::format("images_base64[{}] is not base64", index), "images_base64");
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      pixels.push_back(static_cast<float>((acc >> bits) & 0xFF));
      if (pixels.size() > total) break;
    }
  }
  if (pixels.size() != total)
    throw RequestError(400, fmt::format("images_base64[{}] must decode to {} bytes ({} pixels)", index, total,
                                        image_size_text(in.channels, in.height, in.width)), "images_base64");
  return pixels;
}

}  // namespace

namespace {
// The fields completions and chat completions share: the model, sampling, length (max_tokens,
// `default_max_tokens` when absent), streaming and stop sequences.
void parse_generation_fields(const json& j, const ApiLimits& limits, std::uint64_t default_seed, CompletionRequest& r,
                             std::int64_t default_max_tokens) {
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string()) throw RequestError(400, "'model' must be a string", "model");
    if (m->get<std::string>() != limits.model)
      throw RequestError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", m->get<std::string>(), limits.model), "model");
  }
  if (auto u = j.find("user"); u != j.end() && !u->is_null() && !u->is_string())
    throw RequestError(400, "'user' must be a string", "user");
  r.options.max_tokens = integer_field(j, "max_tokens", default_max_tokens, 0, limits.max_tokens);
  r.n = integer_field(j, "n", 1, 1, kMaxChoices);
  r.best_of = r.n;  // (completions may ask for more)
  r.options.presence_penalty = number_field(j, "presence_penalty", 0, -2, 2);
  r.options.frequency_penalty = number_field(j, "frequency_penalty", 0, -2, 2);
  r.options.logit_bias = logit_bias_field(j, limits);
  r.options.sampling.temperature = number_field(j, "temperature", 1.0, 0, 2);
  r.options.sampling.top_p = number_field(j, "top_p", 1.0, 1e-9, 1);
  r.options.sampling.top_k = integer_field(j, "top_k", 0, 0, std::int64_t{1} << 31);
  r.options.sampling.seed = static_cast<std::uint64_t>(
      integer_field(j, "seed", static_cast<std::int64_t>(default_seed & INT64_MAX), 0, INT64_MAX));
  r.stream = bool_field(j, "stream");
  if (auto so = j.find("stream_options"); so != j.end() && !so->is_null()) {
    if (!so->is_object()) throw RequestError(400, "'stream_options' must be an object", "stream_options");
    r.include_usage = bool_field(*so, "include_usage");
  }
  if (auto s = j.find("stop"); s != j.end() && !s->is_null()) {
    if (s->is_string()) {
      r.options.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= 4) {
      for (const auto& e : *s) {
        if (!e.is_string()) throw RequestError(400, "'stop' must hold strings", "stop");
        r.options.stop.push_back(e.get<std::string>());
      }
    } else {
      throw RequestError(400, "'stop' must be a string or an array of up to 4 strings", "stop");
    }
  }
}
}  // namespace

namespace {
// A list of token ids (each below the vocabulary), or nothing when `v` is not one.
std::optional<std::vector<std::int32_t>> token_ids(const json& v, const ApiLimits& limits) {
  if (!v.is_array() || v.empty() || !v[0].is_number()) return std::nullopt;
  std::vector<std::int32_t> ids;
  for (const json& e : v) {
    if (!e.is_number_integer() || e.get<std::int64_t>() < 0 || e.get<std::int64_t>() > INT32_MAX ||
        (limits.vocab > 0 && e.get<std::int64_t>() >= limits.vocab))
      throw RequestError(400, fmt::format("'prompt': token ids must be integers in [0, {})", limits.vocab), "prompt");
    ids.push_back(static_cast<std::int32_t>(e.get<std::int64_t>()));
  }
  return ids;
}
}  // namespace

CompletionRequest parse_completion_request(const std::string& body, const ApiLimits& limits,
                                           std::uint64_t default_seed, const Tokenizer* tokenizer) {
  json j = parse_object(body);
  refuse_unknown(j, {"model", "prompt", "suffix", "max_tokens", "temperature", "top_p", "top_k", "n", "best_of", "stream",
                     "stream_options", "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
                     "user", "seed"});
  if (j.contains("suffix") && !j["suffix"].is_null()) throw RequestError(400, "'suffix' is not supported", "suffix");
  CompletionRequest r;
  parse_generation_fields(j, limits, default_seed, r, 16);
  r.best_of = integer_field(j, "best_of", r.n, 1, kMaxChoices);
  if (r.best_of < r.n) throw RequestError(400, "'best_of' must be at least 'n'", "best_of");
  if (r.stream && r.best_of > r.n) throw RequestError(400, "'best_of' cannot be used with 'stream'", "best_of");
  r.echo = bool_field(j, "echo");
  r.options.top_logprobs = integer_field(j, "logprobs", -1, 0, 5);
  r.options.prompt_logprobs = r.echo && r.options.top_logprobs >= 0;
  r.options.rank = r.best_of > r.n;
  auto p = j.find("prompt");
  if (p == j.end()) throw RequestError(400, "'prompt' is required", "prompt");
  auto add_ids = [&](std::vector<std::int32_t> ids) {
    if (tokenizer == nullptr) throw RequestError(400, "this model takes prompts as text", "prompt");
    Prompt one;
    one.text = tokenizer->decode(ids);
    one.tokens = std::move(ids);
    one.as_tokens = true;
    r.prompts.push_back(std::move(one));
  };
  if (p->is_string()) {
    r.prompts.push_back({p->get<std::string>(), {}, false});
  } else if (auto ids = token_ids(*p, limits)) {
    add_ids(std::move(*ids));
  } else if (p->is_array() && !p->empty() && static_cast<std::int64_t>(p->size()) <= kMaxPrompts) {
    for (const json& e : *p) {
      if (e.is_string()) r.prompts.push_back({e.get<std::string>(), {}, false});
      else if (auto many = token_ids(e, limits)) add_ids(std::move(*many));
      else throw RequestError(400, "'prompt' must be a string, an array of strings, token ids, or arrays of token ids", "prompt");
    }
  } else {
    throw RequestError(400, fmt::format("'prompt' must be a string, token ids, or an array of 1 to {} of either",
                                        kMaxPrompts), "prompt");
  }
  if (static_cast<std::int64_t>(r.prompts.size()) * r.best_of > kMaxSequences)
    throw RequestError(400, fmt::format("{} prompts x {} sequences each: the most in one request is {}", r.prompts.size(),
                                        r.best_of, kMaxSequences), "n");
  return r;
}

ChatRequest parse_chat_request(const std::string& body, const ApiLimits& limits, std::uint64_t default_seed) {
  json j = parse_object(body);
  ChatRequest r;
  refuse_unknown(j, {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n",
                     "stream", "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs",
                     "top_logprobs", "user", "seed", "tools", "tool_choice", "functions", "function_call",
                     "response_format", "parallel_tool_calls"});
  if (j.contains("max_completion_tokens") && !j.contains("max_tokens")) j["max_tokens"] = j["max_completion_tokens"];
  j.erase("max_completion_tokens");
  parse_generation_fields(j, limits, default_seed, r, limits.max_tokens);
  const std::int64_t top = integer_field(j, "top_logprobs", 0, 0, 20);
  if (bool_field(j, "logprobs")) r.options.top_logprobs = top;
  else if (j.contains("top_logprobs") && !j["top_logprobs"].is_null())
    throw RequestError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
  for (const char* unsupported : {"tools", "tool_choice", "functions", "function_call", "response_format", "parallel_tool_calls"})
    if (j.contains(unsupported) && !j[unsupported].is_null())
      throw RequestError(400, fmt::format("'{}' is not supported", unsupported), unsupported);
  auto m = j.find("messages");
  if (m == j.end() || !m->is_array() || m->empty() || m->size() > 4096)
    throw RequestError(400, "'messages' must be an array of 1 to 4096 messages", "messages");
  r.messages = json::array();
  for (std::size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      throw RequestError(400, where + " must be an object with a 'role' string", "messages");
    const std::string role = msg["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer")
      throw RequestError(400, where + ": the role '" + role + "' is not system, developer, user or assistant", "messages");
    std::string content;
    const json c = msg.contains("content") ? msg["content"] : json();
    if (c.is_string()) {
      content = c.get<std::string>();
    } else if (c.is_array()) {  // content parts: text only
      for (const json& part : c) {
        if (!part.is_object() || part.value("type", std::string()) != "text" || !part.contains("text") || !part["text"].is_string())
          throw RequestError(400, where + ": only text content parts are supported", "messages");
        content += part["text"].get<std::string>();
      }
    } else {
      throw RequestError(400, where + ": 'content' must be a string or an array of text parts", "messages");
    }
    r.messages.push_back({{"role", role == "developer" ? "system" : role}, {"content", content}});
  }
  return r;
}

json usage_of(std::int64_t prompt_tokens, std::int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
json finish_of(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }
// The bytes of a token's text (chat's "bytes": the text itself may not be valid UTF-8).
json token_bytes(const std::string& text) {
  json b = json::array();
  for (unsigned char c : text) b.push_back(c);
  return b;
}
}  // namespace

json chat_response(const std::string& id, std::int64_t created, const std::string& model, const std::vector<Choice>& choices,
                   std::int64_t prompt_tokens, std::int64_t completion_tokens) {
  json list = json::array();
  for (const Choice& c : choices)
    list.push_back({{"index", c.index},
                    {"message", {{"role", "assistant"}, {"content", c.text}}},
                    {"logprobs", c.logprobs},
                    {"finish_reason", c.finish_reason}});
  return {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
          {"choices", list}, {"usage", usage_of(prompt_tokens, completion_tokens)}};
}

json chat_chunk(const std::string& id, std::int64_t created, const std::string& model, const Choice& c, bool first) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!c.text.empty() || first) delta["content"] = c.text;
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", c.index},
                                    {"delta", delta},
                                    {"logprobs", c.logprobs},
                                    {"finish_reason", finish_of(c.finish_reason)}}})}};
}

json chat_chunk(const std::string& id, std::int64_t created, const std::string& model, const std::string& text,
                const std::string& finish_reason, bool first) {
  return chat_chunk(id, created, model, Choice{0, text, finish_reason, nullptr}, first);
}

json completion_response(const std::string& id, std::int64_t created, const std::string& model,
                         const std::vector<Choice>& choices, std::int64_t prompt_tokens, std::int64_t completion_tokens) {
  json list = json::array();
  for (const Choice& c : choices)
    list.push_back({{"text", c.text}, {"index", c.index}, {"logprobs", c.logprobs}, {"finish_reason", c.finish_reason}});
  return {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
          {"choices", list}, {"usage", usage_of(prompt_tokens, completion_tokens)}};
}

json completion_chunk(const std::string& id, std::int64_t created, const std::string& model, const Choice& c) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"text", c.text},
                                    {"index", c.index},
                                    {"logprobs", c.logprobs},
                                    {"finish_reason", finish_of(c.finish_reason)}}})}};
}

json completion_chunk(const std::string& id, std::int64_t created, const std::string& model, const std::string& text,
                      const std::string& finish_reason) {
  return completion_chunk(id, created, model, Choice{0, text, finish_reason, nullptr});
}

json chat_logprobs(const std::vector<TokenLogprob>& tokens, const Tokenizer& tokenizer) {
  json content = json::array();
  for (const TokenLogprob& t : tokens) {
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      const std::string text = tokenizer.decode({id});
      top.push_back({{"token", valid_utf8(text)}, {"logprob", lp}, {"bytes", token_bytes(text)}});
    }
    content.push_back({{"token", valid_utf8(t.text)}, {"logprob", t.logprob}, {"bytes", token_bytes(t.text)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_logprobs(const std::vector<TokenLogprob>& tokens, const Tokenizer& tokenizer, std::int64_t offset) {
  json text = json::array(), logprob = json::array(), top = json::array(), offsets = json::array();
  for (const TokenLogprob& t : tokens) {
    text.push_back(valid_utf8(t.text));
    offsets.push_back(offset + t.offset);
    if (std::isnan(t.logprob)) {  // a prompt's first token
      logprob.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    logprob.push_back(t.logprob);
    json most = json::object();
    for (const auto& [id, lp] : t.top) most[valid_utf8(tokenizer.decode({id}))] = lp;
    top.push_back(most);
  }
  return {{"tokens", text}, {"token_logprobs", logprob}, {"top_logprobs", top}, {"text_offset", offsets}};
}

std::string error_body(int status, const std::string& message, const std::string& param) {
  const char* type = status == 401 ? "authentication_error"
                     : status == 404 ? "not_found_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return json{{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)}, {"code", nullptr}}}}
      .dump();
}

Tensor parse_classify_request(const std::string& body, const ApiLimits& limits, const ModelRecipe& recipe) {
  json j = parse_object(body);
  std::vector<float> pixels;
  std::size_t count = 0;
  auto images = j.find("images");
  auto b64 = j.find("images_base64");
  if ((images == j.end()) == (b64 == j.end())) throw RequestError(400, "give either 'images' or 'images_base64'");
  const json& list = images != j.end() ? *images : *b64;
  const char* field = images != j.end() ? "images" : "images_base64";
  if (!list.is_array() || list.empty()) throw RequestError(400, fmt::format("'{}' must be a non-empty array", field), field);
  if (static_cast<std::int64_t>(list.size()) > limits.max_images)
    throw RequestError(413, fmt::format("{} images in one request; the limit is {}", list.size(), limits.max_images), field);
  for (const auto& image : list) {
    std::vector<float> p = images != j.end() ? pixels_of(image, count, recipe.image)
                                              : pixels_of_base64(image, count, recipe.image);
    pixels.insert(pixels.end(), p.begin(), p.end());
    ++count;
  }
  return images_from_pixels(pixels, recipe);
}

json classify_response(const std::string& model, const Tensor& probabilities, const ModelRecipe& recipe) {
  json predictions = json::array();
  const std::int64_t classes = probabilities.size(1);
  const std::vector<std::int64_t> labels = ops::argmax_rows(probabilities);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const float* row = probabilities.data<float>() + static_cast<std::int64_t>(i) * classes;
    json entry = {{"label", labels[i]}, {"probabilities", std::vector<float>(row, row + classes)}};
    entry["class"] = class_name(recipe, labels[i]);
    predictions.push_back(entry);
  }
  return {{"model", model}, {"predictions", predictions}};
}

}  // namespace weft::serve
