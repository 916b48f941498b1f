#include "weft/serve/api.h"

#include <fmt/format.h>

#include <cmath>

#include "weft/serve/classify.h"
#include "weft/tensor/ops.h"

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

// Fields of the OpenAI API this server does not implement: accepted only at their defaults.
void refuse_unsupported(const json& j) {
  auto at_default = [&](const char* name, const json& value) {
    auto it = j.find(name);
    if (it != j.end() && !it->is_null() && *it != value)
      throw RequestError(400, fmt::format("'{}' is not supported (only {})", name, value.dump()), name);
  };
  at_default("n", 1);
  at_default("best_of", 1);
  at_default("echo", false);
  at_default("presence_penalty", 0);
  at_default("frequency_penalty", 0);
  if (j.contains("logprobs") && !j["logprobs"].is_null())
    throw RequestError(400, "'logprobs' is not supported", "logprobs");
  if (j.contains("suffix") && !j["suffix"].is_null()) throw RequestError(400, "'suffix' is not supported", "suffix");
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
  refuse_unsupported(j);
  r.options.max_tokens = integer_field(j, "max_tokens", default_max_tokens, 0, limits.max_tokens);
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

CompletionRequest parse_completion_request(const std::string& body, const ApiLimits& limits,
                                           std::uint64_t default_seed) {
  json j = parse_object(body);
  CompletionRequest r;
  parse_generation_fields(j, limits, default_seed, r, 16);
  auto p = j.find("prompt");
  if (p == j.end()) throw RequestError(400, "'prompt' is required", "prompt");
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) r.prompt = (*p)[0].get<std::string>();
  else if (p->is_string()) r.prompt = p->get<std::string>();
  else throw RequestError(400, "'prompt' must be a string (or an array of one string)", "prompt");
  return r;
}

ChatRequest parse_chat_request(const std::string& body, const ApiLimits& limits, std::uint64_t default_seed) {
  json j = parse_object(body);
  ChatRequest r;
  if (j.contains("max_completion_tokens") && !j.contains("max_tokens")) j["max_tokens"] = j["max_completion_tokens"];
  j.erase("max_completion_tokens");
  parse_generation_fields(j, limits, default_seed, r, limits.max_tokens);
  for (const char* unsupported : {"tools", "tool_choice", "functions", "function_call", "response_format"})
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

json chat_response(const std::string& id, std::int64_t created, const std::string& model, const std::string& text,
                   const std::string& finish_reason, std::int64_t prompt_tokens, std::int64_t completion_tokens) {
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", text}}},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_reason}}})},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}}}};
}

json chat_chunk(const std::string& id, std::int64_t created, const std::string& model, const std::string& text,
                const std::string& finish_reason, bool first) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!text.empty() || first) delta["content"] = text;
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"delta", delta},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}}})}};
}

json completion_response(const std::string& id, std::int64_t created, const std::string& model,
                         const std::string& text, const std::string& finish_reason, std::int64_t prompt_tokens,
                         std::int64_t completion_tokens) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}})},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}}}};
}

json completion_chunk(const std::string& id, std::int64_t created, const std::string& model, const std::string& text,
                      const std::string& finish_reason) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices",
           json::array({{{"text", text},
                         {"index", 0},
                         {"logprobs", nullptr},
                         {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}}})}};
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
