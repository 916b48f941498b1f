// One request's text generation, step by step: the prompt's tokens, the sampler, the text
// so far, and when to stop (max_tokens, a stop sequence, which is not part of the text, or the
// tokenizer's end-of-text token, which is not either).
// The decoder that computes the logits is outside (decoder.h): a batcher steps many
// Generations at once, `generate` steps one.
//
// The text handed out is valid UTF-8 and final: a stream never takes back what it sent, so
// accept() holds back the bytes that could still begin a stop sequence or complete a
// multi-byte character, and finish() releases them.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weft/data/text.h"
#include "weft/serve/decoder.h"
#include "weft/serve/sampling.h"

namespace weft::serve {

// How long the thread pool's threads pause for the next run in a decoding process (weft serve,
// weft generate: tensor/thread_pool.h's set_pool_pause): a step's products are shorter than a
// sleeping thread's wake-up (bench/README.md, session 41).
inline constexpr std::chrono::microseconds kDecodingPoolPause{100};

struct GenerationOptions {
  std::int64_t max_tokens = 16;
  SamplingOptions sampling;
  std::vector<std::string> stop;  // stop sequences (empty ones are ignored)
  bool keep_logits = false;       // generate(): return each step's logits
  // Before sampling (OpenAI's logit_bias, presence and frequency penalties): a token's logit
  // plus its bias, less presence_penalty if it was generated before and frequency_penalty
  // times how often.
  std::vector<std::pair<std::int32_t, double>> logit_bias;
  double presence_penalty = 0, frequency_penalty = 0;
  // Each chosen token's log-probability (and that of the `top_logprobs` most likely) under the
  // model's own distribution (its logits before the bias and penalties, at temperature 1);
  // -1: none kept. `rank` keeps only their sum (best_of).
  std::int64_t top_logprobs = -1;
  bool rank = false;
  // The prompt's tokens' log-probabilities too (completions' echo with logprobs): each
  // token's under the logits after the tokens before it; the first has none (NaN).
  bool prompt_logprobs = false;
};

// A chosen token: its text (the bytes it added), where that text starts in the completion,
// its log-probability, and the most likely tokens' (id and log-probability, most likely first).
struct TokenLogprob {
  std::int32_t token = 0;
  std::string text;
  std::int64_t offset = 0;
  double logprob = 0;
  std::vector<std::pair<std::int32_t, double>> top;
};

class Generation {
 public:
  Generation(const Tokenizer& tokenizer, const std::string& prompt, const GenerationOptions& options);
  // With the prompt already encoded by `tokenizer` (a server counted its tokens).
  Generation(const Tokenizer& tokenizer, const std::string& prompt, std::vector<std::int32_t> prompt_tokens,
             const GenerationOptions& options);

  // The tokens to feed the decoder next: the prompt first (the tokenizer's start token when it
  // is empty), then the last chosen token.
  const std::vector<std::int32_t>& feed() const { return feed_; }
  // Chooses the next token from its logits; returns the text that became final (may be "").
  std::string accept(const float* logits, std::int64_t vocab);
  bool done() const { return !finish_reason_.empty(); }
  const std::string& finish_reason() const { return finish_reason_; }  // "stop" | "length"
  const std::string& text() const { return text_; }  // the final text so far
  const std::vector<std::int32_t>& completion() const { return completion_; }
  std::int64_t prompt_tokens() const { return prompt_tokens_; }
  // With top_logprobs >= 0: every chosen token's (TokenLogprob); with it or rank: their sum.
  const std::vector<TokenLogprob>& logprobs() const { return logprobs_; }
  double cumulative_logprob() const { return cumulative_logprob_; }

 private:
  std::string release(bool all);

  const Tokenizer& tokenizer_;
  GenerationOptions o_;
  Sampler sampler_;
  std::vector<std::int32_t> feed_, completion_;
  std::int64_t prompt_tokens_ = 0;
  std::size_t longest_stop_ = 0;
  std::int32_t previous_ = -1;  // the token before the next one (for the tokenizer's spacing)
  std::string raw_;             // the decoded completion, stop sequences not yet cut
  std::size_t released_ = 0;    // bytes of raw_ already turned into text_
  std::string text_, finish_reason_;
  std::vector<float> adjusted_;                 // the logits after the bias and penalties
  std::map<std::int32_t, std::int64_t> counts_;  // generated tokens (the penalties)
  std::vector<TokenLogprob> logprobs_;
  double cumulative_logprob_ = 0;
};

// The text `token` adds after `previous` (-1: none), as the tokenizer spaces the pair.
std::string token_text(const Tokenizer& tokenizer, std::int32_t previous, std::int32_t token);

// The log-probability of `token` under logits (log softmax, in double) and the `top` most
// likely tokens' (most likely first; ties: the lower id); text and offset left empty.
TokenLogprob token_logprob(const float* logits, std::int64_t vocab, std::int32_t token, std::int64_t top);

struct GenerationResult {
  std::string text, finish_reason;
  std::vector<std::int32_t> tokens;
  std::int64_t prompt_tokens = 0;
  std::vector<float> logits;  // with keep_logits: [steps][vocab], the logits each token was chosen from
};

// Generates one completion with its own sequence state (from the prompt's tokens when the
// caller has them already).
GenerationResult generate(Decoder& decoder, const Tokenizer& tokenizer, const std::string& prompt,
                          const GenerationOptions& options);
GenerationResult generate(Decoder& decoder, const Tokenizer& tokenizer, const std::string& prompt,
                          std::vector<std::int32_t> prompt_tokens, const GenerationOptions& options);

// `prompt` continued by `count` tokens through the model's decoder (make_decoder: a GPT's
// key-value cache, one row through the blocks per token), each drawn from the logits by
// LanguageModel::generate's rule (sample_token, from `rng`); returns the prompt and the
// continuation. LanguageModel::generate runs the forward over the whole window for every
// token (at GPT-2 small's size 100 tokens took 37 s on 2 cores, 5 s through the cache:
// bench/README.md). Past the context the window slides by half (slide_window), not by one
// token. weft train's closing sample.
std::vector<std::int32_t> continue_tokens(LanguageModel& model, std::vector<std::int32_t> prompt, std::int64_t count,
                                          double temperature, std::int64_t top_k, Rng& rng);

}  // namespace weft::serve
