#include <fmt/format.h>

#include <memory>

#include "weft/cli/commands.h"
#include "weft/train/trainer.h"

namespace weft::cli {

namespace {

void add_train_flags(CLI::App* cmd, TrainConfig& c) {
  cmd->add_option("--model", c.model, "mlp | cnn | mlp128 | seed-cnn")->capture_default_str();
  cmd->add_option("--data", c.data, "fashion-mnist, or a folder of MNIST-format IDX files")->capture_default_str();
  cmd->add_option("--data-dir", c.data_dir, "where the fashion-mnist files are (default: the Debian package's folder)");
  cmd->add_option("--epochs", c.epochs, "passes over the training set")->capture_default_str();
  cmd->add_option("--batch", c.batch, "samples per step")->capture_default_str();
  cmd->add_option("--lr", c.lr, "learning rate")->capture_default_str();
  cmd->add_option("--optimizer", c.optimizer, "sgd | adam | adamw")->capture_default_str();
  cmd->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--weight-decay", c.weight_decay, "L2 (sgd, adam) or decoupled (adamw) weight decay")
      ->capture_default_str();
  cmd->add_option("--schedule", c.schedule.kind, "learning-rate schedule: constant | step | cosine")
      ->capture_default_str();
  cmd->add_option("--warmup", c.schedule.warmup_steps, "linear warm-up steps")->capture_default_str();
  cmd->add_option("--step-size", c.schedule.step_size, "step schedule: steps between decays")->capture_default_str();
  cmd->add_option("--gamma", c.schedule.gamma, "step schedule: decay factor")->capture_default_str();
  cmd->add_option("--min-lr", c.schedule.min_lr, "cosine schedule: final learning rate")->capture_default_str();
  cmd->add_option("--seed", c.seed, "seed for initialization and data order")->capture_default_str();
  cmd->add_option("--threads", c.threads, "threads for weft and OpenBLAS (default: WEFT_NUM_THREADS or all cores)");
  cmd->add_option("--checkpoint-dir", c.checkpoint_dir, "write checkpoints here (every epoch)");
  cmd->add_flag("--resume", c.resume, "continue from the newest checkpoint in --checkpoint-dir");
  cmd->add_option("--checkpoint-every", c.checkpoint_every, "also checkpoint every N steps")->capture_default_str();
  cmd->add_option("--keep-checkpoints", c.keep_checkpoints, "how many checkpoints to keep")->capture_default_str();
  cmd->add_option("--max-steps", c.max_steps, "stop after N steps in total (0: no limit)")->capture_default_str();
  cmd->add_option("--limit-train", c.limit_train, "use only the first N training samples")->capture_default_str();
  cmd->add_option("--limit-test", c.limit_test, "use only the first N test samples")->capture_default_str();
  cmd->add_flag("--quiet", c.quiet, "no progress display");
}

int run_training(const TrainConfig& c, bool json_summary) {
  TrainSummary s = train(c, stdout);
  if (json_summary) fmt::print("{}\n", s.to_json());
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, Action& action) {
  auto config = std::make_shared<TrainConfig>();
  CLI::App* cmd = app.add_subcommand("train", "train a model on Fashion-MNIST (or MNIST-format data)");
  add_train_flags(cmd, *config);
  cmd->callback([config, &action] { action = [config] { return run_training(*config, true); }; });
}

void add_demo_command(CLI::App& app, Action& action) {
  auto config = std::make_shared<TrainConfig>();
  config->model = "cnn";
  config->epochs = 1;
  CLI::App* cmd = app.add_subcommand("demo", "train the CNN for one epoch on Fashion-MNIST and report test accuracy");
  cmd->add_option("--data-dir", config->data_dir, "where the fashion-mnist files are");
  cmd->add_option("--threads", config->threads, "threads for weft and OpenBLAS");
  cmd->callback([config, &action] {
    action = [config] {
      fmt::print("weft demo: training a CNN (conv 32, conv 64, linear 128, linear 10) on Fashion-MNIST,\n"
                 "1 epoch, batch {}, SGD lr {} momentum {}\n",
                 config->batch, config->lr, config->momentum);
      std::fflush(stdout);
      TrainSummary s = train(*config, stdout);
      fmt::print("test accuracy: {:.2f}% after {} epoch ({} steps, {:.0f} samples/s on {} threads)\n",
                 100.0 * s.test_accuracy, s.epochs_done, s.steps, s.samples_per_second, s.threads);
      return 0;
    };
  });
}

}  // namespace weft::cli
