// LanguageModel: what every next-token model (GPT, LSTM, RNN) offers the LM trainer:
// forward from token ids [B, T] to logits [B, T, vocab], and generation.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/nn/module.h"

namespace weft {

class LanguageModel : public Module {
 public:
  virtual std::int64_t vocab() const = 0;
  // The most tokens forward() takes at once (generation feeds the last `context()` tokens).
  virtual std::int64_t context() const = 0;

  // The logits [T, vocab] after each of the last T = min(size, context()) of `tokens` (at
  // least one): forward over them, without gradients, in evaluation mode.
  Tensor window_logits(const std::vector<std::int32_t>& tokens);
  // The logits [vocab] of the token after `tokens`: window_logits' last row.
  Tensor next_token_logits(const std::vector<std::int32_t>& tokens);

  // Appends `count` tokens to `prompt`: greedy (temperature 0), or sampled from the softmax
  // at `temperature` among the `top_k` most likely (0: all).
  std::vector<std::int32_t> generate(std::vector<std::int32_t> prompt, std::int64_t count, double temperature,
                                     std::int64_t top_k, Rng& rng);
};

// The next token from one row of logits (the rule generate() uses).
std::int32_t sample_token(const std::vector<double>& logits, double temperature, std::int64_t top_k, Rng& rng);

}  // namespace weft
