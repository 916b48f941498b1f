#include "weft/serve/batcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <iterator>
#include <limits>

#include "weft/serve/classify.h"
#include "weft/util/error.h"

namespace weft::serve {

bool Ticket::next(std::string& piece, std::chrono::milliseconds timeout, std::vector<TokenLogprob>* tokens) {
  std::unique_lock lock(mu_);
  if (timeout.count() > 0) {
    ++piece_waiters_;
    cv_.wait_for(lock, timeout, [&] { return !pieces_.empty() || finished_; });
    --piece_waiters_;
  }
  if (!pieces_.empty()) {
    piece = std::move(pieces_.front().first);
    if (tokens) tokens->insert(tokens->end(), pieces_.front().second.begin(), pieces_.front().second.end());
    pieces_.pop_front();
    return true;
  }
  piece.clear();
  return !finished_;
}

void Ticket::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return finished_; });
}

bool Ticket::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return finished_; });
}

void Ticket::cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
}

bool Ticket::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

void Ticket::push(std::string piece, bool finished, std::vector<TokenLogprob> tokens, bool announce_now) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    pieces_.emplace_back(std::move(piece), std::move(tokens));
    finished_ = finished_ || finished;
    wake = finished_ || piece_waiters_ > 0;  // (wait() and wait_for() wait for the end alone)
  }
  if (wake) cv_.notify_all();
  if (announce_now) announce();
}

namespace {
// The log-probabilities of a prompt's tokens (the first has none: NaN), with their texts and
// where each starts in the prompt's text, from the decoder's logits after every token.
std::vector<TokenLogprob> score_prompt(Decoder& decoder, const Tokenizer& tokenizer, const std::vector<std::int32_t>& ids,
                                       std::int64_t top) {
  std::vector<TokenLogprob> out;
  if (ids.empty()) return out;
  const Tensor logits = decoder.prompt_logits(ids);
  const std::int64_t V = decoder.vocab();
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    TokenLogprob lp;
    if (i == 0) {
      lp.token = ids[0];
      lp.logprob = std::numeric_limits<double>::quiet_NaN();
    } else {
      lp = token_logprob(logits.data<float>() + static_cast<std::int64_t>(i - 1) * V, V, ids[i], top);
    }
    lp.text = token_text(tokenizer, i == 0 ? -1 : ids[i - 1], ids[i]);
    lp.offset = static_cast<std::int64_t>(text.size());
    text += lp.text;
    out.push_back(std::move(lp));
  }
  return out;
}
}  // namespace

std::int64_t prefill_piece(std::int64_t remaining, std::int64_t limit) {
  return remaining - limit < kPanelRows ? remaining : limit;  // (no limit + kPanelRows: a limit near INT64_MAX)
}

std::int64_t cache_blocks_for(std::int64_t feed, std::int64_t max_tokens, std::int64_t context, std::int64_t block_positions) {
  const std::int64_t positions = std::min(context, std::min(feed, context) + std::min(max_tokens, context));  // (no overflow)
  return (positions + block_positions - 1) / block_positions;
}

LmBatcher::LmBatcher(Decoder& decoder, const Tokenizer& tokenizer, BatchOptions options, Metrics& metrics)
    : decoder_(decoder), tokenizer_(tokenizer), o_(options), metrics_(metrics) {
  block_bytes_ = decoder_.cache_block_positions() * decoder_.cache_bytes_per_token();
  if (o_.cache_limit_bytes > 0) {
    if (block_bytes_ <= 0) throw ConfigError("a key-value cache limit for a decoder without a cache");
    limit_blocks_ = o_.cache_limit_bytes / block_bytes_;
  }
  if (o_.preempt && limit_blocks_ > 0) {
    std::vector<std::vector<std::int32_t>> replay;
    if (!decoder_.restart(*decoder_.start(), replay))
      throw ConfigError("preemption by recomputation is not built for this decoder (it cannot rebuild a sequence's cache)");
  }
  thread_ = std::thread([this] { loop(); });
}

LmBatcher::~LmBatcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LmBatcher::submit(const std::shared_ptr<Ticket>& ticket) {
  {
    std::lock_guard lock(mu_);
    waiting_.push_back(ticket);
  }
  cv_.notify_all();
}

void LmBatcher::loop() {
  std::vector<Active> active;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !active.empty() || !preempted_.empty(); });
      if (stopping_) break;
      // An idle batcher waits a moment for company before it starts a batch.
      if (active.empty() && static_cast<std::int64_t>(waiting_.size()) < o_.max_batch && o_.max_wait_ms > 0) {
        cv_.wait_for(lock, std::chrono::duration<double, std::milli>(o_.max_wait_ms), [&] {
          return stopping_ || static_cast<std::int64_t>(waiting_.size()) >= o_.max_batch;
        });
        if (stopping_) break;
      }
      admit(active);
      if (active.empty()) continue;  // (requests refused)
    }
    step(active);
    metrics_.set("weft_running_sequences", static_cast<double>(active.size()));
    metrics_.set("weft_kv_cache_reserved_bytes", static_cast<double>(held_blocks(active) * block_bytes_));
  }
  for (auto& a : active) {
    a.ticket->error = "the server is shutting down";
    a.ticket->push("", true);
  }
  for (auto& a : preempted_) {
    a.ticket->error = "the server is shutting down";
    a.ticket->push("", true);
  }
  std::lock_guard lock(mu_);
  for (auto& t : waiting_) {
    t->error = "the server is shutting down";
    t->push("", true);
  }
}

std::int64_t LmBatcher::needed_blocks(const Active& a) const {
  auto fed = static_cast<std::int64_t>(a.generation->feed().size()) - a.prefilled;
  for (std::size_t k = a.replayed; k < a.replay.size(); ++k) fed += static_cast<std::int64_t>(a.replay[k].size());
  return decoder_.cache_blocks_after(*a.state, fed);
}

std::int64_t LmBatcher::held_blocks(const std::vector<Active>& active) const {
  std::int64_t held = 0;
  for (const Active& a : active) held += o_.preempt && !a.resumed ? needed_blocks(a) : a.cache_blocks;
  return held;
}

void LmBatcher::finish(Active& a) {
  Ticket& t = *a.ticket;
  t.text = a.generation->text();
  t.finish_reason = a.generation->done() ? a.generation->finish_reason() : "abort";
  t.completion_tokens = static_cast<std::int64_t>(a.generation->completion().size());
  t.logprobs = a.generation->logprobs();
  t.cumulative_logprob = a.generation->cumulative_logprob();
}

void LmBatcher::preempt_over_limit(std::vector<Active>& active) {
  if (!o_.preempt || limit_blocks_ == 0) return;
  for (std::int64_t held = held_blocks(active); held > limit_blocks_;) {
    // (a sequence back from preemption holds its whole length's reservation: never a victim)
    const auto last = std::max_element(active.begin(), active.end(), [](const Active& a, const Active& b) {
      return a.resumed != b.resumed ? a.resumed : a.ticket->submitted < b.ticket->submitted;
    });
    if (last == active.end() || last->resumed || active.size() == 1) break;
    held -= needed_blocks(*last);
    Active a = std::move(*last);
    active.erase(last);
    std::vector<std::vector<std::int32_t>> replay;
    std::unique_ptr<SequenceState> fresh = decoder_.restart(*a.state, replay);
    WEFT_CHECK(fresh != nullptr, "LmBatcher: preemption with a decoder that cannot restart");
    replay.insert(replay.end(), std::make_move_iterator(a.replay.begin() + static_cast<std::ptrdiff_t>(a.replayed)),
                  std::make_move_iterator(a.replay.end()));  // (what it had yet to feed again)
    a.state = std::move(fresh);  // (its blocks go back)
    a.replay = std::move(replay);
    a.replayed = 0;
    a.resumed = true;
    const auto at = std::upper_bound(preempted_.begin(), preempted_.end(), a.ticket->submitted,
                                     [](Clock::time_point t, const Active& b) { return t < b.ticket->submitted; });
    preempted_.insert(at, std::move(a));
    metrics_.add("weft_preemptions_total", 1);
  }
}

void LmBatcher::admit(std::vector<Active>& active) {
  std::int64_t held = held_blocks(active);
  // Preempted sequences first, in the order they came (a cancelled one leaves here).
  while (!preempted_.empty() && static_cast<std::int64_t>(active.size()) < o_.max_batch) {
    Active& a = preempted_.front();
    if (a.ticket->cancelled()) {
      finish(a);
      a.ticket->push("", true);
      preempted_.pop_front();
      continue;
    }
    if (held + a.cache_blocks > limit_blocks_) break;  // (back on its whole length's reservation)
    held += a.cache_blocks;
    active.push_back(std::move(a));
    preempted_.pop_front();
  }
  // Join at the token boundary, in order: a request the cache has no room for yet waits, and
  // those behind it with it (so that a long one is not passed over for ever).
  while (preempted_.empty() && !waiting_.empty() && static_cast<std::int64_t>(active.size()) < o_.max_batch) {
    std::shared_ptr<Ticket>& t = waiting_.front();
    // (its first feed: the prompt, or the start token for an empty one: Generation::feed)
    const std::int64_t feed = std::max<std::int64_t>(1, static_cast<std::int64_t>(t->prompt_tokens.size()));
    std::int64_t blocks = 0, joining = 0;  // the blocks it may come to hold; those it takes now
    if (block_bytes_ > 0 && !t->cancelled()) {  // (a cancelled request leaves before the step)
      blocks = cache_blocks_for(feed, t->options.max_tokens, decoder_.context(), decoder_.cache_block_positions());
      joining = o_.preempt ? cache_blocks_for(feed, 0, decoder_.context(), decoder_.cache_block_positions()) : blocks;
    }
    if (limit_blocks_ > 0 && blocks > limit_blocks_) {  // (a server refuses such requests before)
      t->error = fmt::format("the request may hold {} key-value cache blocks of {} bytes, more than the limit's {}", blocks,
                             block_bytes_, limit_blocks_);
      t->push("", true);
      waiting_.pop_front();
      continue;
    }
    if (limit_blocks_ > 0 && held + joining > limit_blocks_) break;
    held += joining;
    Active a;
    a.generation = std::make_unique<Generation>(tokenizer_, t->prompt, t->prompt_tokens, t->options);
    a.ticket = std::move(t);
    a.state = decoder_.start();
    a.cache_blocks = blocks;
    active.push_back(std::move(a));
    waiting_.pop_front();
  }
  metrics_.set("weft_queue_depth", static_cast<double>(waiting_.size() + preempted_.size()));
  metrics_.set("weft_running_sequences", static_cast<double>(active.size()));
  metrics_.set("weft_kv_cache_reserved_bytes", static_cast<double>(held * block_bytes_));
}

// One decoding step of every active sequence; the finished and the cancelled leave.
void LmBatcher::step(std::vector<Active>& active) {
  // A prompt whose tokens' logprobs are asked for is scored before its first step.
  for (auto& a : active) {
    if (a.scored || !a.ticket->options.prompt_logprobs) continue;
    a.scored = true;
    try {
      a.ticket->prompt_logprobs =
          score_prompt(decoder_, tokenizer_, a.ticket->prompt_tokens, std::max<std::int64_t>(a.ticket->options.top_logprobs, 0));
    } catch (const std::exception& e) {
      a.ticket->error = e.what();
      a.ticket->cancel();
    }
  }
  // A cancelled request, or one that asks for no tokens, leaves before the step.
  for (auto& a : active)
    if (a.ticket->cancelled() || a.generation->done()) {
      finish(a);
      a.ticket->push("", true);
    }
  active.erase(std::remove_if(active.begin(), active.end(),
                              [](const Active& a) { return a.ticket->cancelled() || a.generation->done(); }),
               active.end());
  preempt_over_limit(active);
  if (active.empty()) return;
  // What each sequence feeds: a preempted one its replay's next feed, a decoding one its last
  // token, a prompt the rest of it, or, under max_prefill_tokens, its next piece; pieces (and
  // replays) go in while the step's prompt tokens stay within the limit (the first always, so
  // that a prompt moves on every step).
  const bool pieces = o_.max_prefill_tokens > 0;  // (a decoder with a cache: the server checks)
  std::vector<SequenceState*> states;
  std::vector<std::vector<std::int32_t>> feeds;
  std::vector<std::size_t> fed;  // the sequences in this step, in order
  std::vector<bool> whole;       // ... whose feed ends in this step (their logits are a token's)
  std::int64_t prompt_tokens = 0;
  for (std::size_t i = 0; i < active.size(); ++i) {
    Active& a = active[i];
    const bool replaying = a.replayed < a.replay.size();
    const std::vector<std::int32_t>& feed = replaying ? a.replay[a.replayed] : a.generation->feed();
    const auto remaining = static_cast<std::int64_t>(feed.size()) - (replaying ? 0 : a.prefilled);
    std::int64_t n = remaining;
    if (pieces && remaining > 1) {
      if (!replaying) n = prefill_piece(remaining, o_.max_prefill_tokens);  // (a replay's feeds are its own)
      if (prompt_tokens > 0 && prompt_tokens + n > o_.max_prefill_tokens) continue;
      prompt_tokens += n;
    }
    const auto from = feed.end() - remaining;
    states.push_back(a.state.get());
    feeds.emplace_back(from, from + static_cast<std::ptrdiff_t>(n));
    fed.push_back(i);
    whole.push_back(!replaying && n == remaining);
  }
  Tensor logits;
  try {
    logits = decoder_.extend(states, feeds);
  } catch (const std::exception& e) {
    for (auto& a : active) {
      a.ticket->error = e.what();
      a.ticket->push("", true);
    }
    active.clear();
    return;
  }
  metrics_.observe("weft_batch_size", static_cast<double>(fed.size()), "kind=\"decode\"");
  metrics_.add("weft_generated_tokens_total", static_cast<double>(std::count(whole.begin(), whole.end(), true)));
  const auto now = Clock::now();
  std::vector<const Ticket*> pushed;  // (alive in `active` until after their announce)
  for (std::size_t k = 0; k < fed.size(); ++k) {
    Active& a = active[fed[k]];
    if (a.replayed < a.replay.size()) {  // a replay's feed: its logits were a token's already
      ++a.replayed;
      continue;
    }
    if (!whole[k]) {  // a prompt's piece: its logits are not a token's
      a.prefilled += static_cast<std::int64_t>(feeds[k].size());
      continue;
    }
    a.prefilled = 0;
    const auto i = static_cast<std::int64_t>(k);
    const std::size_t had = a.generation->logprobs().size();
    std::string piece = a.generation->accept(logits.data<float>() + i * decoder_.vocab(),
                                             decoder_.vocab());
    std::vector<TokenLogprob> tokens(a.generation->logprobs().begin() + static_cast<std::ptrdiff_t>(had),
                                     a.generation->logprobs().end());
    if (a.first_token) {
      a.first_token = false;
      metrics_.observe("weft_time_to_first_token_seconds",
                       std::chrono::duration<double>(now - a.ticket->submitted).count());
    }
    if (a.generation->done()) finish(a);
    a.ticket->push(std::move(piece), a.generation->done(), std::move(tokens), false);
    pushed.push_back(a.ticket.get());
  }
  for (const Ticket* t : pushed) t->announce();  // the streams' wakes together, after the step's pieces
  active.erase(std::remove_if(active.begin(), active.end(), [](const Active& a) { return a.generation->done(); }),
               active.end());
}

ImageBatcher::ImageBatcher(Module& model, BatchOptions options, Metrics& metrics)
    : model_(model), o_(options), metrics_(metrics) {
  thread_ = std::thread([this] { loop(); });
}

ImageBatcher::~ImageBatcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Tensor ImageBatcher::classify(const Tensor& images) {
  auto job = std::make_shared<Job>();
  job->images = images;
  std::unique_lock lock(mu_);
  waiting_.push_back(job);
  cv_.notify_all();
  done_cv_.wait(lock, [&] { return job->done; });
  if (!job->error.empty()) throw Error(job->error);
  return job->probabilities;
}

void ImageBatcher::loop() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> batch;
    std::int64_t images = 0;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
      if (stopping_) break;
      auto count = [&] {
        std::int64_t n = 0;
        for (auto& j : waiting_) n += j->images.size(0);
        return n;
      };
      if (count() < o_.max_batch && o_.max_wait_ms > 0)
        cv_.wait_for(lock, std::chrono::duration<double, std::milli>(o_.max_wait_ms),
                     [&] { return stopping_ || count() >= o_.max_batch; });
      // Whole requests, up to max_batch images (a larger request runs alone).
      while (!waiting_.empty() && (batch.empty() || images + waiting_.front()->images.size(0) <= o_.max_batch)) {
        images += waiting_.front()->images.size(0);
        batch.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      metrics_.set("weft_queue_depth", static_cast<double>(waiting_.size()));
    }
    Shape shape = batch.front()->images.shape();  // every request's images are the model's size
    shape[0] = images;
    Tensor all = Tensor::empty(shape);
    std::int64_t at = 0;
    for (auto& j : batch) {
      const std::int64_t n = j->images.numel();
      std::copy(j->images.data<float>(), j->images.data<float>() + n, all.data<float>() + at);
      at += n;
    }
    std::string error;
    Tensor p;
    try {
      p = class_probabilities(model_, all);
    } catch (const std::exception& e) {
      error = e.what();
    }
    metrics_.observe("weft_batch_size", static_cast<double>(images), "kind=\"images\"");
    std::lock_guard lock(mu_);
    std::int64_t row = 0;
    for (auto& j : batch) {
      const std::int64_t n = j->images.size(0);
      if (error.empty()) j->probabilities = p.slice(0, row, row + n).contiguous();
      j->error = error;
      j->done = true;
      row += n;
    }
    done_cv_.notify_all();
  }
  std::lock_guard lock(mu_);
  for (auto& j : waiting_) {
    j->error = "the server is shutting down";
    j->done = true;
  }
  done_cv_.notify_all();
}

}  // namespace weft::serve
