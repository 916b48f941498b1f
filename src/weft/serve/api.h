// The HTTP API's requests and responses as JSON, apart from the HTTP server: OpenAI's
// completions shape (POST /v1/completions, streamed as server-sent events) and weft's image
// classification (POST /v1/classify). Parsing checks every field a client sends, its type
// and its range, and throws RequestError with the HTTP status and a one-line reason.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/data/text.h"
#include "weft/nn/model_recipe.h"

#include "weft/serve/generation.h"
#include "weft/tensor/tensor.h"

namespace weft::serve {

class RequestError : public std::runtime_error {
 public:
  RequestError(int http_status, const std::string& message, std::string field = "")
      : std::runtime_error(message), status(http_status), param(std::move(field)) {}
  int status;
  std::string param;  // the field at fault, when one is
};

struct ApiLimits {
  std::string model;                 // the served model's name (requests naming another get 404)
  std::int64_t max_tokens = 1024;    // the most max_tokens a request may ask for
  std::int64_t max_images = 1024;    // images in one classify request
  std::int64_t vocab = 0;            // token ids in prompts and logit_bias must be below it (0: none taken)
};

// The most prompts, choices (n, best_of) and sequences (prompts x best_of) in one request.
inline constexpr std::int64_t kMaxPrompts = 16, kMaxChoices = 16, kMaxSequences = 64;

// A prompt as text, or as the token ids a client gave (`text` then their decoding).
struct Prompt {
  std::string text;
  std::vector<std::int32_t> tokens;
  bool as_tokens = false;
};

struct CompletionRequest {
  std::vector<Prompt> prompts;  // completions: 1 to kMaxPrompts; chat: set from the conversation
  GenerationOptions options;    // (options.top_logprobs: the logprobs asked for, -1 none)
  std::int64_t n = 1;           // choices per prompt
  std::int64_t best_of = 1;     // sequences generated per prompt (>= n), the n most likely returned
  bool echo = false;            // completions: the prompt before the text (with logprobs, its tokens' too)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// One choice of a response: its index, text and finish reason ("" in a stream's middle), and
// its logprobs block (null when none was asked for).
struct Choice {
  std::int64_t index = 0;
  std::string text, finish_reason;
  nlohmann::json logprobs;
};

// A chat completions body (POST /v1/chat/completions): the completion's fields (max_tokens
// or max_completion_tokens, default the server's limit) and the conversation, each message
// {"role": system | developer | user | assistant, "content": a string or text parts}, kept
// as {"role", "content"} for the chat template (developer as system). Tools and response
// formats are refused by name.
struct ChatRequest : CompletionRequest {
  nlohmann::json messages;
};
ChatRequest parse_chat_request(const std::string& body, const ApiLimits& limits, std::uint64_t default_seed);
// {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content"}}], "usage"}.
nlohmann::json chat_response(const std::string& id, std::int64_t created, const std::string& model,
                             const std::vector<Choice>& choices, std::int64_t prompt_tokens,
                             std::int64_t completion_tokens);
// A stream's chunk: {"object": "chat.completion.chunk", "choices": [{"delta": {...}}]}; the
// first of a choice carries the role.
nlohmann::json chat_chunk(const std::string& id, std::int64_t created, const std::string& model, const Choice& choice,
                          bool first);
nlohmann::json chat_chunk(const std::string& id, std::int64_t created, const std::string& model, const std::string& text,
                          const std::string& finish_reason, bool first);
// Logprobs blocks of chosen tokens: a chat choice's {"content": [{"token", "logprob", "bytes",
// "top_logprobs"}]}, a completion choice's {"tokens", "token_logprobs", "top_logprobs",
// "text_offset"} (offsets from `offset`; a token without a log-probability, NaN: a prompt's
// first, null). Token texts are made valid UTF-8; "bytes" has their bytes.
nlohmann::json chat_logprobs(const std::vector<TokenLogprob>& tokens, const Tokenizer& tokenizer);
nlohmann::json completion_logprobs(const std::vector<TokenLogprob>& tokens, const Tokenizer& tokenizer,
                                   std::int64_t offset);

// Parses a completions body; a request without a seed gets `default_seed`. Prompts given as
// token ids are decoded by `tokenizer` (null: refused).
CompletionRequest parse_completion_request(const std::string& body, const ApiLimits& limits,
                                           std::uint64_t default_seed, const Tokenizer* tokenizer = nullptr);
// {"id", "object": "text_completion", "created", "model", "choices": [...], "usage"}.
nlohmann::json completion_response(const std::string& id, std::int64_t created, const std::string& model,
                                   const std::vector<Choice>& choices, std::int64_t prompt_tokens,
                                   std::int64_t completion_tokens);
// One server-sent event's data of a stream: a text delta, and the finish reason at the end.
nlohmann::json completion_chunk(const std::string& id, std::int64_t created, const std::string& model,
                                const Choice& choice);
nlohmann::json completion_chunk(const std::string& id, std::int64_t created, const std::string& model,
                                const std::string& text, const std::string& finish_reason);
// {"prompt_tokens", "completion_tokens", "total_tokens"}: a response's (or a stream's last event's) usage.
nlohmann::json usage_of(std::int64_t prompt_tokens, std::int64_t completion_tokens);
// {"error": {"message", "type", "param", "code"}}: OpenAI's error shape.
std::string error_body(int status, const std::string& message, const std::string& param = "");

// Normalized images [N, 1, 28, 28] from {"images": [[784 values] | [[28 rows of 28]], ...]}
// or {"images_base64": ["<784 bytes in base64>", ...]}, pixel values 0-255.
// The images of a /v1/classify request, for a model of `recipe`'s input and normalization.
Tensor parse_classify_request(const std::string& body, const ApiLimits& limits, const ModelRecipe& recipe);
nlohmann::json classify_response(const std::string& model, const Tensor& probabilities, const ModelRecipe& recipe);

}  // namespace weft::serve
