#include "weft/train/lm_trainer.h"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>

#include "weft/autograd/functions.h"
#include "weft/data/text.h"
#include "weft/nn/recurrent.h"
#include "weft/nn/transformer.h"
#include "weft/optim/adam.h"
#include "weft/optim/schedule.h"
#include "weft/tensor/thread_pool.h"
#include "weft/train/safetensors.h"
#include "weft/util/file.h"
#include "weft/util/progress.h"

namespace weft {

namespace {
using Clock = std::chrono::steady_clock;

// B windows of context + 1 tokens starting at the given offsets: inputs and next-token targets.
void windows(const std::vector<std::int32_t>& tokens, const std::vector<std::int64_t>& starts, std::int64_t T,
             Tensor& ids, std::vector<std::int32_t>& targets) {
  const std::int64_t B = static_cast<std::int64_t>(starts.size());
  ids = Tensor::empty({B, T});
  float* p = ids.data<float>();
  targets.resize(static_cast<size_t>(B * T));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      p[b * T + t] = static_cast<float>(tokens[static_cast<size_t>(starts[static_cast<size_t>(b)] + t)]);
      targets[static_cast<size_t>(b * T + t)] = tokens[static_cast<size_t>(starts[static_cast<size_t>(b)] + t + 1)];
    }
}
}  // namespace

std::string LmSummary::to_json() const {
  return nlohmann::json{{"parameters", parameters},       {"vocab", vocab},
                        {"train_tokens", train_tokens},   {"val_tokens", val_tokens},
                        {"unigram_entropy", unigram_entropy}, {"train_loss", train_loss},
                        {"val_loss", val_loss},           {"tokens_per_second", tokens_per_second},
                        {"sample_words", sample_words},   {"sample_known_words", sample_known_words}}
      .dump();
}

LmSummary train_lm(const LmConfig& c, std::FILE* out) {
  if (c.tokenizer != "char" && c.tokenizer != "word") throw ConfigError("unknown tokenizer '" + c.tokenizer + "' (known: char, word)");
  auto at_least = [](const char* flag, std::int64_t v, std::int64_t min) {
    if (v < min) throw ConfigError(fmt::format("{} must be at least {}, got {}", flag, min, v));
  };
  at_least("--context", c.context, 2);
  at_least("--batch", c.batch, 1);
  at_least("--max-steps", c.steps, 1);
  at_least("--eval-every", c.eval_every, 1);
  at_least("--eval-batches", c.eval_batches, 1);
  at_least("--layers", c.layers, 0);
  at_least("--d-model", c.dim, 1);
  at_least("--heads", c.heads, 1);
  at_least("--sample", c.sample, 0);
  at_least("--top-k", c.top_k, 0);
  at_least("--warmup", c.warmup, 0);
  const bool gpt = c.model == "gpt";
  if (!gpt && c.model != "lstm" && c.model != "lstm-seed" && c.model != "rnn" && c.model != "rnn-sigmoid") {
    throw ConfigError("unknown language model '" + c.model + "' (known: gpt, lstm, lstm-seed, rnn, rnn-sigmoid)");
  }
  if (gpt && c.dim % c.heads != 0) throw ConfigError(fmt::format("--d-model {} is not divisible by --heads {}", c.dim, c.heads));
  if (!(c.lr > 0)) throw ConfigError("--lr must be positive");
  if (!(c.temperature >= 0)) throw ConfigError("--temperature must be 0 (greedy) or positive");
  if (!(c.clip_grad >= 0)) throw ConfigError("--clip-grad must be 0 (none) or positive");
  if (!(c.weight_decay >= 0)) throw ConfigError("--weight-decay must not be negative");
  parse_positional(c.positional);
  if (c.threads > 0) set_num_threads(c.threads);
  const std::string text = load_corpus(c.data);
  std::unique_ptr<Tokenizer> tok;
  if (c.tokenizer == "char") tok = std::make_unique<CharTokenizer>(text); else tok = std::make_unique<WordTokenizer>(text);
  const std::vector<std::int32_t> all = tok->encode(text);
  const std::int64_t split = static_cast<std::int64_t>(all.size()) * 9 / 10;
  const std::vector<std::int32_t> train_tokens(all.begin(), all.begin() + split), val_tokens(all.begin() + split, all.end());
  if (static_cast<std::int64_t>(val_tokens.size()) <= c.context + 1) {
    throw DataError(c.data + ": too little text for a context of " + std::to_string(c.context) + " tokens");
  }
  LmSummary s;
  s.vocab = tok->vocab_size();
  s.train_tokens = static_cast<std::int64_t>(train_tokens.size());
  s.val_tokens = static_cast<std::int64_t>(val_tokens.size());
  s.unigram_entropy = unigram_entropy(train_tokens, s.vocab);

  Rng rng(c.seed);
  const std::int64_t layers = c.layers > 0 ? c.layers : (gpt ? 4 : 2);
  std::unique_ptr<LanguageModel> net;
  if (gpt) {
    net = std::make_unique<GPT>(
        GptConfig{s.vocab, c.context, c.dim, layers, c.heads, parse_positional(c.positional), !c.post_ln}, rng);
  } else {
    net = std::make_unique<RecurrentLM>(RecurrentConfig{s.vocab, c.context, c.dim, layers, c.model}, rng);
  }
  LanguageModel& model = *net;
  s.parameters = model.num_parameters();
  Adam opt(model.named_parameters(), c.lr, AdamOptions{0.9, 0.95, 1e-8, c.weight_decay, true});
  Schedule sched;
  sched.kind = "cosine";
  sched.warmup_steps = std::min(c.warmup, c.steps);
  sched.total_steps = c.steps;
  sched.min_lr = c.lr / 10;
  fmt::print(out, "{}: {} parameters; {} tokenizer, vocabulary {}; {} training and {} validation tokens; "
                  "unigram entropy {:.3f} nats/token\n",
             model.describe(), s.parameters, c.tokenizer, s.vocab, s.train_tokens, s.val_tokens, s.unigram_entropy);

  // Fixed validation windows, spread evenly.
  std::vector<std::int64_t> val_starts;
  const std::int64_t span = static_cast<std::int64_t>(val_tokens.size()) - c.context - 1;
  for (std::int64_t i = 0; i < c.eval_batches * c.batch; ++i) val_starts.push_back(span * i / (c.eval_batches * c.batch));
  auto validate = [&] {
    NoGradGuard no_grad;
    model.eval();
    double total = 0;
    for (std::int64_t b = 0; b < c.eval_batches; ++b) {
      std::vector<std::int64_t> starts(val_starts.begin() + b * c.batch, val_starts.begin() + (b + 1) * c.batch);
      Tensor ids;
      std::vector<std::int32_t> targets;
      windows(val_tokens, starts, c.context, ids, targets);
      total += cross_entropy(reshape(model.forward(Var(ids)), {c.batch * c.context, s.vocab}), targets).item();
    }
    model.train();
    return total / static_cast<double>(c.eval_batches);
  };

  Progress progress("step", c.steps);
  // The train loss reported is the mean over the steps since the last validation.
  double train_seconds = 0, window_sum = 0, running = 0;
  std::int64_t window_steps = 0;
  const auto start = Clock::now();
  for (std::int64_t step = 0; step < c.steps; ++step) {
    std::vector<std::int64_t> starts(static_cast<size_t>(c.batch));
    for (auto& st : starts) st = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(s.train_tokens - c.context - 1)));
    Tensor ids;
    std::vector<std::int32_t> targets;
    windows(train_tokens, starts, c.context, ids, targets);
    const auto t0 = Clock::now();
    opt.set_lr(learning_rate(sched, c.lr, step));
    opt.zero_grad();
    Var loss = cross_entropy(reshape(model.forward(Var(ids)), {c.batch * c.context, s.vocab}), targets);
    loss.backward();
    if (c.clip_grad > 0) clip_grad_norm(model.parameters(), c.clip_grad);
    opt.step();
    train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    const double l = loss.item();
    if (!std::isfinite(l)) throw Error(fmt::format("loss became {} at step {}: lower the learning rate", l, step + 1));
    window_sum += l;
    running = window_sum / static_cast<double>(++window_steps);
    if (!c.quiet) {
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      progress.update(step + 1, elapsed / static_cast<double>(step + 1) * static_cast<double>(c.steps - step - 1),
                      fmt::format("loss {:.3f}  {:.0f} tokens/s", running, (step + 1) * c.batch * c.context / train_seconds));
    }
    if ((step + 1) % c.eval_every == 0 || step + 1 == c.steps) {
      progress.finish();
      s.val_loss = validate();
      fmt::print(out, "step {}: train loss {:.3f}, validation loss {:.3f} (unigram entropy {:.3f})\n", step + 1, running,
                 s.val_loss, s.unigram_entropy);
      std::fflush(out);
      s.train_loss = running;
      window_sum = 0;
      window_steps = 0;
    }
  }
  s.tokens_per_second = static_cast<double>(c.steps * c.batch * c.context) / std::max(train_seconds, 1e-9);
  if (c.sample > 0) {
    std::vector<std::int32_t> prompt = tok->encode(c.prompt);
    auto ids = model.generate(prompt, c.sample, c.temperature, c.top_k, rng);
    s.sample = tok->decode(std::vector<std::int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ids.end()));
    // How many of the generated words (three letters or more) occur in the corpus.
    std::set<std::string> known;
    for (const std::string& w : WordTokenizer::split(text)) known.insert(w);
    std::int64_t words = 0, hits = 0;
    for (const std::string& w : WordTokenizer::split(s.sample)) {
      if (w.size() < 3 || !std::isalpha(static_cast<unsigned char>(w[0]))) continue;
      ++words;
      hits += known.count(w) ? 1 : 0;
    }
    s.sample_words = words;
    s.sample_known_words = words ? static_cast<double>(hits) / static_cast<double>(words) : 0.0;
    fmt::print(out, "sample (temperature {}):\n{}{}\n", c.temperature, c.prompt, s.sample);
    fmt::print(out, "{} of the {} generated words of three letters or more occur in the corpus ({:.0f}%)\n", hits, words,
               100 * s.sample_known_words);
  }
  if (!c.save_model.empty()) write_file_atomic(c.save_model, encode_safetensors(model.state_dict()));
  return s;
}

}  // namespace weft
