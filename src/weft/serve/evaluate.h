// A language model's validation loss through its decoder (so through the weights the
// decoder holds: float32, bf16 or int8): windows of `context` tokens spread evenly over the
// last tenth of a corpus (the split training validates on), fed token by token, all windows
// decoded together; the mean next-token cross-entropy in nats per token. With the same
// number of windows as training's validation (--eval-batches x --batch), the float32 figure
// is training's val_loss.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/data/text.h"
#include "weft/serve/decoder.h"

namespace weft::serve {

struct LossReport {
  double loss = 0;          // nats per token
  std::int64_t tokens = 0;  // predictions scored
};

inline constexpr std::int64_t kMaxWindows = 4096;  // each window holds a sequence's cache

// The validation tokens of the corpus at `path` (the last 10% of its tokens, as training
// splits them), its text and tokens within `memory_budget` bytes (0: none; load_corpus,
// encode_corpus).
std::vector<std::int32_t> validation_tokens(const std::string& path, const Tokenizer& tokenizer, std::size_t memory_budget);
// Throws ConfigError for a number of windows outside [1, kMaxWindows] or beyond the text's.
// `logits` (when given) receives every scored row, position-major: [context][windows][vocab].
LossReport next_token_loss(Decoder& decoder, const std::vector<std::int32_t>& tokens, std::int64_t windows,
                           std::vector<float>* logits = nullptr);

}  // namespace weft::serve
