#include "weft/train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "weft/autograd/functions.h"
#include "weft/data/dataloader.h"
#include "weft/nn/models.h"
#include "weft/optim/adam.h"
#include "weft/optim/sgd.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"
#include "weft/train/checkpoint.h"
#include "weft/util/progress.h"

namespace weft {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, const Module& model) {
  auto params = model.named_parameters();
  if (c.optimizer == "sgd") return std::make_unique<SGD>(params, c.lr, c.momentum, c.weight_decay);
  AdamOptions o;
  o.weight_decay = c.weight_decay;
  o.decoupled = c.optimizer == "adamw";
  return std::make_unique<Adam>(params, c.lr, o);
}

double evaluate(Module& model, const ImageDataset& test) {
  NoGradGuard no_grad;
  model.eval();
  DataLoader loader(test, {1000, false, false, 0});
  auto order = loader.epoch_order(0);
  std::int64_t correct = 0;
  for (std::int64_t b = 0; b < loader.num_batches(); ++b) {
    Batch batch = loader.batch(order, b);
    Var logits = model(Var(batch.images));
    auto pred = ops::argmax_rows(logits.value());
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == batch.labels[i];
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(std::max<std::int64_t>(test.size(), 1));
}

std::map<std::string, std::string> run_info(const TrainConfig& c) {
  return {{"batch", std::to_string(c.batch)},   {"lr", fmt::format("{}", c.lr)},
          {"seed", std::to_string(c.seed)},     {"epochs", std::to_string(c.epochs)},
          {"schedule", c.schedule.kind},        {"momentum", fmt::format("{}", c.momentum)},
          {"weight_decay", fmt::format("{}", c.weight_decay)}};
}

}  // namespace

void validate(const TrainConfig& c) {
  make_model(c.model, *std::make_unique<Rng>(0));  // throws for an unknown name
  if (c.epochs < 1) throw ConfigError("--epochs must be at least 1, got " + std::to_string(c.epochs));
  if (c.batch < 1) throw ConfigError("--batch must be at least 1, got " + std::to_string(c.batch));
  if (!(c.lr > 0)) throw ConfigError("--lr must be positive, got " + fmt::format("{}", c.lr));
  if (c.optimizer != "sgd" && c.optimizer != "adam" && c.optimizer != "adamw") {
    throw ConfigError("unknown optimizer '" + c.optimizer + "' (known: sgd, adam, adamw)");
  }
  if (c.momentum < 0 || c.momentum >= 1) throw ConfigError("--momentum must be in [0, 1)");
  if (c.weight_decay < 0) throw ConfigError("--weight-decay must be >= 0");
  if (c.threads < 0) throw ConfigError("--threads must be at least 1");
  if (c.checkpoint_every < 0 || c.max_steps < 0 || c.limit_train < 0 || c.limit_test < 0) {
    throw ConfigError("step and sample counts must be >= 0");
  }
  if (c.keep_checkpoints < 1) throw ConfigError("--keep-checkpoints must be at least 1");
  if (c.resume && c.checkpoint_dir.empty()) throw ConfigError("--resume needs --checkpoint-dir");
  validate(c.schedule);
}

std::string TrainSummary::to_json() const {
  nlohmann::json j = {{"model", model},
                      {"optimizer", optimizer},
                      {"parameters", parameters},
                      {"epochs", epochs_done},
                      {"steps", steps},
                      {"samples", samples},
                      {"train_loss", train_loss},
                      {"test_accuracy", test_accuracy},
                      {"train_seconds", train_seconds},
                      {"samples_per_second", samples_per_second},
                      {"wall_seconds", wall_seconds},
                      {"threads", threads}};
  if (!checkpoint.empty()) j["checkpoint"] = checkpoint;
  return j.dump();
}

TrainSummary train(const TrainConfig& config, std::FILE* out) {
  const auto wall_start = Clock::now();
  TrainConfig c = config;
  validate(c);
  if (c.threads > 0) set_num_threads(c.threads);

  std::string dir = resolve_data_dir(c.data, c.data_dir);
  ImageDataset train_set = load_mnist_format(dir, "train", kFashionMnistMean, kFashionMnistStd, c.limit_train);
  ImageDataset test_set;
  if (c.evaluate) test_set = load_mnist_format(dir, "test", kFashionMnistMean, kFashionMnistStd, c.limit_test);

  Rng rng(c.seed);
  auto model = make_model(c.model, rng);
  auto optimizer = make_optimizer(c, *model);
  DataLoader loader(train_set, {c.batch, true, false, c.seed});
  const std::int64_t steps_per_epoch = loader.num_batches();
  if (c.schedule.total_steps <= 1) c.schedule.total_steps = steps_per_epoch * c.epochs;

  TrainSummary s;
  s.model = c.model;
  s.optimizer = c.optimizer;
  s.parameters = model->num_parameters();
  s.threads = get_num_threads();

  std::int64_t step = 0, start_epoch = 0, start_batch = 0;
  if (c.resume) {
    auto latest = latest_checkpoint(c.checkpoint_dir);
    if (!latest) throw CheckpointError("--resume: no checkpoint in " + c.checkpoint_dir);
    Checkpoint ck = load_checkpoint(*latest);
    if (ck.meta.model != c.model) {
      throw CheckpointError(ck.path + " holds model '" + ck.meta.model + "', not '" + c.model + "'");
    }
    if (ck.meta.optimizer != c.optimizer) {
      throw CheckpointError(ck.path + " was trained with optimizer '" + ck.meta.optimizer + "', not '" +
                            c.optimizer + "'");
    }
    model->load_state_dict(ck.model);
    optimizer->load_state(ck.optimizer);
    optimizer->set_steps(ck.meta.optimizer_steps);
    for (const auto& [name, st] : ck.meta.rngs) {
      if (name == "init") rng.set_state(st);
      for (auto& [mname, r] : model->named_rngs())
        if (mname == name) r->set_state(st);
    }
    step = ck.meta.step;
    start_epoch = ck.meta.epoch;
    start_batch = ck.meta.batch_in_epoch;
    if (start_batch >= steps_per_epoch) {
      throw CheckpointError(ck.path + ": position " + std::to_string(start_batch) + " is past the epoch's " +
                            std::to_string(steps_per_epoch) + " batches (different data or batch size?)");
    }
    fmt::print(out, "resumed from {} (epoch {}, step {})\n", ck.path, start_epoch + 1, step);
  }

  auto save = [&](std::int64_t epoch, std::int64_t next_batch) {
    if (c.checkpoint_dir.empty()) return;
    CheckpointMeta meta;
    meta.model = c.model;
    meta.step = step;
    meta.epoch = epoch;
    meta.batch_in_epoch = next_batch;
    meta.optimizer = c.optimizer;
    meta.optimizer_steps = optimizer->steps();
    meta.rngs.emplace_back("init", rng.state());
    for (auto& [name, r] : model->named_rngs()) meta.rngs.emplace_back(name, r->state());
    meta.info = run_info(c);
    s.checkpoint = save_checkpoint(c.checkpoint_dir, meta, model->state_dict(), optimizer->state(), c.keep_checkpoints);
  };

  model->train();
  bool stop = false;
  for (std::int64_t epoch = start_epoch; epoch < c.epochs && !stop; ++epoch) {
    auto order = loader.epoch_order(epoch);
    Progress progress(fmt::format("epoch {}/{} step", epoch + 1, c.epochs), steps_per_epoch);
    double loss_sum = 0;
    std::int64_t loss_count = 0;
    const auto epoch_start = Clock::now();
    double epoch_train_seconds = 0;
    std::int64_t epoch_samples = 0;
    const std::int64_t first_batch = epoch == start_epoch ? start_batch : 0;
    bool partial = false;
    for (std::int64_t b = first_batch; b < steps_per_epoch; ++b) {
      const auto t0 = Clock::now();
      Batch batch = loader.batch(order, b);
      optimizer->set_lr(learning_rate(c.schedule, c.lr, step));
      optimizer->zero_grad();
      Var loss = cross_entropy(model->forward(Var(batch.images)), batch.labels);
      loss.backward();
      optimizer->step();
      ++step;
      epoch_train_seconds += seconds_since(t0);
      epoch_samples += static_cast<std::int64_t>(batch.labels.size());
      double l = loss.item();
      if (!std::isfinite(l)) throw Error(fmt::format("loss became {} at step {}: lower the learning rate", l, step));
      loss_sum += l;
      ++loss_count;
      if (!c.quiet) {
        double rate = static_cast<double>(epoch_samples) / std::max(epoch_train_seconds, 1e-9);
        double per_step = seconds_since(epoch_start) / static_cast<double>(b + 1 - first_batch);
        progress.update(b + 1, per_step * static_cast<double>(steps_per_epoch - b - 1),
                        fmt::format("loss {:.4f}  {:.0f} samples/s", loss_sum / static_cast<double>(loss_count), rate));
      }
      const bool last_of_epoch = b + 1 == steps_per_epoch;
      if (c.max_steps > 0 && step >= c.max_steps) {
        stop = true;
        if (!last_of_epoch) {
          partial = true;
          save(epoch, b + 1);
          break;
        }
      }
      if (c.checkpoint_every > 0 && step % c.checkpoint_every == 0 && !last_of_epoch) save(epoch, b + 1);
    }
    progress.finish();
    s.train_seconds += epoch_train_seconds;
    s.samples += epoch_samples;
    s.steps = step;
    s.train_loss = loss_sum / static_cast<double>(std::max<std::int64_t>(loss_count, 1));
    if (partial) {
      fmt::print(out, "stopped after step {} (--max-steps), in epoch {}: train loss {:.4f}  ({:.0f} samples/s)\n", step,
                 epoch + 1, s.train_loss, static_cast<double>(epoch_samples) / std::max(epoch_train_seconds, 1e-9));
      break;
    }
    s.epochs_done = epoch + 1;
    std::string acc_text;
    if (c.evaluate) {
      s.test_accuracy = evaluate(*model, test_set);
      acc_text = fmt::format(", test accuracy {:.2f}%", 100.0 * s.test_accuracy);
    }
    fmt::print(out, "epoch {}/{}: train loss {:.4f}{}  ({:.0f} samples/s, {} steps)\n", epoch + 1, c.epochs,
               s.train_loss, acc_text, epoch_samples / std::max(epoch_train_seconds, 1e-9), step);
    std::fflush(out);
    save(epoch + 1, 0);
  }
  s.steps = step;
  s.samples_per_second = s.samples / std::max(s.train_seconds, 1e-9);
  s.wall_seconds = seconds_since(wall_start);
  return s;
}

}  // namespace weft
