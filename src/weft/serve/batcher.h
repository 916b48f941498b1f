// Batching of requests on one model replica.
//
//   LmBatcher     continuous batching (seed 003 chapter 3's data parallelism inside one
//                 replica): one thread runs decoding steps; at every token boundary waiting
//                 requests join the running batch (their prompts prefilled in the same step)
//                 and finished ones leave, up to max_batch sequences. Each request keeps its
//                 own sampler and cache, so it gets exactly the tokens it would get alone.
//   ImageBatcher  dynamic batching: the first waiting request starts a batch that collects
//                 others for up to max_wait, up to max_batch images, then runs one forward.
//
// Requests are Tickets: the HTTP threads wait on them, the batching thread fills them; a
// cancelled ticket (the client went away, or the server stops) leaves the batch at the next
// step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/data/text.h"
#include "weft/serve/decoder.h"
#include "weft/serve/generation.h"
#include "weft/serve/metrics.h"

namespace weft::serve {

struct BatchOptions {
  std::int64_t max_batch = 16;   // sequences decoded together / images per forward
  double max_wait_ms = 2;        // how long a new batch waits for company
  // Chunked prefill (a decoder with a cache: through a window's forward each piece would
  // recompute the window): the prompt tokens one step feeds, a longer prompt going in pieces
  // (prefill_piece) over steps that decode the other sequences' next tokens too, so that a
  // long prompt holds them a piece's time, not its whole prefill's, and a new request starts
  // sooner; the running streams' steps take longer. 0: prompts whole (weft serve's default is
  // 2,048: ServeOptions).
  std::int64_t max_prefill_tokens = 0;
  // The key-value cache's memory (a decoder with a cache), as text generation servers bound
  // theirs (TGI's token budget, vLLM's cache blocks): a request joins the batch only while the
  // blocks every running sequence may come to hold (cache_blocks_for), its own included, fit
  // in this many bytes; the others wait in order. So no mix of requests, however long their
  // prompts and max_tokens, makes the process hold more, and (without `preempt`) a sequence
  // never waits for a block or is preempted. Its tokens are those it gets alone. 0: no limit.
  std::int64_t cache_limit_bytes = 0;
  // Under a cache limit, preemption by recomputation (vLLM's): a request joins while the blocks
  // the running sequences hold after their next step, its prompt's included, fit; when a step
  // would need more, the sequences that came last leave the batch, their caches given back,
  // and wait ahead of every new request; each comes back once the cache of its whole length
  // fits (so none is preempted twice) and feeds its window again (Decoder::restart) before
  // its next token, which is the one it would have had. More requests share the cache than
  // under whole reservations; a preempted one waits and pays its window's prefill again.
  // Needs a decoder that can restart (a GPT's, in one process or split over ranks).
  bool preempt = false;
};

// The cache blocks of `block_positions` positions a sequence may come to hold: its feed (the
// prompt) and max_tokens more, at most the context (past it the window slides within the
// blocks it holds: slide_window).
std::int64_t cache_blocks_for(std::int64_t feed, std::int64_t max_tokens, std::int64_t context, std::int64_t block_positions);

// The tokens of a prompt's `remaining` ones the next piece feeds under a limit of `limit`
// (above 0): `limit`, or all of them when fewer than limit + kPanelRows remain, so that every
// piece of a prompt of kPanelRows tokens or more runs its attention in panels, whose logits
// do not depend on where the pieces begin (serve/decoder.h): a request's tokens
// are those of its whole prompt in one step, whatever the limit.
std::int64_t prefill_piece(std::int64_t remaining, std::int64_t limit);

using Clock = std::chrono::steady_clock;

class Ticket {
 public:
  Ticket(std::string prompt_text, std::vector<std::int32_t> tokens, GenerationOptions generation)
      : prompt(std::move(prompt_text)), prompt_tokens(std::move(tokens)), options(std::move(generation)) {}
  const std::string prompt;
  const std::vector<std::int32_t> prompt_tokens;  // the prompt, encoded
  const GenerationOptions options;
  const Clock::time_point submitted = Clock::now();

  // Waits up to `timeout` for more text (0: takes what is there, without waiting); false
  // once finished and every piece was taken.
  // A piece may be empty (a token that added no text yet). With `tokens`, the tokens the
  // piece came with (GenerationOptions::top_logprobs >= 0) are appended there.
  bool next(std::string& piece, std::chrono::milliseconds timeout, std::vector<TokenLogprob>* tokens = nullptr);
  // Waits until finished (the whole text).
  void wait();
  // Waits up to `timeout`; true once finished.
  bool wait_for(std::chrono::milliseconds timeout);
  // Ends the generation at the next decoding step (its client went away, or the server stops:
  // finish_reason "abort" with the text so far).
  void cancel();
  bool cancelled() const;
  // Called on the batcher's thread (and must not wait) when the ticket has something new: a
  // step's piece, once the step's every piece is pushed (one wake of a server's event loop
  // carries them all), and the end; so that a stream takes its pieces with next(.., 0) as
  // they come instead of a thread waiting on each. Set before the ticket is submitted.
  void on_push(std::function<void()> listener) { listener_ = std::move(listener); }

  // Valid once finished.
  std::string text, finish_reason, error;
  std::int64_t completion_tokens = 0;
  std::vector<TokenLogprob> logprobs;  // with top_logprobs >= 0
  double cumulative_logprob = 0;       // with top_logprobs >= 0 or rank
  // With options.prompt_logprobs: the prompt's tokens (GenerationOptions), set before the
  // first piece is pushed.
  std::vector<TokenLogprob> prompt_logprobs;

 private:
  friend class LmBatcher;
  // `announce`: the listener hears of it now (else the batcher calls announce() once the
  // step's every piece is pushed, so that one wake carries them all).
  void push(std::string piece, bool finished, std::vector<TokenLogprob> tokens = {}, bool announce = true);
  void announce() const {
    if (listener_) listener_();
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::vector<TokenLogprob>>> pieces_;
  bool finished_ = false, cancelled_ = false;
  int piece_waiters_ = 0;  // in next() with a timeout: woken by every piece, not only the end
  std::function<void()> listener_;
};

class LmBatcher {
 public:
  LmBatcher(Decoder& decoder, const Tokenizer& tokenizer, BatchOptions options, Metrics& metrics);
  ~LmBatcher();
  void submit(const std::shared_ptr<Ticket>& ticket);

 private:
  struct Active {
    std::shared_ptr<Ticket> ticket;
    std::unique_ptr<Generation> generation;
    std::unique_ptr<SequenceState> state;
    bool first_token = true;  // the next token is its first (time to first token)
    bool scored = false;      // its prompt's logprobs computed (when asked for)
    std::int64_t prefilled = 0;  // the tokens of its feed already fed (a prompt in pieces)
    std::int64_t cache_blocks = 0;  // the blocks it may come to hold (under a cache limit)
    // A preempted sequence's feeds that rebuild its cache (Decoder::restart), and how many are fed.
    std::vector<std::vector<std::int32_t>> replay;
    std::size_t replayed = 0;
    bool resumed = false;  // preempted once: back on the reservation of its whole length, never again
  };
  // Moves preempted sequences, then waiting requests, into the batch while it has room
  // (max_batch, the cache limit); under mu_.
  void admit(std::vector<Active>& active);
  // The blocks the sequences may come to hold (their reservations), or under preemption
  // those they hold once their next feeds are in (a resumed one: its reservation).
  std::int64_t held_blocks(const std::vector<Active>& active) const;
  std::int64_t needed_blocks(const Active& a) const;  // (under preemption)
  // Under preemption: while the next step would need more blocks than the limit, the
  // sequence that came last, of those never preempted, leaves for preempted_ (one is always
  // left to run).
  void preempt_over_limit(std::vector<Active>& active);
  static void finish(Active& a);  // the ticket's results from its generation (before its last push)
  void loop();
  void step(std::vector<Active>& active);

  Decoder& decoder_;
  const Tokenizer& tokenizer_;
  BatchOptions o_;
  Metrics& metrics_;
  std::int64_t block_bytes_ = 0;  // of one cache block (0: the decoder has no cache)
  std::int64_t limit_blocks_ = 0;  // the blocks cache_limit_bytes holds (0: no limit)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Ticket>> waiting_;
  std::deque<Active> preempted_;  // (the batching thread's own) first in, first back
  bool stopping_ = false;
  std::thread thread_;
};

class ImageBatcher {
 public:
  ImageBatcher(Module& model, BatchOptions options, Metrics& metrics);
  ~ImageBatcher();
  // Class probabilities [N, classes] for images [N, 1, 28, 28]; blocks until computed.
  Tensor classify(const Tensor& images);

 private:
  struct Job {
    Tensor images, probabilities;
    std::string error;
    bool done = false;
  };
  void loop();

  Module& model_;
  BatchOptions o_;
  Metrics& metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> waiting_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace weft::serve
