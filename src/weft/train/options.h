// The options of a training run, for every task (image classification, language models):
// what to train, on what data, how long, the optimizer and its schedule, checkpoints, and
// the parallel layout. Options whose good value depends on the task are optional: unset,
// the task's default applies (with_task_defaults).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "weft/nn/language_model.h"
#include "weft/nn/transformer.h"
#include "weft/optim/schedule.h"
#include "weft/parallel/job.h"

namespace weft {

struct TrainOptions {
  // The model: mlp | mlp128 | cnn | seed-cnn (images); gpt | lstm | lstm-seed | rnn |
  // rnn-sigmoid (language models).
  std::string model = "mlp";
  std::optional<std::string> data;     // images: fashion-mnist (default) or a folder of IDX,
                                       // files; text: fortunes (default), a file or a folder
  std::string data_dir;                // overrides the Debian package folder for fashion-mnist
  std::int64_t limit_train = 0;        // images: only the first N samples (0: all)
  std::int64_t limit_test = 0;
  // images: x = (pixel / 255 - mean[c]) / std[c], one value or one per channel; empty:
  // Fashion-MNIST's published figures for fashion-mnist, the training set's for other data.
  std::vector<double> norm_mean, norm_std;
  // Language models.
  std::string tokenizer = "char";      // char | word | bpe (trained on the corpus) | FILE.model
  // gpt: start from a GPT-2 folder in the Hugging Face layout (io/hf_import.h): its
  // sizes and tokenizer replace --layers, --d-model, --heads and --tokenizer.
  std::string init_from;
  // gpt, llama: the shape of a Hugging Face config.json (its sizes, heads, MLP, norm, rotary
  // settings, window, head tying), trained from scratch; the vocabulary is the tokenizer's and
  // the context --context.
  std::string model_config;
  std::int64_t vocab_size = 1000;      // bpe: pieces at most
  std::int64_t context = 128;
  std::int64_t layers = 0;             // 0: the model's default (gpt 4, recurrent 2)
  std::int64_t dim = 128;
  std::int64_t heads = 4;
  std::optional<std::string> positional;  // learned | standard | book | rotary (default: gpt learned, llama rotary)
  bool post_ln = false;
  // The block (gpt and llama; nn/decoder_block.h): grouped-query attention's key-value
  // heads (0: as many as heads), the MLP's width (0: gpt 4 d, llama 8/3 d), rotary
  // embeddings' base (default 10000), a sliding attention window (0: none).
  std::int64_t kv_heads = 0;
  std::int64_t mlp_width = 0;
  std::optional<double> rope_theta;
  std::int64_t window = 0;
  bool recompute = false;              // activation recomputation per transformer block
  std::int64_t eval_batches = 16;      // validation batches
  std::int64_t sample = 200;           // tokens generated at the end
  double temperature = 0.8;
  std::int64_t top_k = 0;
  std::string prompt = "\n";
  std::string lstm_variant = "standard";  // lstm: standard | seed (model lstm-seed)
  std::string rnn_activation = "tanh";    // rnn: tanh | sigmoid (model rnn-sigmoid)
  std::string pipeline_schedule = "1f1b";  // parallel.pipeline.schedule, by name

  // How long, and how often to evaluate.
  std::optional<std::int64_t> epochs;  // images (default 1)
  std::optional<std::int64_t> max_steps;   // images: 0 = no limit (default); text: 1000
  std::optional<std::int64_t> eval_every;  // steps; images: 0 = at each epoch's end; text: 200
  bool evaluate = true;

  // The optimizer.
  std::optional<std::int64_t> batch;   // the global batch: images 64, text 16
  std::optional<double> lr;            // images 0.01, text 3e-3
  std::optional<std::string> optimizer;    // sgd | adam | adamw: images sgd, text adamw
  double momentum = 0.9;
  std::optional<double> weight_decay;  // images 0, text 0.1
  std::optional<std::string> lr_schedule_kind;  // constant | step | cosine: images constant, text cosine
  std::optional<std::int64_t> warmup;  // images 0, text 100
  std::optional<double> min_lr;        // cosine: images 0, text lr / 10
  std::optional<std::int64_t> step_size;  // step: steps between decays (no default: a user's choice)
  double gamma = 0.1;                  // step: the decay factor
  std::optional<double> clip_grad;     // global gradient-norm limit: images 0 (none), text 1
  std::string precision = "fp32";      // fp32 | bf16 (products and stored activations)
  std::uint64_t seed = 0;
  int threads = 0;                     // 0: WEFT_NUM_THREADS or the number of cores
  std::string adapt_threads = "on";    // on: use fewer of them while that is faster (busy cores)

  // Checkpoints and outputs.
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;   // steps; 0: at each epoch's end and at the end
  int keep_checkpoints = 3;
  bool resume = false;                 // from the newest checkpoint (which must exist)
  bool auto_resume = false;            // from the newest checkpoint if any (restarts)
  // On a resume with another global batch: "linear" scales the learning rate with it (seed
  // 003: multiply the single-node rate by the number of workers); "none" keeps --lr.
  std::string scale_lr = "none";
  // A live elastic job's global batch when its ranks change: "fixed" keeps it, "linear"
  // keeps the rows per rank (the batch follows the world; the learning rate as --scale-lr).
  std::string elastic_batch = "fixed";
  // A live job's ranks over time: "STEP:RANKS,..." (at the first step boundary from STEP on,
  // grow to RANKS through the launchers' spare places or shrink by the last ranks leaving),
  // or "noise": grow while the gradient noise scale says a larger batch trains efficiently,
  // up to max_ranks.
  std::string grow_at;
  int max_ranks = 64;
  // Layer freezing (seed 003 chapter 8; image models, GPT blocks): the first freeze_below layers are
  // frozen from the start; freeze_converged "RATIO[:STEPS]" freezes a leading layer once
  // its gradient's norm stayed under RATIO times its weights' for STEPS steps (default 20);
  // the frozen layers' outputs are cached per training sample up to freeze_cache_mb.
  std::int64_t freeze_below = 0;
  std::string freeze_converged;
  double freeze_cache_mb = 1024;
  // Adaptive model parallelism (seed 003 chapter 11): in a pipeline, once every block of
  // some stages is frozen, the blocks go onto fewer stages and the ranks freed "leave" the
  // job or join data parallelism ("dp"); "" keeps the stages.
  std::string merge_frozen_stages;
  // --model mlp's hidden widths, "1024,1024" (empty: 256,256).
  std::string hidden;
  // Offload (seed 003 chapter 8; ZeRO-Offload): "optimizer" keeps the optimizer's state in a
  // file in offload_dir (default: the temporary folder), read back ahead of each update;
  // memory_limit (a size, "" none) bounds the model states this rank keeps in memory
  // (parameters, gradients, optimizer state): above it the optimizer's state is offloaded,
  // and a run whose parameters and gradients alone exceed it is refused.
  std::string offload = "none";
  std::string offload_dir;
  std::string memory_limit;
  // How a global batch is dealt to the data-parallel replicas (data/deal.h): "even",
  // "measured" (in proportion to their measured speeds, train/share_balancer.h) or the
  // relative shares themselves, "2:1:1".
  std::string dp_shares = "even";
  // A pipeline's stages' relative speeds, "2:1" (or "even"): each gets blocks in proportion;
  // "measured": timed over the first steps, and the blocks moved when they differ.
  std::string stage_shares = "even";
  std::string save_model;              // the final parameters (safetensors; rank 0)
  std::string config_file;             // weft train --config: the YAML file the flags came from
  std::string config_yaml;             // the resolved options as YAML (weft train --config's
                                       // format): config.yaml in checkpoint_dir, and each
                                       // checkpoint's meta.json (info.config)
  std::string sample_log;              // images: "epoch step index" per trained sample (per rank)
  std::string timeline;                // a Chrome-trace file per rank
  bool allow_nonfinite = false;        // resume from a checkpoint that holds NaN or inf
  std::string metrics;                 // per-step JSON lines (rank 0: FILE; rank r: FILE-rank<r>)
  std::string report;                  // an HTML report of the run, written by rank 0 at the end
  bool quiet = false;
  bool profile = false;                // print where the steps' time went, by kind of work
  // How the closing sample continues its prompt (the prompt and `count` tokens, from the
  // trained model): the command line gives serve's decoding through the key-value cache
  // (serve::continue_tokens, a layer this one does not link); unset,
  // LanguageModel::generate.
  std::function<std::vector<std::int32_t>(LanguageModel&, std::vector<std::int32_t> prompt, std::int64_t count,
                                          double temperature, std::int64_t top_k, Rng&)>
      continue_tokens;

  // Parallelism (dp 0: every rank of the job), and the federated clients' data.
  parallel::ParallelOptions parallel;
  int clients = 0;                     // fedavg: 0 = every rank
  double non_iid = std::numeric_limits<double>::infinity();  // fedavg: Dirichlet label skew
};

bool is_language_model(const std::string& model);
// The options with every unset value given its task's default.
TrainOptions with_task_defaults(TrainOptions options);
// Throws ConfigError naming the first bad value (call on resolved options).
void validate(const TrainOptions& options);
// --dp-shares' relative shares (empty for "even" and "measured"); ConfigError otherwise.
std::vector<double> parse_dp_shares(const std::string& text);
std::vector<double> parse_stage_shares(const std::string& text);  // (empty for even)
// --grow-at's schedule (empty for "noise" or none); throws ConfigError.
struct RankTarget {
  std::int64_t step;
  int world;
};
std::vector<RankTarget> parse_grow_at(const std::string& text);
// --freeze-converged's RATIO and STEPS (none when empty); throws ConfigError.
struct FreezeRule {
  double ratio;
  std::int64_t steps;
};
std::optional<FreezeRule> parse_freeze_converged(const std::string& text);
// The learning-rate schedule the options describe, over `total_steps`.
Schedule lr_schedule(const TrainOptions& options, std::int64_t total_steps);
// Layers of the language model the options build (--layers, else gpt and llama 4, recurrent 2).
std::int64_t model_layers(const TrainOptions& options);
// The transformer (--model gpt or llama) the options build for a vocabulary of `vocab`.
GptConfig transformer_config(const TrainOptions& options, std::int64_t vocab);

}  // namespace weft
