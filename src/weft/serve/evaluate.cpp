#include "weft/serve/evaluate.h"

#include <cmath>
#include <memory>

#include "weft/util/error.h"

namespace weft::serve {

std::vector<std::int32_t> validation_tokens(const std::string& path, const Tokenizer& tokenizer, std::size_t memory_budget) {
  const std::string text = load_corpus(path, memory_budget);
  return split_tokens(encode_corpus(tokenizer, text, ids_budget(memory_budget, text.size()), path)).validation;
}

LossReport next_token_loss(Decoder& decoder, const std::vector<std::int32_t>& tokens, std::int64_t windows,
                           std::vector<float>* logits_out) {
  const std::int64_t T = decoder.context(), V = decoder.vocab();
  const std::int64_t span = static_cast<std::int64_t>(tokens.size()) - T - 1;
  if (span < 0) throw DataError("too little text for a context of " + std::to_string(T) + " tokens");
  if (windows < 1 || windows > kMaxWindows)
    throw ConfigError("--windows " + std::to_string(windows) + " is not in [1, " + std::to_string(kMaxWindows) + "]");
  if (windows > span + 1)
    throw ConfigError("--windows " + std::to_string(windows) + ": the validation text holds only " +
                      std::to_string(span + 1) + " windows of " + std::to_string(T) + " tokens");
  const std::vector<std::int64_t> starts = spread_windows(static_cast<std::int64_t>(tokens.size()), T, windows);
  std::vector<std::unique_ptr<SequenceState>> states;
  std::vector<SequenceState*> views;
  for (std::int64_t i = 0; i < windows; ++i) {
    states.push_back(decoder.start());
    views.push_back(states.back().get());
  }
  double total = 0;
  std::vector<std::vector<std::int32_t>> feed(static_cast<std::size_t>(windows), std::vector<std::int32_t>(1));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < windows; ++i)
      feed[static_cast<std::size_t>(i)][0] = tokens[static_cast<std::size_t>(starts[static_cast<std::size_t>(i)] + t)];
    Tensor logits = decoder.extend(views, feed);
    if (logits_out) logits_out->insert(logits_out->end(), logits.data<float>(), logits.data<float>() + logits.numel());
    for (std::int64_t i = 0; i < windows; ++i) {
      const float* row = logits.data<float>() + i * V;
      double top = row[0];
      for (std::int64_t v = 1; v < V; ++v) top = std::max<double>(top, row[v]);
      double sum = 0;
      for (std::int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - top);
      const std::int32_t next = tokens[static_cast<std::size_t>(starts[static_cast<std::size_t>(i)] + t + 1)];
      total += std::log(sum) + top - row[next];
    }
  }
  return {total / static_cast<double>(windows * T), windows * T};
}

}  // namespace weft::serve
