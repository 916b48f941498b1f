#include "weft/train/train_flags.h"

#include <fmt/format.h>

#include "weft/nn/model_recipe.h"

namespace weft {

namespace {

using Options = TrainOptions;
using F = Flag<Options>;

// The field a flag sets.
#define AT(member) [](Options& o) -> FieldRef { return &o.member; }

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
// The sample drawn, not greedy: --top-k shapes the draw (at --temperature 0 nothing is drawn).
const Scope kDrawnSample{[](const Options& o) { return sampling(o) && o.temperature > 0; },
                         "a sample drawn at --temperature above 0",
                         [](const Options& o) {
                           return kSampling.is(o) ? std::string("--temperature 0 (greedy)") : kSampling.run_has(o);
                         }};
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

constexpr double kMaxCount = 1 << 20;  // bounds far above what trains on a CPU, so that no product overflows

// Adds flags to the table under one group, scoped to the runs they shape when a scope is given.
struct Group : FlagGroup<Options> {
  using FlagGroup<Options>::operator();
  void operator()(F f, const Scope& s) const { (*this)(std::move(f).only_for(s.is, s.needs, s.run_has)); }
};

// What trains and how: the model, the data, the optimizer and its schedule, threads, precision.
void add_training(FlagTable<Options>& t) {
  Group add{{t, "training"}};
  add(F("--model", AT(model), "mlp | cnn | mlp128 | seed-cnn (images); gpt | llama | lstm | rnn (text)"));
  add(F("--data", AT(data), "images: fashion-mnist or a folder of IDX, NPY or CSV files (docs/training.md); text: "
                            "fortunes or a text file or folder")
          .defaults("images fashion-mnist, text fortunes"));
  add(F("--data-dir", AT(data_dir), "where the fashion-mnist files are").defaults("/usr/share/datasets/fashion-mnist"), kImage);
  add(F("--epochs", AT(epochs), "passes over the training set").defaults("1").at_least(1), kImage);
  add(F("--batch", AT(batch), "the global batch: samples (text: windows) per step").defaults("images 64, text 16").at_least(1));
  add(F("--lr", AT(lr), "learning rate (text: AdamW's peak)").defaults("images 0.01, text 3e-3").above(0));
  add(F("--optimizer", AT(optimizer), "the optimizer (text: sgd or adamw)").defaults("images sgd, text adamw")
          .one_of({"sgd", "adam", "adamw"}));
  add(F("--momentum", AT(momentum), "SGD momentum").in_open(0, 1), kSgd);
  add(F("--weight-decay", AT(weight_decay), "L2 (sgd, adam) or decoupled (adamw) weight decay")
          .defaults("images 0, text 0.1").at_least(0));
  add(F("--lr-schedule", AT(lr_schedule_kind), "learning-rate schedule").defaults("images constant, text cosine")
          .one_of({"constant", "step", "cosine"}));
  add(F("--warmup", AT(warmup), "linear warm-up steps").defaults("images 0, text 100").at_least(0));
  add(F("--step-size", AT(step_size), "steps between decays by --gamma (required)").at_least(1), kStepSchedule);
  add(F("--gamma", AT(gamma), "the step schedule's decay factor").above(0).finite_value(), kStepSchedule);
  add(F("--min-lr", AT(min_lr), "the cosine schedule's final learning rate").defaults("images 0, text lr / 10").at_least(0),
      kCosine);
  add(F("--clip-grad", AT(clip_grad), "limit on the global gradient norm, 0: none").defaults("images 0, text 1").at_least(0));
  add(F("--seed", AT(seed), "seed for initialization and data order").at_least(0));
  add(F("--threads", AT(threads), "threads of weft's pool, which also runs the matrix products")
          .defaults("WEFT_NUM_THREADS, else all cores").in(1, 4096));
  add(F("--adapt-threads", AT(adapt_threads),
        "on: measure steps with fewer threads now and then and use them while faster (cores busy with other work); "
        "off: always --threads")
          .one_of({"on", "off"}));
  add(F("--precision", AT(precision), "bf16: bf16 products and stored activations, fp32 master weights (less memory)")
          .one_of({"fp32", "bf16"}));
}

// Checkpoints, resuming, and what adapts while the run goes (growth, freezing, offloading, shares).
void add_adaptive(FlagTable<Options>& t) {
  Group add{{t, "checkpoints and adapting"}};
  add(F("--checkpoint-dir", AT(checkpoint_dir), "write checkpoints here (each epoch's end and the end)"));
  add(F("--checkpoint-every", AT(checkpoint_every), "also checkpoint every N steps (0: only at epochs' ends and the end)")
          .at_least(0), kCheckpoints);
  add(F("--keep-checkpoints", AT(keep_checkpoints), "how many checkpoints to keep").at_least(1), kCheckpoints);
  add(F("--resume", AT(resume), "continue from the newest checkpoint in --checkpoint-dir"));
  add(F("--auto-resume", AT(auto_resume),
        "continue from the newest checkpoint if there is one, else start (for weft launch --max-restarts)"));
  add(F("--allow-nonfinite", AT(allow_nonfinite), "resume even from a checkpoint whose tensors hold NaN or inf"), kResuming);
  add(F("--scale-lr", AT(scale_lr), "on a resume with another global batch, scale --lr with it (linear) or its square root")
          .one_of({"none", "linear", "sqrt"}), kBatchChanges);
  add(F("--elastic-batch", AT(elastic_batch),
        "when a live elastic job's ranks change (weft launch --elastic), keep the global batch (fixed), or the rows per "
        "rank (linear; the learning rate as --scale-lr)")
          .one_of({"fixed", "linear"}));
  add(F("--grow-at", AT(grow_at),
        "a live job's ranks over time: STEP:RANKS,... (grow through the launchers' spare places, weft launch "
        "--nproc-per-node MIN:MAX; shrink by the last ranks leaving), or noise (grow while the gradient noise scale "
        "exceeds the global batch, up to --max-ranks)"));
  add(F("--max-ranks", AT(max_ranks), "the most ranks to grow to").at_least(1), kGrowByNoise);
  add(F("--freeze-below", AT(freeze_below), "freeze the first N layers (image models; GPT: blocks): no weight gradients; "
                                            "an image model's frozen outputs cached per sample")
          .at_least(0));
  add(F("--freeze-converged", AT(freeze_converged),
        "RATIO[:STEPS]: freeze a leading layer once its gradient norm stayed under RATIO times its weights' norm for "
        "STEPS steps (default 20)"));
  add(F("--freeze-cache-mb", AT(freeze_cache_mb), "memory for the frozen layers' outputs, per rank (0: recompute them every "
                                                  "step)")
          .in(0, 1e9), kImageFreezing);
  add(F("--hidden", AT(hidden), "its hidden layers' widths, such as 1024,1024").defaults("256,256"), kMlp);
  add(F("--merge-frozen-stages", AT(merge_frozen_stages),
        "a pipeline whose leading stages froze puts their blocks on fewer stages; the ranks freed leave the job (leave) "
        "or become data-parallel replicas (dp)")
          .defaults("keep the stages").one_of({"leave", "dp"}));
  add(F("--offload", AT(offload), "keep the optimizer's state (params: and the parameters, layer by layer) in files, read "
                                  "back ahead of use")
          .one_of({"none", "optimizer", "params"}));
  add(F("--offload-dir", AT(offload_dir), "where --offload keeps its files").defaults("the temporary folder"), kOffload);
  add(F("--memory-limit", AT(memory_limit),
        "the most memory a rank's model states may hold (parameters, gradients, optimizer state), e.g. 200M: above it "
        "the optimizer's state is offloaded"));
  add(F("--stage-shares", AT(stage_shares),
        "a pipeline's stages' relative speeds, such as 2:1 (the slower stage gets fewer blocks), even, or measured "
        "(timed over steps 2-6, the blocks moved when the speeds differ)"));
  add(F("--dp-shares", AT(dp_shares),
        "how a global batch is split among data-parallel replicas: even, measured (in proportion to their measured "
        "speeds), or relative shares such as 2:1"));
}

// What the run writes and how long it goes.
void add_output(FlagTable<Options>& t) {
  Group add{{t, "output"}};
  add(F("--max-steps", AT(max_steps), "stop after N steps in total (images 0: no limit)").defaults("images 0, text 1000").at_least(0));
  add(F("--eval-every", AT(eval_every), "evaluate every N steps (images 0: at each epoch's end); always at the end")
          .defaults("images 0, text 200").at_least(0));
  add(F("--limit-train", AT(limit_train), "use only the first N training samples (0: all)").at_least(0), kImage);
  add(F("--limit-test", AT(limit_test), "use only the first N test samples (0: all)").at_least(0), kImage);
  add(F("--norm-mean", AT(norm_mean), "normalization means of pixel/255, one or one per channel")
          .defaults("fashion-mnist's published figures, other data its training set's"), kImage);
  add(F("--norm-std", AT(norm_std), "normalization standard deviations (as --norm-mean)").defaults("as --norm-mean"), kImage);
  add(F("--sample-log", AT(sample_log), "append 'epoch step sample' lines (per rank: FILE-rank<r>)"), kImage);
  add(F("--save-model", AT(save_model), "write the final parameters to this safetensors file"));
  add(F("--quiet", AT(quiet), "no progress display"));
  add(F("--profile", AT(profile), "print the share of the steps' time in each kind of work (gemm, conv, element-wise and "
                                  "other, optimizer, data, communication), the first step left out"));
  add(F("--metrics", AT(metrics), "write per-step metrics as JSON lines (rank r > 0: FILE-rank<r>.jsonl; also metrics.jsonl "
                                  "in --checkpoint-dir)"));
  add(F("--report", AT(report), "write an HTML report of the run at its end (docs/reports.md)"));
  add(F("--timeline", AT(timeline), "write a Chrome-trace timeline (per rank: FILE-rank<r>.json)"));
  add(F("--config", AT(config_file), "read flags from a YAML file (keys: the long flags without dashes; the command line "
                                     "wins); the run's resolved flags go to config.yaml in --checkpoint-dir"));
}

// Parallelism: the layout and the strategies' settings.
void add_parallel(FlagTable<Options>& t) {
  Group add{{t, "parallelism"}};
  add(F("--dp", AT(parallel.mesh.dp), "data-parallel replicas (under weft launch)")
          .defaults("what the job's ranks allow").at_least(1));
  add(F("--strategy", AT(parallel.strategy), "ddp, ps (parameter server) or fedavg (federated averaging)")
          .one_of({"ddp", "ps", "fedavg"}));
  add(F("--zero", AT(parallel.zero), "ZeRO stage: 1 shards the optimizer state, 2 also the gradients, 3 also the parameters "
                                     "(0: off)")
          .in(0, 3));
  add(F("--bucket-mb", AT(parallel.ddp.bucket_mb), "DDP gradient bucket size in MiB").above(0).finite_value(), kDdpBuckets);
  add(F("--first-bucket-mb", AT(parallel.ddp.first_bucket_mb), "DDP first bucket size in MiB").above(0).finite_value(),
      kDdpBuckets);
  add(F("--grad-dtype", AT(parallel.ddp.grad_dtype), "DDP: the gradients' type in the all-reduce (bf16, fp16: half the bytes, "
                                                 "reduced in fp32; fp16 scaled per bucket)")
          .one_of({"fp32", "bf16", "fp16"}));
  add(F("--error-feedback", AT(parallel.ddp.error_feedback),
        "with --grad-dtype bf16 or fp16: add what rounding took from each step's gradients to the next step's"));
  add(F("--servers", AT(parallel.servers), "parameter-server ranks (the last ones of the job)").at_least(1), kParameterServer);
  add(F("--staleness", AT(parallel.staleness), "asynchronous, a worker at most this many steps ahead of the slowest "
                                               "(-1: synchronous)")
          .at_least(-1), kParameterServer);
  add(F("--clients", AT(clients), "clients, one per rank").defaults("every rank").at_least(1), kFedAvg);
  add(F("--local-steps", AT(parallel.local_steps), "local steps per round").at_least(1), kFedAvg);
  add(F("--non-iid", AT(non_iid), "Dirichlet concentration of the label skew (inf: IID)"), kFedAvg);
  add(F("--eval-rounds", AT(parallel.eval_rounds), "print the test accuracy every N rounds (0: at the end)").at_least(0),
      kFedAvg);
  add(F("--pp", AT(parallel.mesh.pp), "pipeline stages (ranks, under weft launch)").at_least(1), kTransformer);
  add(F("--micro-batches", AT(parallel.pipeline.micro_batches), "micro-batches per batch (a pipeline)").at_least(1),
      kTransformer);
  add(F("--pipeline-schedule", AT(pipeline_schedule), "the pipeline's schedule (seed: an update per micro-batch, seed 002 "
                                                      "ch. 8)")
          .one_of({"naive", "gpipe", "1f1b", "interleaved", "seed"}), kPipeline);
  add(F("--chunks", AT(parallel.pipeline.chunks), "model chunks per stage with --pipeline-schedule interleaved").at_least(2),
      kInterleaved);
  add(F("--balance", AT(parallel.pipeline.balance), "pipeline stages balanced by parameters or measured time")
          .one_of({"params", "time"}), kPipeline);
  add(F("--tp", AT(parallel.mesh.tp), "tensor-parallel ranks (under weft launch)").at_least(1), kTransformer);
  add(F("--tp-attention", AT(parallel.tp_attention), "attention split by heads (megatron) or seed 002 ch. 8's (seed: "
                                                     "all-gather Q and K)")
          .one_of({"megatron", "seed"}), kTensorParallel);
}

// Language models: the tokenizer, the model's sizes, sampling.
void add_language(FlagTable<Options>& t) {
  Group add{{t, "language models"}};
  const std::vector<std::string> model_shape = {"--layers", "--d-model", "--heads", "--positional", "--post-ln",
                                                "--kv-heads", "--mlp-width", "--rope-theta", "--window"};
  std::vector<std::string> init_excludes = model_shape;
  init_excludes.insert(init_excludes.end(), {"--tokenizer", "--vocab-size", "--model-config"});
  add(F("--tokenizer", AT(tokenizer), "char | word | bpe (SentencePiece, trained on the corpus) | a SentencePiece "
                                      "FILE.model"),
      kText);
  add(F("--vocab-size", AT(vocab_size), "pieces at most").in(64, 1000000), kBpe);
  add(F("--context", AT(context), "tokens of context").in(2, kMaxCount), kText);
  add(F("--layers", AT(layers), "gpt, llama: transformer blocks; lstm, rnn: stacked layers")
          .defaults("gpt 4, recurrent 2").in(1, 4096), kText);
  add(F("--d-model", AT(dim), "gpt: model width; lstm, rnn: embedding and hidden size").in(1, 1 << 16), kText);
  add(F("--lstm-variant", AT(lstm_variant), "seed: seed 002 chapter 6's (ReLU, no biases)").one_of({"standard", "seed"}),
      kLstm);
  add(F("--rnn-activation", AT(rnn_activation), "the recurrent cell's activation").one_of({"tanh", "sigmoid"}), kRnn);
  add(F("--heads", AT(heads), "attention heads").in(1, 4096), kTransformer);
  add(F("--positional", AT(positional), "positions: a learned table, sinusoids (standard; book: seed 002 chapter 7's), or "
                                        "rotary")
          .defaults("gpt learned, llama rotary").one_of({"learned", "standard", "book", "rotary"}), kTransformer);
  add(F("--post-ln", AT(post_ln), "layer norm after each residual (the original transformer)"), kTransformer);
  add(F("--kv-heads", AT(kv_heads), "key-value heads of grouped-query attention (a divisor of --heads)")
          .defaults("--heads").in(0, 4096), kTransformer);
  add(F("--mlp-width", AT(mlp_width), "the MLP's width").defaults("gpt 4 x --d-model, llama 8/3 x --d-model rounded up to "
                                                                  "a multiple of 8")
          .in(0, kMaxCount), kTransformer);
  add(F("--rope-theta", AT(rope_theta), "rotary embeddings' base").defaults("10000").above(1), kTransformer);
  add(F("--window", AT(window), "sliding-window attention over this many keys (0: all)").in(0, kMaxCount), kTransformer);
  add(F("--model-config", AT(model_config), "the shape of a Hugging Face config.json (sizes, heads, MLP, norm, rotary, "
                                            "window), trained from scratch with the tokenizer's vocabulary")
          .excluding(model_shape), kTransformer);
  add(F("--init-from", AT(init_from), "start from a model folder in the Hugging Face layout (config.json, "
                                      "model.safetensors, its tokenizer): its sizes and tokenizer")
          .excluding(init_excludes), kTransformer);
  add(F("--recompute", AT(recompute), "recompute each block's activations in backward (less memory)"), kTransformer);
  add(F("--eval-batches", AT(eval_batches), "batches in each validation").in(1, kMaxCount), kText);
  add(F("--sample", AT(sample), "tokens to generate at the end").in(0, kMaxCount), kText);
  add(F("--temperature", AT(temperature), "sampling temperature (0: greedy)").at_least(0), kSampling);
  add(F("--top-k", AT(top_k), "sample among the k most likely tokens (0: all)").at_least(0), kDrawnSample);
  add(F("--prompt", AT(prompt), "what the sample continues").defaults("a new line"), kSampling);
}

#undef AT

}  // namespace

const FlagTable<TrainOptions>& train_flags() {
  static const FlagTable<TrainOptions> table = [] {
    FlagTable<Options> t;
    add_training(t);
    add_adaptive(t);
    add_output(t);
    add_parallel(t);
    add_language(t);
    return t;
  }();
  return table;
}

bool flag_applies(const std::string& flag, const TrainOptions& resolved) {
  return flag_applies(train_flags(), flag, resolved);
}

void check_flags_apply(const std::vector<std::string>& given, const TrainOptions& resolved) {
  check_flags_apply(train_flags(), given, resolved);
}

}  // namespace weft
