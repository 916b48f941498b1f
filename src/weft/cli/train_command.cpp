#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "weft/cli/commands.h"
#include "weft/cli/yaml_config.h"
#include "weft/comm/launcher.h"
#include "weft/report/report.h"
#include "weft/train/flag_scope.h"
#include "weft/train/loop.h"
#include "weft/train/timeline.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::cli {

namespace {

// What trains and how: the model, the data, the optimizer and its schedule, threads.
void add_training_flags(CLI::App* cmd, TrainOptions& c) {
  cmd->add_option("--model", c.model, "mlp | cnn | mlp128 | seed-cnn (images); gpt | llama | lstm | rnn (text)")->capture_default_str();
  cmd->add_option("--data", c.data,
                  "images: fashion-mnist (default) or a folder of IDX, NPY or CSV files (docs/training.md); "
                  "text: fortunes (default) or a text file or folder");
  cmd->add_option("--data-dir", c.data_dir, "where the fashion-mnist files are (default: the Debian package's folder)");
  cmd->add_option("--epochs", c.epochs, "images: passes over the training set (default 1)");
  cmd->add_option("--batch", c.batch, "the global batch (default: images 64, text 16)");
  cmd->add_option("--lr", c.lr, "learning rate (default: images 0.01, text 3e-3)");
  cmd->add_option("--optimizer", c.optimizer, "sgd | adam | adamw (default: images sgd, text adamw)");
  cmd->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--weight-decay", c.weight_decay,
                  "L2 (sgd, adam) or decoupled (adamw) weight decay (default: images 0, text 0.1)");
  cmd->add_option("--lr-schedule", c.lr_schedule_kind,
                  "learning-rate schedule: constant | step | cosine (default: images constant, text cosine)");
  cmd->add_option("--warmup", c.warmup, "linear warm-up steps (default: images 0, text 100)");
  cmd->add_option("--step-size", c.step_size, "step schedule: steps between decays (required with --lr-schedule step)");
  cmd->add_option("--gamma", c.gamma, "step schedule: decay factor")->capture_default_str();
  cmd->add_option("--min-lr", c.min_lr, "cosine schedule: final learning rate (default: images 0, text lr / 10)");
  cmd->add_option("--clip-grad", c.clip_grad, "limit on the global gradient norm, 0: none (default: images 0, text 1)");
  cmd->add_option("--seed", c.seed, "seed for initialization and data order")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--threads", c.threads, "threads of weft's pool, which also runs the matrix products (default: WEFT_NUM_THREADS or all cores)")
      ->check(positive());
  cmd->add_option("--adapt-threads", c.adapt_threads,
                  "on: measure steps with fewer threads now and then and use them while faster (cores busy with other "
                  "work); off: always --threads")
      ->capture_default_str();
}

// Checkpoints, resuming, and what adapts while the run goes (growth, freezing, offloading, shares).
void add_adaptive_flags(CLI::App* cmd, TrainOptions& c) {
  cmd->add_option("--checkpoint-dir", c.checkpoint_dir, "write checkpoints here (each epoch's end and the end)");
  cmd->add_flag("--resume", c.resume, "continue from the newest checkpoint in --checkpoint-dir");
  cmd->add_flag("--auto-resume", c.auto_resume,
                "continue from the newest checkpoint if there is one, else start (for weft launch --max-restarts)");
  cmd->add_flag("--allow-nonfinite", c.allow_nonfinite, "resume even from a checkpoint whose tensors hold NaN or inf");
  cmd->add_option("--scale-lr", c.scale_lr,
                  "none | linear | sqrt: on a resume with another global batch, scale --lr with it (or its square root)")
      ->capture_default_str();
  cmd->add_option("--elastic-batch", c.elastic_batch,
                  "fixed | linear: when a live elastic job's ranks change (weft launch --elastic), keep the global "
                  "batch, or the rows per rank (the learning rate as --scale-lr)")
      ->capture_default_str();
  cmd->add_option("--grow-at", c.grow_at,
                  "a live job's ranks over time: STEP:RANKS,... (grow through the launchers' spare places, "
                  "weft launch --nproc-per-node MIN:MAX; shrink by the last ranks leaving), or noise (grow while the "
                  "gradient noise scale exceeds the global batch, up to --max-ranks)");
  cmd->add_option("--max-ranks", c.max_ranks, "--grow-at noise: the most ranks to grow to")->capture_default_str();
  cmd->add_option("--freeze-below", c.freeze_below,
                  "freeze the first N layers (image models; GPT: blocks): no weight gradients; an image model's "
                  "frozen outputs cached per sample")
      ->capture_default_str();
  cmd->add_option("--freeze-converged", c.freeze_converged,
                  "RATIO[:STEPS]: freeze a leading layer once its gradient norm stayed under RATIO times its weights' "
                  "norm for STEPS steps (default 20)");
  cmd->add_option("--freeze-cache-mb", c.freeze_cache_mb,
                  "memory for the frozen layers' outputs, per rank (0: recompute them every step)")
      ->capture_default_str();
  cmd->add_option("--hidden", c.hidden, "--model mlp: its hidden layers' widths, such as 1024,1024 (default 256,256)");
  cmd->add_option("--merge-frozen-stages", c.merge_frozen_stages,
                  "leave | dp: a pipeline whose leading stages froze puts their blocks on fewer stages; the ranks "
                  "freed leave the job or become data-parallel replicas");
  cmd->add_option("--offload", c.offload,
                  "none | optimizer | params: keep the optimizer's state (and with params the parameters, layer by "
                  "layer) in files, read back ahead of use")
      ->capture_default_str();
  cmd->add_option("--offload-dir", c.offload_dir, "where --offload keeps its files (default: the temporary folder)");
  cmd->add_option("--memory-limit", c.memory_limit,
                  "the most memory a rank's model states may hold (parameters, gradients, optimizer state), e.g. 200M: "
                  "above it the optimizer's state is offloaded");
  cmd->add_option("--stage-shares", c.stage_shares,
                  "a pipeline's stages' relative speeds, such as 2:1 (the slower stage gets fewer blocks), even, or "
                  "measured (timed over steps 2-6, the blocks moved when the speeds differ)")
      ->capture_default_str();
  cmd->add_option("--dp-shares", c.dp_shares,
                  "how a global batch is split among data-parallel replicas: even, measured (in proportion to their "
                  "measured speeds), or relative shares such as 2:1")
      ->capture_default_str();
}

// What the run writes and how long it goes.
void add_output_flags(CLI::App* cmd, TrainOptions& c) {
  cmd->add_option("--sample-log", c.sample_log, "images: append 'epoch step sample' lines (per rank: FILE-rank<r>)");
  cmd->add_option("--save-model", c.save_model, "write the final parameters to this safetensors file");
  cmd->add_option("--checkpoint-every", c.checkpoint_every, "also checkpoint every N steps")->capture_default_str();
  cmd->add_option("--keep-checkpoints", c.keep_checkpoints, "how many checkpoints to keep")->capture_default_str();
  cmd->add_option("--max-steps", c.max_steps, "stop after N steps in total (default: images 0 = no limit, text 1000)");
  cmd->add_option("--eval-every", c.eval_every,
                  "evaluate every N steps (default: images 0 = at each epoch's end, text 200); always at the end");
  cmd->add_option("--limit-train", c.limit_train, "images: use only the first N training samples")->capture_default_str();
  cmd->add_option("--limit-test", c.limit_test, "images: use only the first N test samples")->capture_default_str();
  cmd->add_option("--norm-mean", c.norm_mean, "images: normalization means of pixel/255, one or one per channel "
                                              "(default: the training set's; Fashion-MNIST's published figures)")
      ->delimiter(',');
  cmd->add_option("--norm-std", c.norm_std, "images: normalization standard deviations (as --norm-mean)")->delimiter(',');
  cmd->add_flag("--quiet", c.quiet, "no progress display");
  cmd->add_flag("--profile", c.profile,
                "print the share of the steps' time in each kind of work (gemm, conv, element-wise and other, "
                "optimizer, data, communication), the first step left out");
  cmd->add_option("--precision", c.precision,
                  "fp32 | bf16: bf16 products and stored activations, fp32 master weights (less memory)")
      ->capture_default_str();
  cmd->add_option("--metrics", c.metrics,
                  "write per-step metrics as JSON lines (rank r > 0: FILE-rank<r>.jsonl; also metrics.jsonl in "
                  "--checkpoint-dir)");
  cmd->add_option("--report", c.report, "write an HTML report of the run at its end (docs/reports.md)");
  cmd->add_option("--timeline", c.timeline, "write a Chrome-trace timeline (per rank: FILE-rank<r>.json)");
}

// Parallelism: the layout and the strategies' settings.
void add_parallel_flags(CLI::App* cmd, TrainOptions& c) {
  parallel::ParallelOptions& p = c.parallel;
  cmd->add_option("--dp", p.mesh.dp, "data-parallel replicas (under weft launch; default: what the job's ranks allow)")
      ->check(positive());
  cmd->add_option("--strategy", p.strategy, "ddp | ps (parameter server) | fedavg (federated averaging)")
      ->capture_default_str();
  cmd->add_option("--zero", p.zero, "ZeRO stage: 1 shards the optimizer state, 2 also the gradients, 3 also the "
                                    "parameters (0: off)")
      ->capture_default_str();
  cmd->add_option("--bucket-mb", p.ddp.bucket_mb, "DDP gradient bucket size in MiB")->capture_default_str();
  cmd->add_option("--first-bucket-mb", p.ddp.first_bucket_mb, "DDP first bucket size in MiB")->capture_default_str();
  cmd->add_option("--grad-dtype", p.grad_dtype,
                  "DDP: the gradients' type in the all-reduce: fp32, bf16 or fp16 (half the bytes, reduced in fp32; fp16 "
                  "scaled per bucket)")
      ->capture_default_str();
  cmd->add_flag("--error-feedback", p.error_feedback,
                "with --grad-dtype bf16 or fp16: add what rounding took from each step's gradients to the next step's");
  cmd->add_option("--servers", p.servers, "ps: parameter-server ranks (the last ones of the job)")->capture_default_str();
  cmd->add_option("--staleness", p.staleness,
                  "ps: asynchronous, a worker at most this many steps ahead of the slowest (-1: synchronous)")
      ->capture_default_str();
  cmd->add_option("--clients", c.clients, "fedavg: clients, one per rank (default: every rank)")->check(positive());
  cmd->add_option("--local-steps", p.local_steps, "fedavg: local steps per round")->capture_default_str();
  cmd->add_option("--non-iid", c.non_iid, "fedavg: Dirichlet concentration of the label skew (inf: IID)")
      ->capture_default_str();
  cmd->add_option("--eval-rounds", p.eval_rounds, "fedavg: print the test accuracy every N rounds")->capture_default_str();
  cmd->add_option("--pp", p.mesh.pp, "gpt: pipeline stages (ranks, under weft launch)")->capture_default_str();
  cmd->add_option("--micro-batches", p.pipeline.micro_batches, "gpt: micro-batches per batch (pipeline)")
      ->capture_default_str();
  cmd->add_option("--pipeline-schedule", c.pipeline_schedule,
                  "gpt: naive | gpipe | 1f1b | interleaved | seed (an update per micro-batch, seed 002 ch. 8)")
      ->capture_default_str();
  cmd->add_option("--chunks", p.pipeline.chunks, "gpt: model chunks per stage with --pipeline-schedule interleaved")
      ->capture_default_str();
  cmd->add_option("--balance", p.pipeline.balance, "gpt: pipeline stages balanced by params | time")->capture_default_str();
  cmd->add_option("--tp", p.mesh.tp, "gpt: tensor-parallel ranks (under weft launch)")->capture_default_str();
  cmd->add_option("--tp-attention", p.tp_attention,
                  "gpt: attention split megatron (by heads) | seed (seed 002 ch. 8: all-gather Q and K)")
      ->capture_default_str();
}

// Language models: the tokenizer, the model's sizes, sampling.
void add_language_flags(CLI::App* cmd, TrainOptions& c) {
  auto* tokenizer = cmd->add_option("--tokenizer", c.tokenizer, "text: char | word | bpe (SentencePiece, trained on the corpus) | a "
                                              "SentencePiece FILE.model")
      ->capture_default_str();
  auto* vocab = cmd->add_option("--vocab-size", c.vocab_size, "text, --tokenizer bpe: pieces at most")->capture_default_str();
  cmd->add_option("--context", c.context, "text: tokens of context")->capture_default_str();
  auto* layers = cmd->add_option("--layers", c.layers, "gpt: transformer blocks (default 4); lstm, rnn: stacked layers (default 2)")
      ->check(positive());
  auto* dim = cmd->add_option("--d-model", c.dim, "gpt: model width; lstm, rnn: embedding and hidden size")->capture_default_str();
  cmd->add_option("--lstm-variant", c.lstm_variant, "lstm: standard | seed (seed 002 chapter 6: ReLU, no biases)")
      ->capture_default_str();
  cmd->add_option("--rnn-activation", c.rnn_activation, "rnn: tanh | sigmoid")->capture_default_str();
  auto* heads = cmd->add_option("--heads", c.heads, "gpt: attention heads")->capture_default_str();
  auto* positional = cmd->add_option("--positional", c.positional,
                                     "gpt, llama: learned | standard | book (seed 002 chapter 7) | rotary (default: gpt "
                                     "learned, llama rotary)");
  auto* post_ln = cmd->add_flag("--post-ln", c.post_ln, "gpt: layer norm after each residual (the original transformer)");
  auto* kv_heads = cmd->add_option("--kv-heads", c.kv_heads,
                                   "gpt, llama: key-value heads of grouped-query attention (a divisor of --heads; default: "
                                   "--heads)");
  auto* mlp_width = cmd->add_option("--mlp-width", c.mlp_width,
                                    "gpt, llama: the MLP's width (default: gpt 4 x --d-model, llama 8/3 x --d-model "
                                    "rounded up to a multiple of 8)");
  auto* rope_theta = cmd->add_option("--rope-theta", c.rope_theta, "gpt, llama: rotary embeddings' base (default 10000)");
  auto* window = cmd->add_option("--window", c.window, "gpt, llama: sliding-window attention over this many keys (0: all)");
  auto* model_config = cmd->add_option("--model-config", c.model_config,
                                       "gpt, llama: the shape of a Hugging Face config.json (sizes, heads, MLP, norm, rotary, "
                                       "window), trained from scratch with the tokenizer's vocabulary");
  model_config->excludes(layers)->excludes(dim)->excludes(heads)->excludes(positional)->excludes(post_ln)
      ->excludes(kv_heads)->excludes(mlp_width)->excludes(rope_theta)->excludes(window);
  cmd->add_option("--init-from", c.init_from, "gpt: start from a GPT-2 folder in the Hugging Face layout (config.json, "
                                              "model.safetensors, vocab.json + merges.txt): its sizes and tokenizer")
      ->excludes(tokenizer)->excludes(vocab)->excludes(layers)->excludes(dim)->excludes(heads)->excludes(positional)
      ->excludes(post_ln)->excludes(kv_heads)->excludes(mlp_width)->excludes(rope_theta)->excludes(window)
      ->excludes(model_config);
  cmd->add_flag("--recompute", c.recompute, "gpt: recompute each block's activations in backward (less memory)");
  cmd->add_option("--eval-batches", c.eval_batches, "text: batches in each validation")->capture_default_str();
  cmd->add_option("--sample", c.sample, "text: tokens to generate at the end")->capture_default_str();
  cmd->add_option("--temperature", c.temperature, "text: sampling temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", c.top_k, "text: sample among the k most likely tokens (0: all)")->capture_default_str();
  cmd->add_option("--prompt", c.prompt, "text: what the sample continues (default: a new line)");
}

void add_train_flags(CLI::App* cmd, TrainOptions& c) {
  add_training_flags(cmd, c);
  add_adaptive_flags(cmd, c);
  add_output_flags(cmd, c);
  add_parallel_flags(cmd, c);
  add_language_flags(cmd, c);
}

// The run's page: its metrics (every rank's files) and timelines, when it wrote them.
void write_train_report(const TrainOptions& o) {
  std::vector<std::string> paths = {o.metrics.empty() ? o.checkpoint_dir + "/metrics.jsonl" : o.metrics};
  if (!o.timeline.empty()) {
    if (file_exists(o.timeline)) paths.push_back(o.timeline);
    for (int r = 0; r < 100000 && file_exists(timeline_path(o.timeline, r, 2)); ++r) paths.push_back(timeline_path(o.timeline, r, 2));
  }
  const std::size_t bytes = report::write_page(report::make_report(paths, {}), o.report);
  fmt::print(stderr, "report: {} ({:.0f} KB)\n", o.report, static_cast<double>(bytes) / 1e3);
}

}  // namespace

void add_train_command(CLI::App& app, Action& action) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "train an image classifier or a language model");
  add_train_flags(cmd, *options);
  for (const std::string& flag : scoped_flags())  // the scope table names only real flags
    if (!cmd->get_option_no_throw(flag)) throw std::logic_error("flag_scope.cpp names " + flag + ", not a flag of weft train");
  auto config = std::make_shared<std::string>();
  cmd->add_option("--config", *config, "read flags from a YAML file (keys: the long flags without dashes; the "
                                       "command line wins); the run's resolved flags go to config.yaml in --checkpoint-dir");
  cmd->callback([options, config, cmd, &action] {
    action = [options, config, cmd] {
      if (!config->empty()) apply_config_file(*cmd, *config);  // into *options, under the command line
      TrainOptions o = *options;
      // A flag that does not shape this run is an error; the saved configuration keeps the
      // flags that do (so that it reads back).
      const TrainOptions resolved = with_task_defaults(o);
      check_flags_apply(given_options(*cmd), resolved);
      o.config_yaml = resolved_config(*cmd, [&](const std::string& key) { return flag_applies("--" + key, resolved); });
      // A report needs the metrics on disk: beside the page when the run has no other place.
      if (!o.report.empty() && o.metrics.empty() && o.checkpoint_dir.empty())
        o.metrics = std::filesystem::path(o.report).replace_extension(".metrics.jsonl").string();
      TrainSummary s = train(o, stdout);
      if (s.rank != 0) return 0;
      fmt::print("{}\n", s.to_json());
      std::fflush(stdout);
      if (!o.report.empty()) write_train_report(o);
      return 0;
    };
  });
}

void add_timeline_command(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("timeline", "work with the timelines weft train --timeline writes");
  cmd->require_subcommand(1);
  CLI::App* merge = cmd->add_subcommand("merge", "merge per-rank timelines into one Chrome trace (one track per rank)");
  auto out = std::make_shared<std::string>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  merge->add_option("--out", *out, "the merged file")->required();
  merge->add_option("files", *inputs, "the per-rank files (FILE-rank<r>.json)")->required();
  merge->callback([out, inputs, &action] {
    action = [out, inputs] {
      merge_timelines(*inputs, *out);
      fmt::print("{}: {} timelines merged\n", *out, inputs->size());
      return 0;
    };
  });
}

void add_demo_command(CLI::App& app, Action& action) {
  auto dir = std::make_shared<std::string>();
  auto ranks = std::make_shared<int>(4);
  CLI::App* cmd = app.add_subcommand(
      "demo", "train the CNN on Fashion-MNIST for one epoch with 4 data-parallel ranks and report the test accuracy");
  cmd->add_option("--data-dir", *dir, "where the fashion-mnist files are");
  cmd->add_option("--ranks", *ranks, "data-parallel ranks")->capture_default_str();
  cmd->callback([dir, ranks, &action] {
    action = [dir, ranks] {
      fmt::print("weft demo: a CNN (conv 32, conv 64, linear 128, linear 10) on Fashion-MNIST, 1 epoch,\n"
                 "global batch 64, SGD lr 0.01 momentum 0.9, data parallel on {} ranks (weft launch)\n",
                 *ranks);
      std::fflush(stdout);
      comm::LaunchConfig launch;
      launch.nproc_per_node = *ranks;
      launch.command = {"weft", "train", "--model", "cnn", "--epochs", "1", "--batch", "64", "--quiet"};
      if (!dir->empty()) {
        launch.command.push_back("--data-dir");
        launch.command.push_back(*dir);
      }
      return comm::launch(launch);
    };
  });
}

}  // namespace weft::cli
