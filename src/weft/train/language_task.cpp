// Language modeling (seed 002 chapters 6-8): a GPT, LSTM or RNN on text, next-token
// cross-entropy at every position of random windows of the training tokens, validation loss
// on fixed windows next to the unigram entropy, and a generated sample at the end.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string_view>

#include "weft/autograd/functions.h"
#include "weft/data/text.h"
#include "weft/io/hf_import.h"
#include "weft/nn/recurrent.h"
#include "weft/nn/transformer.h"
#include "weft/parallel/job.h"
#include "weft/train/task.h"
#include "weft/util/checked.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/machine.h"
#include "weft/util/parse.h"
#include "weft/util/utf8.h"

namespace weft {

namespace {

// Windows of context + 1 tokens starting at the given offsets: inputs and next-token targets.
parallel::StepBatch windows(const std::vector<std::int32_t>& tokens, const std::vector<std::int64_t>& starts,
                            std::int64_t T) {
  const std::int64_t B = static_cast<std::int64_t>(starts.size());
  parallel::StepBatch batch{Tensor::empty({B, T}), std::vector<std::int32_t>(static_cast<size_t>(B * T)), 1, {}};
  float* p = batch.inputs.data<float>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      const auto at = static_cast<size_t>(starts[static_cast<size_t>(b)] + t);
      p[b * T + t] = static_cast<float>(tokens[at]);
      batch.targets[static_cast<size_t>(b * T + t)] = tokens[at + 1];
    }
  return batch;
}

class LanguageModeling : public Task {
 public:
  LanguageModeling(const TrainOptions& o, int replica, int replicas)
      : Task(*o.batch, replica, replicas), o_(o) {
    // The text and its tokens within the memory this rank has available (the machine's ranks
    // each hold them), so that a corpus too large is one line rather than the machine
    // swapping or its out-of-memory killer ending the run.
    const std::size_t budget = memory_share(parallel::ranks_on_this_machine());
    text_ = load_corpus(*o.data, budget);
    if (!o.init_from.empty()) {  // a GPT-2 and its tokenizer (its parameters when the model is built)
      imported_ = hf_folder_config(o.init_from);
      if (o.context > imported_->context)
        throw ConfigError(fmt::format("--context {} exceeds the {} positions of {}", o.context, imported_->context,
                                      o.init_from));
      tokenizer_ = hf_folder_tokenizer(o.init_from, *imported_);
    } else if (o.tokenizer == "char") tokenizer_ = std::make_unique<CharTokenizer>(text_);
    else if (o.tokenizer == "word") tokenizer_ = std::make_unique<WordTokenizer>(text_);
    else if (o.tokenizer == "bpe") tokenizer_ = BpeTokenizer::train(text_, o.vocab_size);
    else tokenizer_ = BpeTokenizer::load(read_file(o.tokenizer), o.tokenizer);  // a SentencePiece .model
    TokenSplit split = split_tokens(encode_corpus(*tokenizer_, text_, ids_budget(budget, text_.size()), *o.data));
    train_ = std::move(split.train);
    val_ = std::move(split.validation);
    if (static_cast<std::int64_t>(val_.size()) <= o.context + 1)
      throw DataError(*o.data + ": too little text for a context of " + std::to_string(o.context) + " tokens");
    entropy_ = unigram_entropy(train_, tokenizer_->vocab_size());
    // Fixed validation windows, spread evenly.
    val_starts_ = spread_windows(static_cast<std::int64_t>(val_.size()), o.context, o.eval_batches * *o.batch);
  }

  ModelRecipe recipe() const override {
    const std::int64_t vocab = tokenizer_->vocab_size();
    ModelRecipe r;
    r.model = o_.model;
    if (imported_) {
      r.gpt = *imported_;
      r.gpt.recompute = o_.recompute;
    } else if (is_transformer_model(o_.model)) {
      r.gpt = transformer_config(o_, vocab);
    } else {
      r.recurrent = RecurrentConfig{vocab, o_.context, o_.dim, model_layers(o_), o_.model};
    }
    return r;
  }
  // --init-from: the folder's parameters.
  void initialize(Module& model) const override {
    if (imported_) model.load_state_dict(hf_folder_parameters(o_.init_from, *imported_));
  }
  Metadata model_metadata() const override {
    Metadata m = recipe().to_metadata();
    m["weft_tokenizer"] = tokenizer_->kind();
    m["weft_tokenizer_vocabulary"] = tokenizer_->vocabulary();
    return m;
  }
  std::string model_tag() const override { return "lm-" + o_.model; }
  std::string describe(const Module& model) const override {
    return fmt::format("{}: {} parameters; {} tokenizer, vocabulary {}; {} training and {} validation tokens; unigram "
                       "entropy {:.3f} nats/token",
                       model.describe(), model.num_parameters(), tokenizer_->kind(), tokenizer_->vocab_size(), train_.size(),
                       val_.size(), entropy_);
  }
  std::int64_t rows_per_epoch() const override {
    return checked_mul(*o_.max_steps, *o_.batch, "--max-steps times --batch");
  }
  std::int64_t epochs() const override { return 1; }
  bool epoch_is_the_run() const override { return true; }
  std::string unit() const override { return "tokens"; }
  std::int64_t units_per_row() const override { return o_.context; }
  std::string generator_name() const override { return "sampler"; }

  // Every rank draws the global batch's windows alike; a replica keeps its rows.
  parallel::StepBatch batch(std::int64_t, std::int64_t at, std::int64_t, Rng& rng) override {
    std::vector<std::int64_t> starts(static_cast<size_t>(*o_.batch));
    const auto span = static_cast<std::uint64_t>(static_cast<std::int64_t>(train_.size()) - o_.context - 1);
    for (auto& s : starts) s = static_cast<std::int64_t>(rng.below(span));
    const DealtRows mine = rows_of(rows_at(at));
    const auto first = starts.begin() + mine.first;
    parallel::StepBatch b = windows(train_, std::vector<std::int64_t>(first, first + mine.count), o_.context);
    b.weight = mine.weight;
    return b;
  }

  bool freeze(std::size_t layers, std::int64_t cache_bytes) override {
    if (!is_transformer_model(o_.model)) return Task::freeze(layers, cache_bytes);
    return false;  // the blocks' inputs change with the trained embedding: nothing to keep
  }
  std::size_t layers(const Module& model) const override {
    return is_transformer_model(o_.model) ? static_cast<std::size_t>(model_layers(o_)) : 0;
  }
  // A GPT's block i holds the parameters "h<i>.*"; the embeddings and the final norm: none.
  int layer_of(const std::string& parameter) const override {
    const auto dot = parameter.find('.');
    if (parameter.size() < 2 || parameter[0] != 'h' || dot == std::string::npos) return -1;
    const auto n = parse_integer(parameter.substr(1, dot - 1));
    return n && *n >= 0 && *n < (1 << 30) ? static_cast<int>(*n) : -1;
  }

  Var loss(Module& model, const parallel::StepBatch& batch) const override {
    // Over the model's vocabulary: an imported model's may have more rows than its tokenizer
    // has tokens (padded to a round number, as Qwen 2's are).
    const Var logits = model.forward(Var(batch.inputs));
    const std::int64_t N = batch.inputs.size(0) * batch.inputs.size(1);
    return cross_entropy(reshape(logits, {N, logits.value().size(-1)}), batch.targets);
  }

  // The mean loss over the fixed windows (every rank computes all of them).
  Evaluation evaluate(parallel::Strategies& strategies, const parallel::RankGroup&) override {
    strategies.begin_eval();
    double total = 0;
    const auto per = static_cast<std::ptrdiff_t>(*o_.batch);
    for (std::int64_t b = 0; b < o_.eval_batches; ++b) {
      std::vector<std::int64_t> starts(val_starts_.begin() + b * per, val_starts_.begin() + (b + 1) * per);
      total += strategies.eval_loss(windows(val_, starts, o_.context),
                                    [this](Module& m, const parallel::StepBatch& x) { return loss(m, x); });
    }
    strategies.end_eval();
    const double value = total / static_cast<double>(o_.eval_batches);
    return {"validation loss", fmt::format("validation loss {:.3f} (unigram entropy {:.3f})", value, entropy_), "val_loss",
            value};
  }

  std::string progress_line(std::int64_t, std::int64_t step, bool, double train_loss, const Evaluation* e,
                            const std::string& rate) const override {
    return fmt::format("step {}: train loss {:.3f}{}  ({})", step, train_loss, e ? ", " + e->text : "", rate);
  }

  // A sample from the prompt, and how many of its words (three letters or more) occur in the corpus.
  void finish(Module& model, Rng& rng, std::FILE* out, nlohmann::json& summary) override {
    if (o_.sample <= 0) return;
    auto& lm = dynamic_cast<LanguageModel&>(model);
    const std::vector<std::int32_t> prompt = tokenizer_->encode(o_.prompt);
    auto ids = o_.continue_tokens ? o_.continue_tokens(lm, prompt, o_.sample, o_.temperature, o_.top_k, rng)
                                  : lm.generate(prompt, o_.sample, o_.temperature, o_.top_k, rng);
    // Byte tokens (char, or BPE's byte fallback) can stop inside a character: what is shown
    // is valid UTF-8, with U+FFFD for any broken sequence.
    const std::string sample = valid_utf8(
        tokenizer_->decode(std::vector<std::int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ids.end())));
    // The sample's words looked for in one pass over the corpus's (which may be larger than
    // the memory its words would take as a set).
    std::vector<std::string> generated;
    for (const std::string& w : WordTokenizer::split(sample))
      if (w.size() >= 3 && std::isalpha(static_cast<unsigned char>(w[0]))) generated.push_back(w);
    std::map<std::string, bool, std::less<>> in_corpus;
    for (const std::string& w : generated) in_corpus.emplace(w, false);
    WordTokenizer::for_each_piece(text_, [&](std::string_view w) {
      if (auto it = in_corpus.find(w); it != in_corpus.end()) it->second = true;
    });
    const auto words = static_cast<std::int64_t>(generated.size());
    const auto hits = std::count_if(generated.begin(), generated.end(), [&](const std::string& w) { return in_corpus.at(w); });
    const double share = words ? static_cast<double>(hits) / static_cast<double>(words) : 0.0;
    fmt::print(out, "sample (temperature {}):\n{}{}\n", o_.temperature, o_.prompt, sample);
    fmt::print(out, "{} of the {} generated words of three letters or more occur in the corpus ({:.0f}%)\n", hits, words,
               100 * share);
    summary["sample_words"] = words;
    summary["sample_known_words"] = share;
  }

  void summarize(nlohmann::json& s) const override {
    s["vocab"] = tokenizer_->vocab_size();
    s["train_tokens"] = train_.size();
    s["val_tokens"] = val_.size();
    s["unigram_entropy"] = entropy_;
  }

 private:
  TrainOptions o_;
  std::string text_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<GptConfig> imported_;  // --init-from's model
  std::vector<std::int32_t> train_, val_;
  std::vector<std::int64_t> val_starts_;
  double entropy_ = 0;
};

}  // namespace

std::unique_ptr<Task> make_language_task(const TrainOptions& options, int replica, int replicas) {
  return std::make_unique<LanguageModeling>(options, replica, replicas);
}

}  // namespace weft
