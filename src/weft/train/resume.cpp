#include "weft/train/resume.h"

#include <fmt/format.h>

#include <cmath>

#include "weft/util/checked.h"
#include "weft/util/parse.h"

namespace weft {

std::optional<Checkpoint> checkpoint_to_resume(const TrainOptions& o, const Task& task, std::FILE* out) {
  if (!o.resume && !o.auto_resume) return std::nullopt;
  auto latest = latest_checkpoint(o.checkpoint_dir);
  if (!latest && o.resume) throw CheckpointError("--resume: no checkpoint in " + o.checkpoint_dir);
  if (!latest) {
    fmt::print(out, "no checkpoint in {} yet: starting from the beginning\n", o.checkpoint_dir);
    return std::nullopt;
  }
  Checkpoint ck = load_checkpoint(*latest);
  if (!o.allow_nonfinite) {
    for (const auto* part : {&ck.model, &ck.optimizer}) {
      for (const auto& [name, t] : *part) {
        const Tensor values = t.to(DType::F64).contiguous();
        const double* v = values.data<double>();
        for (std::int64_t i = 0; i < values.numel(); ++i) {
          if (std::isfinite(v[i])) continue;
          throw CheckpointError(fmt::format("{}: {} '{}' holds {} (element {}): the run had diverged when it was saved; "
                                            "resume from an earlier checkpoint, or pass --allow-nonfinite",
                                            ck.path, part == &ck.model ? "parameter" : "optimizer state", name, v[i], i));
        }
      }
    }
  }
  if (ck.meta.model != task.model_tag())
    throw CheckpointError(ck.path + " holds model '" + ck.meta.model + "', not '" + task.model_tag() + "'");
  if (ck.meta.optimizer != *o.optimizer)
    throw CheckpointError(ck.path + " was trained with optimizer '" + ck.meta.optimizer + "', not '" + *o.optimizer + "'");
  return ck;
}

std::int64_t steps_left(const Task& task, const Position& p, std::int64_t max_steps) {
  std::int64_t n = 0;
  if (p.epoch < task.epochs())
    n = batches_left(task.rows_per_epoch(), p.at, task.global_batch()) + (task.epochs() - p.epoch - 1) * task.steps_per_epoch();
  if (max_steps > 0) n = std::max<std::int64_t>(0, std::min(n, max_steps - p.step));
  return n;
}

Position resume_position(const Checkpoint& ck, const TrainOptions& o, const Task& task, double& lr, std::FILE* out) {
  Position p{ck.meta.epoch, 0, ck.meta.step};
  // The run's settings as the checkpoint recorded them (meta.json: text from outside).
  auto recorded = [&](const char* key, bool whole) -> std::optional<double> {
    if (!ck.meta.info.count(key)) return std::nullopt;
    const std::string& text = ck.meta.info.at(key);
    std::optional<double> v = parse_number(text);
    // Whole numbers (the batch) are bounded, so that their products with positions stay exact.
    if (whole && !(parse_integer(text) && *parse_integer(text) <= (std::int64_t{1} << 40))) v.reset();
    if (!v || !(*v > 0))
      throw CheckpointError(fmt::format("{}: meta.json's {} '{}' is not a positive {}", ck.path, key, text,
                                        whole ? "whole number (at most 2^40)" : "number"));
    return v;
  };
  const auto old_batch = static_cast<std::int64_t>(recorded("batch", true).value_or(static_cast<double>(*o.batch)));
  // Checkpoints before sample_in_epoch recorded the batch index.
  p.at = ck.meta.sample_in_epoch ? *ck.meta.sample_in_epoch
                                 : checked_mul(ck.meta.batch_in_epoch, old_batch, ck.path + ": the samples done (meta.json's batch)");
  if (old_batch != *o.batch && o.scale_lr != "none") {
    const double base = recorded("lr", false).value_or(lr);
    const double ratio = static_cast<double>(*o.batch) / static_cast<double>(old_batch);
    const double scaled = base * (o.scale_lr == "sqrt" ? std::sqrt(ratio) : ratio);
    if (out)
      fmt::print(out, "learning rate scaled {} the global batch ({} -> {}): {} -> {}\n",
                 o.scale_lr == "sqrt" ? "with the square root of" : "linearly with", old_batch, *o.batch, base, scaled);
    lr = scaled;
  }
  if (task.epoch_is_the_run()) {  // from its step, in this run's batches
    if (p.step >= task.steps_per_epoch()) return Position{task.epochs(), 0, p.step};
    return Position{0, checked_mul(p.step, task.global_batch(), ck.path + ": the samples done (its step)"), p.step};
  }
  if (p.at >= task.rows_per_epoch() && p.epoch < task.epochs()) {
    throw CheckpointError(fmt::format("{}: position {} samples into the epoch is past its {} samples (different data?)",
                                      ck.path, p.at, task.rows_per_epoch()));
  }
  return p;
}

}  // namespace weft
