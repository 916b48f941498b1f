#include "weft/serve/generation.h"

#include <algorithm>
#include <cmath>

#include "weft/util/utf8.h"

namespace weft::serve {

Generation::Generation(const Tokenizer& tokenizer, const std::string& prompt, const GenerationOptions& options)
    : Generation(tokenizer, prompt, tokenizer.encode(prompt), options) {}

Generation::Generation(const Tokenizer& tokenizer, const std::string& prompt, std::vector<std::int32_t> prompt_tokens,
                       const GenerationOptions& options)
    : tokenizer_(tokenizer), o_(options), sampler_(options.sampling), feed_(std::move(prompt_tokens)) {
  o_.stop.erase(std::remove(o_.stop.begin(), o_.stop.end(), std::string()), o_.stop.end());
  for (const auto& s : o_.stop) longest_stop_ = std::max(longest_stop_, s.size());
  prompt_tokens_ = static_cast<std::int64_t>(feed_.size());
  if (feed_.empty()) feed_.push_back(tokenizer.start_token());
  previous_ = prompt.empty() ? -1 : feed_.back();
  if (o_.max_tokens <= 0) finish_reason_ = "length";
}

std::string Generation::accept(const float* logits, std::int64_t vocab) {
  if (done()) return {};
  const float* chosen_from = logits;
  if (!o_.logit_bias.empty() || !counts_.empty()) {
    adjusted_.assign(logits, logits + vocab);
    for (const auto& [t, bias] : o_.logit_bias)
      if (t >= 0 && t < vocab) adjusted_[static_cast<std::size_t>(t)] += static_cast<float>(bias);
    for (const auto& [t, n] : counts_)
      adjusted_[static_cast<std::size_t>(t)] -=
          static_cast<float>(o_.presence_penalty + o_.frequency_penalty * static_cast<double>(n));
    chosen_from = adjusted_.data();
  }
  const std::int32_t token = sampler_.next(chosen_from, vocab);
  if (o_.presence_penalty != 0 || o_.frequency_penalty != 0) ++counts_[token];
  TokenLogprob lp;
  if (o_.top_logprobs >= 0 || o_.rank) {
    lp = token_logprob(logits, vocab, token, std::max<std::int64_t>(o_.top_logprobs, 0));
    cumulative_logprob_ += lp.logprob;
  }
  completion_.push_back(token);
  feed_.assign(1, token);
  if (token == tokenizer_.end_token()) {  // the model ended the text
    finish_reason_ = "stop";
    if (o_.top_logprobs >= 0) {
      lp.offset = static_cast<std::int64_t>(raw_.size());
      logprobs_.push_back(std::move(lp));
    }
    return release(true);
  }
  // The new token's text: what it adds after the previous one.
  const std::size_t before = raw_.size();
  raw_ += token_text(tokenizer_, previous_, token);
  previous_ = token;
  if (o_.top_logprobs >= 0) {
    lp.offset = static_cast<std::int64_t>(before);
    lp.text = raw_.substr(before);
    logprobs_.push_back(std::move(lp));
  }
  // A stop sequence ending in the new bytes ends the text where it starts.
  const std::size_t from = before >= longest_stop_ ? before - longest_stop_ + 1 : 0;
  std::size_t cut = std::string::npos;
  for (const auto& s : o_.stop) cut = std::min(cut, raw_.find(s, std::max(from, released_)));
  if (cut != std::string::npos) {
    raw_.resize(cut);
    finish_reason_ = "stop";
  } else if (static_cast<std::int64_t>(completion_.size()) >= o_.max_tokens) {
    finish_reason_ = "length";
  }
  return release(done());
}

std::string Generation::release(bool all) {
  std::size_t end = raw_.size();
  if (!all) {
    // Hold back a suffix that begins some stop sequence.
    for (const auto& s : o_.stop)
      for (std::size_t n = std::min(s.size() - 1, raw_.size() - released_); n > 0; --n)
        if (raw_.compare(raw_.size() - n, n, s, 0, n) == 0) {
          end = std::min(end, raw_.size() - n);
          break;
        }
    end = released_ + utf8_complete_prefix(std::string_view(raw_).substr(released_, end - released_));
  }
  std::string piece = valid_utf8(std::string_view(raw_).substr(released_, end - released_));
  released_ = end;
  text_ += piece;
  return piece;
}

std::string token_text(const Tokenizer& tokenizer, std::int32_t previous, std::int32_t token) {
  if (previous < 0) return tokenizer.decode({token});
  const std::string pair = tokenizer.decode({previous, token}), alone = tokenizer.decode({previous});
  return pair.substr(std::min(alone.size(), pair.size()));
}

TokenLogprob token_logprob(const float* logits, std::int64_t vocab, std::int32_t token, std::int64_t top) {
  double most = logits[0];
  for (std::int64_t i = 1; i < vocab; ++i) most = std::max(most, static_cast<double>(logits[i]));
  double total = 0;
  for (std::int64_t i = 0; i < vocab; ++i) total += std::exp(static_cast<double>(logits[i]) - most);
  const double lse = most + std::log(total);
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = static_cast<double>(logits[token]) - lse;
  if (top > 0) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(vocab));
    for (std::int64_t i = 0; i < vocab; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    const auto k = static_cast<std::ptrdiff_t>(std::min(top, vocab));
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](std::int32_t a, std::int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (std::ptrdiff_t i = 0; i < k; ++i) {
      const std::int32_t id = ids[static_cast<std::size_t>(i)];
      lp.top.emplace_back(id, static_cast<double>(logits[id]) - lse);
    }
  }
  return lp;
}

GenerationResult generate(Decoder& decoder, const Tokenizer& tokenizer, const std::string& prompt,
                          const GenerationOptions& options) {
  return generate(decoder, tokenizer, prompt, tokenizer.encode(prompt), options);
}

GenerationResult generate(Decoder& decoder, const Tokenizer& tokenizer, const std::string& prompt,
                          std::vector<std::int32_t> prompt_tokens, const GenerationOptions& options) {
  Generation g(tokenizer, prompt, std::move(prompt_tokens), options);
  std::unique_ptr<SequenceState> state = decoder.start();
  std::vector<float> kept;
  while (!g.done()) {
    Tensor logits = decoder.extend({state.get()}, {g.feed()});
    if (options.keep_logits) kept.insert(kept.end(), logits.data<float>(), logits.data<float>() + decoder.vocab());
    g.accept(logits.data<float>(), decoder.vocab());
  }
  return {g.text(), g.finish_reason(), g.completion(), g.prompt_tokens(), std::move(kept)};
}

std::vector<std::int32_t> continue_tokens(LanguageModel& model, std::vector<std::int32_t> prompt, std::int64_t count,
                                          double temperature, std::int64_t top_k, Rng& rng) {
  if (prompt.empty()) prompt.push_back(0);  // (as LanguageModel::generate starts)
  if (count <= 0) return prompt;
  const std::unique_ptr<Decoder> decoder = make_decoder(model);
  const std::unique_ptr<SequenceState> state = decoder->start();
  std::vector<std::int32_t> feed = prompt;
  std::vector<double> row(static_cast<std::size_t>(decoder->vocab()));
  for (std::int64_t n = 0; n < count; ++n) {
    const Tensor logits = decoder->extend({state.get()}, {feed});
    const float* p = logits.data<float>();
    std::copy(p, p + decoder->vocab(), row.begin());
    prompt.push_back(sample_token(row, temperature, top_k, rng));
    feed = {prompt.back()};
  }
  return prompt;
}

}  // namespace weft::serve
