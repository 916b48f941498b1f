#include "weft/nn/language_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "weft/autograd/functions.h"
#include "weft/util/error.h"

namespace weft {

std::int32_t sample_token(const std::vector<double>& l, double temperature, std::int64_t top_k, Rng& rng) {
  if (temperature <= 0) return static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  std::vector<std::int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)]; });
  const std::size_t k = top_k > 0 ? std::min<std::size_t>(order.size(), static_cast<std::size_t>(top_k)) : order.size();
  const double m = l[static_cast<size_t>(order[0])];
  double total = 0;
  std::vector<double> w(k);
  for (std::size_t i = 0; i < k; ++i) total += (w[i] = std::exp((l[static_cast<size_t>(order[i])] - m) / temperature));
  double u = rng.uniform() * total;
  std::size_t pick = 0;
  while (pick + 1 < k && u > w[pick]) u -= w[pick++];
  return order[pick];
}

Tensor LanguageModel::window_logits(const std::vector<std::int32_t>& tokens) {
  WEFT_CHECK(!tokens.empty(), "window_logits: no tokens");
  NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  const std::int64_t T = std::min<std::int64_t>(static_cast<std::int64_t>(tokens.size()), context());
  Tensor ids = Tensor::empty({1, T});
  for (std::int64_t t = 0; t < T; ++t) ids.set({0, t}, tokens[tokens.size() - static_cast<size_t>(T) + static_cast<size_t>(t)]);
  Tensor logits = forward(Var(ids)).value().select(0, 0).contiguous();
  train(was_training);
  return logits;
}

Tensor LanguageModel::next_token_logits(const std::vector<std::int32_t>& tokens) {
  const Tensor all = window_logits(tokens);
  return all.select(0, all.size(0) - 1).contiguous();
}

std::vector<std::int32_t> LanguageModel::generate(std::vector<std::int32_t> prompt, std::int64_t count,
                                                  double temperature, std::int64_t top_k, Rng& rng) {
  if (prompt.empty()) prompt.push_back(0);
  for (std::int64_t n = 0; n < count; ++n)
    prompt.push_back(sample_token(next_token_logits(prompt).to_vector(), temperature, top_k, rng));
  return prompt;
}

}  // namespace weft
