#include <fmt/format.h>

#include <memory>

#include "weft/cli/commands.h"
#include "weft/comm/launcher.h"
#include "weft/train/lm_trainer.h"
#include "weft/train/trainer.h"
#include "weft/util/error.h"

namespace weft::cli {

namespace {

void add_train_flags(CLI::App* cmd, TrainConfig& c) {
  cmd->add_option("--model", c.model, "mlp | cnn | mlp128 | seed-cnn (images); gpt | lstm | rnn (text)")->capture_default_str();
  cmd->add_option("--data", c.data,
                  "images: fashion-mnist or a folder of MNIST-format IDX files; "
                  "text: fortunes (default) or a text file or folder")
      ->capture_default_str();
  cmd->add_option("--data-dir", c.data_dir, "where the fashion-mnist files are (default: the Debian package's folder)");
  cmd->add_option("--epochs", c.epochs, "passes over the training set")->capture_default_str();
  cmd->add_option("--batch", c.batch, "samples per step")->capture_default_str();
  cmd->add_option("--lr", c.lr, "learning rate")->capture_default_str();
  cmd->add_option("--optimizer", c.optimizer, "sgd | adam | adamw")->capture_default_str();
  cmd->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--weight-decay", c.weight_decay, "L2 (sgd, adam) or decoupled (adamw) weight decay")
      ->capture_default_str();
  cmd->add_option("--schedule", c.schedule.kind,
                  "mlp, cnn: learning-rate schedule: constant | step | cosine; gpt: pipeline schedule: naive | gpipe | "
                  "1f1b | interleaved | seed")
      ->capture_default_str();
  cmd->add_option("--warmup", c.schedule.warmup_steps, "linear warm-up steps")->capture_default_str();
  cmd->add_option("--step-size", c.schedule.step_size, "step schedule: steps between decays")->capture_default_str();
  cmd->add_option("--gamma", c.schedule.gamma, "step schedule: decay factor")->capture_default_str();
  cmd->add_option("--min-lr", c.schedule.min_lr, "cosine schedule: final learning rate")->capture_default_str();
  cmd->add_option("--seed", c.seed, "seed for initialization and data order")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--threads", c.threads, "threads for weft and OpenBLAS (default: WEFT_NUM_THREADS or all cores)")
      ->check(positive());
  cmd->add_option("--checkpoint-dir", c.checkpoint_dir, "write checkpoints here (every epoch)");
  cmd->add_flag("--resume", c.resume, "continue from the newest checkpoint in --checkpoint-dir");
  cmd->add_flag("--auto-resume", c.auto_resume,
                "continue from the newest checkpoint if there is one, else start (for weft launch --max-restarts)");
  cmd->add_option("--scale-lr", c.scale_lr, "none | linear: on a resume with another global batch, scale --lr with it")
      ->capture_default_str();
  cmd->add_option("--sample-log", c.sample_log, "append 'epoch step sample' lines (per rank: FILE-rank<r>)");
  cmd->add_option("--save-model", c.save_model, "write the final parameters to this safetensors file");
  cmd->add_option("--checkpoint-every", c.checkpoint_every, "also checkpoint every N steps")->capture_default_str();
  cmd->add_option("--keep-checkpoints", c.keep_checkpoints, "how many checkpoints to keep")->capture_default_str();
  cmd->add_option("--max-steps", c.max_steps, "stop after N steps in total (0: no limit)")->capture_default_str();
  cmd->add_option("--limit-train", c.limit_train, "use only the first N training samples")->capture_default_str();
  cmd->add_option("--limit-test", c.limit_test, "use only the first N test samples")->capture_default_str();
  cmd->add_flag("--quiet", c.quiet, "no progress display");
  cmd->add_option("--dp", c.dp, "data-parallel ranks (under weft launch; default: all ranks of the job)")
      ->check(positive());
  cmd->add_option("--strategy", c.strategy, "ddp | ps (parameter server) | fedavg (federated averaging)")
      ->capture_default_str();
  cmd->add_option("--precision", c.precision,
                  "fp32 | bf16: bf16 products and stored activations, fp32 master weights (less memory)")
      ->capture_default_str();
  cmd->add_option("--servers", c.servers, "ps: parameter-server ranks (the last ones of the job)")->capture_default_str();
  cmd->add_option("--staleness", c.staleness,
                  "ps: asynchronous, a worker at most this many steps ahead of the slowest (-1: synchronous)")
      ->capture_default_str();
  cmd->add_option("--clients", c.clients, "fedavg: clients, one per rank (default: every rank)")
      ->check(positive());
  cmd->add_option("--local-steps", c.local_steps, "fedavg: local steps per round")->capture_default_str();
  cmd->add_option("--non-iid", c.non_iid, "fedavg: Dirichlet concentration of the label skew (inf: IID)")
      ->capture_default_str();
  cmd->add_option("--eval-rounds", c.eval_rounds, "fedavg: print the test accuracy every N rounds")
      ->capture_default_str();
  cmd->add_option("--zero", c.zero, "ZeRO stage: 1 shards the optimizer state, 2 also the gradients, 3 also the "
                                    "parameters (0: off)")
      ->capture_default_str();
  cmd->add_option("--bucket-mb", c.bucket_mb, "DDP gradient bucket size in MiB")->capture_default_str();
  cmd->add_option("--first-bucket-mb", c.first_bucket_mb, "DDP first bucket size in MiB")->capture_default_str();
  cmd->add_option("--timeline", c.timeline, "write a Chrome-trace timeline (per rank: FILE-rank<r>.json)");
}

// Flags only language models use; the shared ones (--batch, --lr, ...) override the LM
// defaults only when given on the command line.
void add_lm_flags(CLI::App* cmd, LmConfig& c, std::string& lstm_variant, std::string& rnn_activation) {
  cmd->add_option("--tokenizer", c.tokenizer, "gpt: char | word")->capture_default_str();
  cmd->add_option("--context", c.context, "gpt: tokens of context")->capture_default_str();
  cmd->add_option("--layers", c.layers, "gpt: transformer blocks (default 4); lstm, rnn: stacked layers (default 2)")
      ->check(positive());
  cmd->add_option("--d-model", c.dim, "gpt: model width; lstm, rnn: embedding and hidden size")->capture_default_str();
  cmd->add_option("--lstm-variant", lstm_variant, "lstm: standard | seed (seed 002 chapter 6: ReLU, no biases)")
      ->capture_default_str();
  cmd->add_option("--rnn-activation", rnn_activation, "rnn: tanh | sigmoid")->capture_default_str();
  cmd->add_option("--heads", c.heads, "gpt: attention heads")->capture_default_str();
  cmd->add_option("--positional", c.positional, "gpt: learned | standard | book (seed 002 chapter 7)")
      ->capture_default_str();
  cmd->add_flag("--post-ln", c.post_ln, "gpt: layer norm after each residual (the original transformer)");
  cmd->add_option("--clip-grad", c.clip_grad, "gpt, lstm, rnn: limit on the global gradient norm (0: none)")
      ->capture_default_str();
  cmd->add_option("--eval-every", c.eval_every, "gpt: validation loss every N steps")->capture_default_str();
  cmd->add_option("--eval-batches", c.eval_batches, "gpt: batches in each validation")->capture_default_str();
  cmd->add_option("--sample", c.sample, "gpt: tokens to generate at the end")->capture_default_str();
  cmd->add_option("--temperature", c.temperature, "gpt: sampling temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", c.top_k, "gpt: sample among the k most likely tokens (0: all)")->capture_default_str();
  cmd->add_option("--prompt", c.prompt, "gpt: text the sample continues")->capture_default_str();
  cmd->add_option("--pp", c.pp, "gpt: pipeline stages (ranks, under weft launch)")->capture_default_str();
  cmd->add_option("--micro-batches", c.micro_batches, "gpt: micro-batches per batch (pipeline)")->capture_default_str();
  cmd->add_option("--chunks", c.chunks, "gpt: model chunks per stage with --schedule interleaved")->capture_default_str();
  cmd->add_option("--balance", c.balance, "gpt: pipeline stages balanced by params | time")->capture_default_str();
  cmd->add_option("--tp", c.tp, "gpt: tensor-parallel ranks (under weft launch)")->capture_default_str();
  cmd->add_flag("--recompute", c.recompute, "gpt: recompute each block's activations in backward (less memory)");
  cmd->add_option("--tp-attention", c.tp_attention,
                  "gpt: attention split megatron (by heads) | seed (seed 002 ch. 8: all-gather Q and K)")
      ->capture_default_str();
}

bool given(CLI::App* cmd, const std::string& flag) { return cmd->get_option(flag)->count() > 0; }

bool is_language_model(const std::string& model) { return model == "gpt" || model == "lstm" || model == "rnn"; }

// The language-model run: LM defaults, then every shared flag the user gave.
int run_lm(CLI::App* cmd, const TrainConfig& t, LmConfig c, const std::string& lstm_variant,
           const std::string& rnn_activation) {
  c.model = t.model;
  if (t.model == "lstm") {
    if (lstm_variant != "standard" && lstm_variant != "seed") {
      throw weft::ConfigError("unknown --lstm-variant '" + lstm_variant + "' (known: standard, seed)");
    }
    if (lstm_variant == "seed") c.model = "lstm-seed";
  }
  if (t.model == "rnn") {
    if (rnn_activation != "tanh" && rnn_activation != "sigmoid") {
      throw weft::ConfigError("unknown --rnn-activation '" + rnn_activation + "' (known: tanh, sigmoid)");
    }
    if (rnn_activation == "sigmoid") c.model = "rnn-sigmoid";
  }
  if (given(cmd, "--data")) c.data = t.data;
  if (given(cmd, "--batch")) c.batch = t.batch;
  if (given(cmd, "--lr")) c.lr = t.lr;
  if (given(cmd, "--weight-decay")) c.weight_decay = t.weight_decay;
  if (given(cmd, "--warmup")) c.warmup = t.schedule.warmup_steps;
  if (given(cmd, "--max-steps")) c.steps = t.max_steps;
  if (given(cmd, "--seed")) c.seed = t.seed;
  c.threads = t.threads;
  c.quiet = t.quiet;
  c.save_model = t.save_model;
  // For language models --schedule names the pipeline schedule (their learning rate always
  // follows warm-up and cosine decay).
  if (given(cmd, "--schedule")) c.pipe_schedule = t.schedule.kind;
  if (given(cmd, "--optimizer")) c.optimizer = t.optimizer;
  if (given(cmd, "--dp")) c.dp = t.dp;
  if (given(cmd, "--zero")) c.zero = t.zero;
  c.precision = t.precision;
  if (given(cmd, "--momentum")) c.momentum = t.momentum;
  c.checkpoint_dir = t.checkpoint_dir;
  c.checkpoint_every = t.checkpoint_every;
  c.keep_checkpoints = t.keep_checkpoints;
  c.resume = t.resume;
  c.auto_resume = t.auto_resume;
  for (const char* flag : {"--epochs", "--strategy", "--timeline", "--limit-train", "--limit-test"}) {
    if (given(cmd, flag)) throw weft::ConfigError(std::string(flag) + " is not supported with --model " + t.model + " yet");
  }
  LmSummary s = train_lm(c, stdout);
  if (s.rank == 0) fmt::print("{}\n", s.to_json());
  return 0;
}

int run_training(const TrainConfig& c, bool json_summary) {
  TrainSummary s = train(c, stdout);
  if (json_summary && s.rank == 0) fmt::print("{}\n", s.to_json());
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, Action& action) {
  auto config = std::make_shared<TrainConfig>();
  auto lm = std::make_shared<LmConfig>();
  auto lstm_variant = std::make_shared<std::string>("standard");
  auto rnn_activation = std::make_shared<std::string>("tanh");
  CLI::App* cmd = app.add_subcommand("train", "train an image classifier or a language model");
  add_train_flags(cmd, *config);
  add_lm_flags(cmd, *lm, *lstm_variant, *rnn_activation);
  cmd->callback([cmd, config, lm, lstm_variant, rnn_activation, &action] {
    if (is_language_model(config->model)) {
      action = [cmd, config, lm, lstm_variant, rnn_activation] {
        return run_lm(cmd, *config, *lm, *lstm_variant, *rnn_activation);
      };
    } else {
      action = [config] { return run_training(*config, true); };
    }
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
