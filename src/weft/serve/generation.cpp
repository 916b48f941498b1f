#include "weft/serve/generation.h"

#include <algorithm>

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
  const std::int32_t token = sampler_.next(logits, vocab);
  completion_.push_back(token);
  feed_.assign(1, token);
  if (token == tokenizer_.end_token()) {  // the model ended the text
    finish_reason_ = "stop";
    return release(true);
  }
  // The new token's text: what it adds after the previous one.
  const std::size_t before = raw_.size();
  if (previous_ < 0) {
    raw_ += tokenizer_.decode({token});
  } else {
    const std::string pair = tokenizer_.decode({previous_, token}), alone = tokenizer_.decode({previous_});
    raw_ += pair.substr(std::min(alone.size(), pair.size()));
  }
  previous_ = token;
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

}  // namespace weft::serve
