#include "weft/serve/server.h"
#include "weft/serve/serve_flags.h"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <memory>
#include <utility>

#include "weft/comm/process.h"
#include "weft/serve/api.h"
#include "weft/serve/http_base.h"
#include "weft/serve/model_file.h"
#include "weft/serve/model_parallel.h"
#include "weft/tensor/thread_pool.h"
#include "weft/util/env.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/machine.h"
#include "weft/util/units.h"

namespace weft::serve {

namespace {

using nlohmann::json;

constexpr auto kPoll = std::chrono::milliseconds(100);

class Server : private MetricsHolder, public HttpBase {
 public:
  Server(const ServeOptions& o, std::FILE* log)
      : HttpBase(o, owned_metrics_), log_(log), model_(load_model(o.model)) {
    check_serve_flags_apply(o, model_.language_model() != nullptr, model_.recipe.model);
    limits_ = {model_.name, o.max_tokens, o.max_images, model_.tokenizer ? model_.tokenizer->vocab_size() : 0};
    declare_metrics();  // (before the batchers' threads update them)
    describe_ = model_.module->describe();
    parameters_ = model_.module->num_parameters();
    if (LanguageModel* lm = model_.language_model()) {
      context_ = lm->context();
      if (o.block_size > (context_ + 15) / 16 * 16)
        throw ConfigError(fmt::format("--block-size {}: more positions than the model's context of {} (a block holds at most "
                                      "the context, rounded up to 16)",
                                      o.block_size, context_));
      DecoderFormat format = decoder_format(o);
      format.cache_block_rows = o.block_size;
      decoder_ = join_decoder(*lm, format, o.tp, o.pp, o.micro_batches);
      const std::int64_t block_positions = decoder_->cache_block_positions();  // (0: no cache)
      const bool pieces_asked =
          std::count(o.given_flags.begin(), o.given_flags.end(), "--max-prefill-tokens") > 0 ||
          (o.batch.max_prefill_tokens > 0 && o.batch.max_prefill_tokens != ServeOptions{}.batch.max_prefill_tokens);
      for (const auto& [flag, given] : {std::pair{"--max-prefill-tokens", pieces_asked},
                                        std::pair{"--kv-cache-memory", o.kv_cache_memory.has_value()},
                                        std::pair{"--preemption", o.batch.preempt},
                                        std::pair{"--block-size", o.block_size != 0}})
        if (given && block_positions == 0)
          throw ConfigError(std::string(flag) + " does not apply to this run: it is for a GPT's key-value cache, and the run has " +
                            model_.recipe.model + " (no cache)");
      max_prompt_ = o.max_prompt_tokens > 0 ? o.max_prompt_tokens : context_;
      BatchOptions batch = o.batch;
      if (block_positions == 0) batch.max_prefill_tokens = 0;  // (the default's pieces are a cache's)
      if (block_positions > 0) {
        const std::int64_t longest = cache_blocks_for(max_prompt_, o.max_tokens, context_, block_positions) * block_positions;
        batch.cache_limit_bytes = serve_cache_limit(o.kv_cache_memory, longest * decoder_->cache_bytes_per_token(), longest,
                                                    o.batch.max_batch, available_memory_bytes(),
                                                    o.tp * o.pp * static_cast<int>(env_int_in("WEFT_SERVE_REPLICAS", 1, 64).value_or(1)));
      }
      cache_limit_ = batch.cache_limit_bytes;
      batch.max_wait_ms = max_wait_ms_ = given_max_wait_ms(o).value_or(0);
      release_module_held_by(model_.module, *decoder_);  // (a GPT's decoder holds its weights)
      lm_ = std::make_unique<LmBatcher>(*decoder_, *model_.tokenizer, batch, metrics_);
    } else {
      // (a command line's flags for a language model's weights were refused above; a library caller's here)
      if (o.quantize != "fp32" || o.kv_cache_dtype != "fp32" || o.tp > 1 || o.pp > 1)
        throw ConfigError("--quantize, --kv-cache-dtype, --tp and --pp are for a language model, and " + model_.recipe.model +
                          " is an image model");
      BatchOptions batch = o.batch;
      batch.max_wait_ms = max_wait_ms_ = given_max_wait_ms(o).value_or(2);
      images_ = std::make_unique<ImageBatcher>(*model_.module, batch, metrics_);
    }
    routes();
  }

  int run() {
    const char* kind = lm_ ? "completions" : "image classification";
    std::string holding = decoder_ && decoder_->weight_bytes() > 0
                              ? fmt::format(", {} weights {:.2f} MB", o_.quantize, static_cast<double>(decoder_->weight_bytes()) / 1e6)
                              : "";
    if (decoder_ && decoder_->cache_bytes_per_token() > 0)
      holding += fmt::format(", {} key-value cache {:.1f} KB a token{}{}{}", o_.kv_cache_dtype,
                             static_cast<double>(decoder_->cache_bytes_per_token()) / 1e3, o_.tp * o_.pp > 1 ? " on rank 0" : "",
                             cache_limit_ > 0 ? " (at most " + human_bytes(cache_limit_) + ")" : "",
                             o_.batch.preempt ? cache_limit_ > 0 ? ", preemption by recomputation" : ", no limit: no preemption"
                                 : "");
    return listen(log_, fmt::format("{} ({}, {} parameters{}) for {}; batches of up to {}, waiting up to {} ms", model_.name,
                                    describe_, parameters_, holding, kind,
                                    o_.batch.max_batch, max_wait_ms_));
  }

 private:
  void declare_metrics() {
    metrics_.histogram("weft_time_to_first_token_seconds", "time from a completion's arrival to its first token",
                       {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
    metrics_.histogram("weft_batch_size", "sequences per decoding step, images per forward",
                       {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024});
    metrics_.counter("weft_prompt_tokens_total", "prompt tokens of completions");
    metrics_.counter("weft_generated_tokens_total", "tokens generated");
    metrics_.counter("weft_images_total", "images classified");
    metrics_.gauge("weft_queue_depth", "requests waiting to join a batch");
    metrics_.gauge("weft_running_sequences", "sequences in the running decode batch");
    metrics_.gauge("weft_kv_cache_reserved_bytes",
                   "key-value cache the running sequences may come to hold (whole blocks; under --preemption recompute, "
                   "what they hold after the next step), against --kv-cache-memory");
    metrics_.counter("weft_preemptions_total", "sequences preempted (their cache given back) to keep within --kv-cache-memory");
    metrics_.set("weft_replicas", 1);
  }

  void routes() {
    http_.Get("/v1/models", [this](const http::Request&, http::Response& res) {
      res.set_content(json{{"object", "list"}, {"data", json::array({model_object()})}}.dump(), "application/json");
    });
    http_.Get("/v1/models/", [this](const http::Request& req, http::Response& res) {
      const std::string wanted = req.path.substr(std::string("/v1/models/").size());
      if (wanted != model_.name)
        return send_error(res, 404, fmt::format("the model '{}' does not exist (this server serves '{}')", wanted, model_.name),
                          "model");
      res.set_content(model_object().dump(), "application/json");
    });
    http_.Post("/v1/completions", [this](const http::Request& req, http::Response& res) { completions(req, res, false); });
    http_.Post("/v1/chat/completions",
               [this](const http::Request& req, http::Response& res) { completions(req, res, true); });
    http_.Post("/v1/classify", [this](const http::Request& req, http::Response& res) { classify(req, res); });
  }

  // Past --request-timeout a completion ends with its text so far (finish_reason "abort").
  bool past_time_limit(Clock::time_point start) const {
    return o_.request_timeout_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() > o_.request_timeout_s;
  }

  json model_object() const {
    json m = {{"id", model_.name}, {"object", "model"}, {"created", created_}, {"owned_by", "weft"},
              {"kind", model_.recipe.model}, {"parameters", parameters_}};
    if (context_ > 0) m["context"] = context_;
    return m;
  }

  // Admits, parses and checks a request; null (the response filled) when refused.
  template <class Parse>
  AdmissionPtr admit_parsed(const char* endpoint, http::Response& res, Clock::time_point start, Parse&& parse) {
    AdmissionPtr admission = admit(endpoint, res, start);
    if (!admission) return nullptr;
    try {
      parse();
    } catch (const RequestError& e) {
      send_error(res, e.status, e.what(), e.param);
      count(endpoint, e.status, start);
      return nullptr;
    }
    return admission;
  }

  // One sequence a request generates: its prompt (index into the request's) and its ticket.
  struct Sequence {
    std::size_t prompt = 0;
    std::shared_ptr<Ticket> ticket;
  };

  // A completion (`chat`: a chat completion, its prompt made by the model's chat template and
  // its generation stopped at the EOS token's text), answered whole or streamed: for each
  // prompt, best_of sequences (seeds seed, seed + 1, ...), the n most likely returned.
  void completions(const http::Request& req, http::Response& res, bool chat) {
    const auto start = Clock::now();
    const char* endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
    CompletionRequest r;
    AdmissionPtr admission = admit_parsed(endpoint, res, start, [&] {
      if (!lm_) throw RequestError(400, "this server serves an image model: use /v1/classify");
      if (chat) {
        ChatRequest c = parse_chat_request(req.body, limits_, fresh_random());
        Prompt prompt;
        try {
          prompt.text = model_.chat_prompt(c.messages);
        } catch (const ChatTemplateError& e) {
          throw RequestError(400, e.what(), "messages");
        }
        if (!model_.eos_token.empty()) c.options.stop.push_back(model_.eos_token);
        r = c;
        r.prompts = {prompt};
      } else {
        r = parse_completion_request(req.body, limits_, fresh_random(), model_.tokenizer.get());
      }
      if (r.options.prompt_logprobs && (o_.tp > 1 || o_.pp > 1))
        throw RequestError(400, "the prompt's logprobs ('echo' with 'logprobs') are not computed under --tp or --pp", "echo");
      for (Prompt& p : r.prompts) {
        if (!p.as_tokens) p.tokens = model_.tokenizer->encode(p.text);
        if (static_cast<std::int64_t>(p.tokens.size()) > max_prompt_)
          throw RequestError(400,
                             fmt::format("{} {} tokens; the limit is {}",
                                         chat ? "the messages in the model's chat template are" : "the prompt is",
                                         p.tokens.size(), max_prompt_),
                             chat ? "messages" : "prompt");
      }
    });
    if (!admission) return;
    std::vector<Sequence> sequences;
    std::int64_t prompt_tokens = 0;
    // A stream is woken by its tickets' pieces (on the event loop: no thread waits on it).
    const auto waker = r.stream ? std::make_shared<http::StreamWaker>() : nullptr;
    for (std::size_t i = 0; i < r.prompts.size(); ++i) {
      prompt_tokens += static_cast<std::int64_t>(r.prompts[i].tokens.size());
      for (std::int64_t k = 0; k < r.best_of; ++k) {
        GenerationOptions options = r.options;
        options.sampling.seed += static_cast<std::uint64_t>(k);
        sequences.push_back({i, std::make_shared<Ticket>(r.prompts[i].text, r.prompts[i].tokens, options)});
        if (waker) sequences.back().ticket->on_push([waker] { waker->wake(); });
        lm_->submit(sequences.back().ticket);
      }
    }
    metrics_.add("weft_prompt_tokens_total", static_cast<double>(prompt_tokens));
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + fmt::format("{:016x}", fresh_random());
    const std::int64_t created = std::time(nullptr);
    // (By value: a stream's provider calls it after this function has returned.)
    auto logprobs_of = [this, chat, top = r.options.top_logprobs](const std::vector<TokenLogprob>& tokens,
                                                                  std::int64_t offset) -> json {
      if (top < 0) return nullptr;
      return chat ? chat_logprobs(tokens, *model_.tokenizer) : completion_logprobs(tokens, *model_.tokenizer, offset);
    };
    // A whole choice's tokens: the prompt's (echo with logprobs) from 0, then the generated ones
    // after the echoed text.
    auto choice_tokens = [](const Ticket& t, std::int64_t echoed) {
      std::vector<TokenLogprob> all = t.prompt_logprobs;
      for (TokenLogprob lp : t.logprobs) {
        lp.offset += echoed;
        all.push_back(std::move(lp));
      }
      return all;
    };
    if (!r.stream) {
      // A client that leaves cancels its generations; past the stop's drain, they end with the
      // text so far (finish_reason "abort").
      for (const Sequence& q : sequences) {
        while (!q.ticket->wait_for(kPoll)) {
          if (req.client_gone()) {
            for (const Sequence& other : sequences) other.ticket->cancel();
            for (const Sequence& other : sequences) other.ticket->wait();
            count(endpoint, 499, start);
            return;
          }
          if (http_.draining() || past_time_limit(start))
            for (const Sequence& other : sequences) other.ticket->cancel();
        }
      }
      std::int64_t completion_tokens = 0;
      for (const Sequence& q : sequences) {
        if (!q.ticket->error.empty()) {
          send_error(res, 503, q.ticket->error);
          count(endpoint, 503, start);
          return;
        }
        completion_tokens += q.ticket->completion_tokens;
      }
      std::vector<Choice> choices;
      for (std::size_t i = 0; i < r.prompts.size(); ++i) {
        std::vector<const Ticket*> mine;
        for (const Sequence& q : sequences)
          if (q.prompt == i) mine.push_back(q.ticket.get());
        if (r.best_of > r.n)  // the n most likely of best_of
          std::stable_sort(mine.begin(), mine.end(),
                           [](const Ticket* a, const Ticket* b) { return a->cumulative_logprob > b->cumulative_logprob; });
        const std::string echoed = r.echo ? r.prompts[i].text : std::string();
        for (std::int64_t k = 0; k < r.n; ++k) {
          const Ticket& t = *mine[static_cast<std::size_t>(k)];
          choices.push_back({static_cast<std::int64_t>(i) * r.n + k, echoed + t.text, t.finish_reason,
                             logprobs_of(choice_tokens(t, static_cast<std::int64_t>(echoed.size())), 0)});
        }
      }
      res.set_content((chat ? chat_response(id, created, model_.name, choices, prompt_tokens, completion_tokens)
                            : completion_response(id, created, model_.name, choices, prompt_tokens, completion_tokens))
                          .dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
      count(endpoint, 200, start);
      return;
    }
    // Streamed (best_of = n): each sequence's pieces as chunks of its choice, in turn.
    struct StreamState {
      std::vector<bool> opened, finished;
    };
    auto state = std::make_shared<StreamState>();
    state->opened.assign(sequences.size(), false);
    state->finished.assign(sequences.size(), false);
    res.set_header("Cache-Control", "no-cache");
    res.set_pumped_content_provider(
        "text/event-stream",
        [this, sequences, state, admission, id, created, start, endpoint, chat, prompts = r.prompts, n = r.n, echo = r.echo,
         include_usage = r.include_usage, logprobs_of, prompt_tokens](size_t, http::DataSink& sink) {
          // On the event loop, woken by the tickets (never waiting): the events of one call go
          // out as one chunk (flush), each token its own event, as many as the batcher produced
          // since the last call.
          std::string out;
          auto event = [&](const json& data) {
            out += "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
          };
          auto flush = [&] {
            const bool written = out.empty() || sink.write(out.data(), out.size());
            out.clear();
            return written;
          };
          auto chunk = [&](std::size_t q, Choice c) {
            const bool opening = !state->opened[q];
            state->opened[q] = true;
            return chat ? chat_chunk(id, created, model_.name, c, opening) : completion_chunk(id, created, model_.name, c);
          };
          if (sink.draining() || past_time_limit(start))  // end with finish_reason "abort"
            for (const Sequence& q : sequences) q.ticket->cancel();
          bool any = false;
          for (std::size_t q = 0; q < sequences.size(); ++q) {
            if (state->finished[q]) continue;
            const Ticket& t = *sequences[q].ticket;
            const std::int64_t index = static_cast<std::int64_t>(sequences[q].prompt) * n +
                                       static_cast<std::int64_t>(q % static_cast<std::size_t>(n));
            const std::string echoed = echo ? prompts[sequences[q].prompt].text : std::string();
            std::string piece;
            std::vector<TokenLogprob> tokens;
            const bool more = sequences[q].ticket->next(piece, std::chrono::milliseconds(0), &tokens);
            // The echoed prompt first, once the ticket has said something (its prompt's
            // logprobs are set by then).
            if (!state->opened[q] && !echoed.empty() && (more ? !piece.empty() || !tokens.empty() : true))
              event(chunk(q, {index, echoed, "", logprobs_of(t.prompt_logprobs, 0)}));
            if (!piece.empty() || !tokens.empty()) {
              any = true;
              do {  // this piece, then those already waiting
                event(chunk(q, {index, piece, "", logprobs_of(tokens, static_cast<std::int64_t>(echoed.size()))}));
                piece.clear();
                tokens.clear();
              } while (sequences[q].ticket->next(piece, std::chrono::milliseconds(0), &tokens) &&
                       (!piece.empty() || !tokens.empty()));
              continue;
            }
            if (more) continue;
            state->finished[q] = true;
            any = true;
            if (!t.error.empty()) {
              event(json::parse(error_body(503, t.error)));
              continue;
            }
            event(chunk(q, {index, "", t.finish_reason, nullptr}));
          }
          if (!flush()) return false;
          if (!any) return sink.is_writable();  // nothing yet: a gone client ends the stream
          if (std::find(state->finished.begin(), state->finished.end(), false) != state->finished.end()) return true;
          if (include_usage) {
            std::int64_t completion_tokens = 0;
            for (const Sequence& q : sequences) completion_tokens += q.ticket->completion_tokens;
            json usage = chat ? chat_chunk(id, created, model_.name, "", "", false) : completion_chunk(id, created, model_.name, "", "");
            usage["choices"] = json::array();
            usage["usage"] = usage_of(prompt_tokens, completion_tokens);
            event(usage);
          }
          out += "data: [DONE]\n\n";
          flush();
          sink.done();
          count(endpoint, 200, start);
          return true;
        },
        waker, [sequences](bool success) {
          if (!success)
            for (const Sequence& q : sequences) q.ticket->cancel();  // the client went away: free its sequences
        });
  }

  void classify(const http::Request& req, http::Response& res) {
    const auto start = Clock::now();
    const char* endpoint = "/v1/classify";
    Tensor images;
    const AdmissionPtr admission = admit_parsed(endpoint, res, start, [&] {
      if (!images_) throw RequestError(400, "this server serves a language model: use /v1/completions");
      images = parse_classify_request(req.body, limits_, model_.recipe);
    });
    if (!admission) return;
    Tensor p = images_->classify(images);
    metrics_.add("weft_images_total", static_cast<double>(images.size(0)));
    res.set_content(classify_response(model_.name, p, model_.recipe).dump(), "application/json");
    count(endpoint, 200, start);
  }

  std::FILE* log_;
  LoadedModel model_;  // (a GPT's module let go once its decoder holds the weights)
  std::string describe_;  // the model's, read at load
  std::int64_t parameters_ = 0, context_ = 0;
  ApiLimits limits_;
  std::int64_t max_prompt_ = 0;
  std::unique_ptr<Decoder> decoder_;
  std::int64_t cache_limit_ = 0;  // the key-value cache's, in bytes (0: none)
  double max_wait_ms_ = 0;        // the batcher's (ServeOptions::max_wait_ms, resolved)
  std::unique_ptr<LmBatcher> lm_;
  std::unique_ptr<ImageBatcher> images_;
  std::int64_t created_ = std::time(nullptr);
};

}  // namespace

std::optional<double> given_max_wait_ms(const ServeOptions& o) {
  if (o.max_wait_ms) return o.max_wait_ms;
  if (o.batch.max_wait_ms != ServeOptions{}.batch.max_wait_ms) return o.batch.max_wait_ms;
  return std::nullopt;
}

void validate(const ServeOptions& o) {
  check_values(serve_flags(), o);  // each flag's bounds and choices
  if (!o.token.empty() && o.token.size() < 16) throw ConfigError("--token must be at least 16 characters");
  if (o.replicas_min < 1 || o.replicas_max < o.replicas_min || o.replicas_max > 64)
    throw ConfigError(fmt::format("--replicas {}:{}: need 1 <= MIN <= MAX <= 64", o.replicas_min, o.replicas_max));
  if (o.replicas_max > 1 && comm::process_info_from_env().world > 1)
    throw ConfigError("--replicas starts each replica's ranks itself (--tp, --pp): run weft serve without weft launch");
}

int serve(const ServeOptions& options, std::FILE* log) {
  validate(options);
  set_pool_pause(kDecodingPoolPause);
  // SIGINT and SIGTERM are taken by one thread that stops the server; the others never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (options.replicas_max > 1) return serve_replicated(options, log);
  if ((options.tp > 1 || options.pp > 1) && comm::process_info_from_env().rank != 0) {
    // A model-parallel rank other than 0 computes its part of rank 0's steps.
    LoadedModel m = load_model(options.model);
    check_serve_flags_apply(options, m.language_model() != nullptr, m.recipe.model);
    if (!m.language_model()) throw ConfigError("--tp and --pp are for a language model, and " + m.recipe.model + " is an image model");
    join_decoder(*m.language_model(), decoder_format(options), options.tp, options.pp, options.micro_batches);
    return 0;
  }
  Server server(options, log);
  return run_until_signal([&] { return server.run(); }, [&] { server.stop(); });
}

}  // namespace weft::serve
