#include "weft/train/flag_scope.h"

#include <fmt/format.h>

#include <algorithm>

#include "weft/nn/model_recipe.h"
#include "weft/util/error.h"

namespace weft {

namespace {

using Options = TrainOptions;

// A kind of run: whether `o` is one, in the words of the flags that make one, and what `o`
// has instead.
struct Scope {
  bool (*is)(const Options& o);
  const char* needs;
  std::string (*run_has)(const Options& o);
};

std::string model_of(const Options& o) { return "--model " + o.model; }
std::string strategy_of(const Options& o) { return "--strategy " + o.parallel.strategy; }
std::string schedule_of(const Options& o) { return "--lr-schedule " + o.lr_schedule_kind.value_or("constant"); }
bool image(const Options& o) { return !is_language_model(o.model); }
bool text(const Options& o) { return is_language_model(o.model); }
bool transformer(const Options& o) { return is_transformer_model(o.model); }
bool resuming(const Options& o) { return o.resume || o.auto_resume; }
bool freezes(const Options& o) { return o.freeze_below > 0 || !o.freeze_converged.empty(); }
bool sampling(const Options& o) { return text(o) && o.sample > 0; }

const Scope kImage{image, "an image model (--model mlp, cnn, mlp128 or seed-cnn)", model_of};
const Scope kMlp{[](const Options& o) { return o.model == "mlp"; }, "--model mlp", model_of};
const Scope kText{text, "a language model (--model gpt, llama, lstm or rnn)", model_of};
const Scope kTransformer{transformer, "--model gpt or llama", model_of};
const Scope kLstm{[](const Options& o) { return o.model == "lstm" || o.model == "lstm-seed"; }, "--model lstm", model_of};
const Scope kRnn{[](const Options& o) { return o.model == "rnn" || o.model == "rnn-sigmoid"; }, "--model rnn", model_of};
const Scope kSgd{[](const Options& o) { return o.optimizer == "sgd"; }, "--optimizer sgd",
                 [](const Options& o) { return "--optimizer " + o.optimizer.value_or("sgd"); }};
const Scope kStepSchedule{[](const Options& o) { return o.lr_schedule_kind == "step"; }, "--lr-schedule step", schedule_of};
const Scope kCosine{[](const Options& o) { return o.lr_schedule_kind == "cosine"; }, "--lr-schedule cosine", schedule_of};
const Scope kDdpBuckets{[](const Options& o) { return o.parallel.strategy == "ddp" && o.parallel.zero == 0; },
                        "DDP (--strategy ddp without --zero)",
                        [](const Options& o) {
                          return o.parallel.zero > 0 ? fmt::format("--zero {}", o.parallel.zero) : strategy_of(o);
                        }};
const Scope kParameterServer{[](const Options& o) { return o.parallel.strategy == "ps"; }, "--strategy ps", strategy_of};
const Scope kFedAvg{[](const Options& o) { return o.parallel.strategy == "fedavg"; }, "--strategy fedavg", strategy_of};
std::string pipeline_of(const Options& o) {
  return fmt::format("--pp {} --micro-batches {}", o.parallel.mesh.pp, o.parallel.pipeline.micro_batches);
}
const Scope kPipeline{[](const Options& o) { return transformer(o) && o.parallel.pipelined(); },
                      "a pipeline (--model gpt or llama with --pp or --micro-batches 2 or more)", pipeline_of};
const Scope kInterleaved{[](const Options& o) { return kPipeline.is(o) && o.pipeline_schedule == "interleaved"; },
                         "a pipeline with --pipeline-schedule interleaved",
                         [](const Options& o) { return pipeline_of(o) + " --pipeline-schedule " + o.pipeline_schedule; }};
const Scope kTensorParallel{[](const Options& o) { return o.parallel.mesh.tp > 1; }, "tensor parallelism (--tp 2 or more)",
                            [](const Options& o) { return fmt::format("--tp {}", o.parallel.mesh.tp); }};
const Scope kSampling{sampling, "a language model's sample at the end (--sample N, N > 0)",
                      [](const Options& o) { return text(o) ? fmt::format("--sample {}", o.sample) : model_of(o); }};
const Scope kBpe{[](const Options& o) { return text(o) && o.tokenizer == "bpe"; }, "--tokenizer bpe",
                 [](const Options& o) { return text(o) ? "--tokenizer " + o.tokenizer : model_of(o); }};
const Scope kCheckpoints{[](const Options& o) { return !o.checkpoint_dir.empty(); }, "--checkpoint-dir",
                         [](const Options&) { return std::string("no --checkpoint-dir"); }};
const Scope kResuming{resuming, "--resume or --auto-resume", [](const Options&) { return std::string("neither"); }};
const Scope kBatchChanges{[](const Options& o) { return resuming(o) || o.elastic_batch == "linear"; },
                          "--resume, --auto-resume or --elastic-batch linear (a global batch that can change)",
                          [](const Options&) { return std::string("none of them"); }};
const Scope kOffload{[](const Options& o) { return o.offload != "none" || !o.memory_limit.empty(); },
                     "--offload optimizer or params, or --memory-limit",
                     [](const Options& o) { return "--offload " + o.offload; }};
const Scope kGrowByNoise{[](const Options& o) { return o.grow_at == "noise"; }, "--grow-at noise",
                         [](const Options& o) { return o.grow_at.empty() ? std::string("no --grow-at") : "--grow-at " + o.grow_at; }};
const Scope kImageFreezing{[](const Options& o) { return image(o) && freezes(o); },
                           "an image model that freezes layers (--freeze-below or --freeze-converged)",
                           [](const Options& o) { return image(o) ? std::string("no freezing") : model_of(o); }};

struct ScopedFlag {
  const char* flag;
  const Scope* scope;
};

// Seed 003 chapter 5 (federated averaging), chapter 8 (freezing, offload), seed 002
// chapters 6-8 (the language models and their layouts): each flag with the runs it shapes.
const std::vector<ScopedFlag>& table() {
  static const std::vector<ScopedFlag> t = {
      // The data and the model.
      {"--data-dir", &kImage}, {"--epochs", &kImage}, {"--limit-train", &kImage}, {"--limit-test", &kImage},
      {"--norm-mean", &kImage}, {"--norm-std", &kImage}, {"--sample-log", &kImage}, {"--hidden", &kMlp},
      {"--tokenizer", &kText}, {"--vocab-size", &kBpe}, {"--context", &kText}, {"--eval-batches", &kText},
      {"--layers", &kText}, {"--d-model", &kText}, {"--sample", &kText}, {"--temperature", &kSampling},
      {"--top-k", &kSampling}, {"--prompt", &kSampling}, {"--lstm-variant", &kLstm}, {"--rnn-activation", &kRnn},
      {"--heads", &kTransformer}, {"--positional", &kTransformer}, {"--post-ln", &kTransformer},
      {"--kv-heads", &kTransformer}, {"--mlp-width", &kTransformer}, {"--rope-theta", &kTransformer},
      {"--window", &kTransformer}, {"--model-config", &kTransformer}, {"--init-from", &kTransformer},
      {"--recompute", &kTransformer},
      // The optimizer and its schedule.
      {"--momentum", &kSgd}, {"--step-size", &kStepSchedule}, {"--gamma", &kStepSchedule}, {"--min-lr", &kCosine},
      // Checkpoints and what adapts.
      {"--checkpoint-every", &kCheckpoints}, {"--keep-checkpoints", &kCheckpoints}, {"--allow-nonfinite", &kResuming},
      {"--scale-lr", &kBatchChanges}, {"--offload-dir", &kOffload}, {"--max-ranks", &kGrowByNoise},
      {"--freeze-cache-mb", &kImageFreezing},
      // The strategies and the layout.
      {"--bucket-mb", &kDdpBuckets}, {"--first-bucket-mb", &kDdpBuckets}, {"--servers", &kParameterServer},
      {"--staleness", &kParameterServer}, {"--clients", &kFedAvg}, {"--local-steps", &kFedAvg},
      {"--non-iid", &kFedAvg}, {"--eval-rounds", &kFedAvg}, {"--pp", &kTransformer}, {"--tp", &kTransformer},
      {"--micro-batches", &kTransformer}, {"--pipeline-schedule", &kPipeline}, {"--balance", &kPipeline},
      {"--chunks", &kInterleaved}, {"--tp-attention", &kTensorParallel},
  };
  return t;
}

const ScopedFlag* find(std::string_view flag) {
  const auto& t = table();
  const auto it = std::find_if(t.begin(), t.end(), [&](const ScopedFlag& f) { return flag == f.flag; });
  return it == t.end() ? nullptr : &*it;
}

}  // namespace

bool flag_applies(std::string_view flag, const TrainOptions& resolved) {
  const ScopedFlag* f = find(flag);
  return !f || f->scope->is(resolved);
}

void check_flags_apply(const std::vector<std::string>& given, const TrainOptions& resolved) {
  for (const std::string& flag : given) {
    const ScopedFlag* f = find(flag);
    if (f && !f->scope->is(resolved))
      throw ConfigError(fmt::format("{} does not apply to this run: it is for {}, and the run has {}", flag,
                                    f->scope->needs, f->scope->run_has(resolved)));
  }
}

std::vector<std::string> scoped_flags() {
  std::vector<std::string> flags;
  for (const ScopedFlag& f : table()) flags.emplace_back(f.flag);
  return flags;
}

}  // namespace weft
