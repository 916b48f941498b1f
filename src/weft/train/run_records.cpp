#include "weft/train/run.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <thread>

#include "weft/io/checkpoint.h"
#include "weft/io/safetensors.h"
#include "weft/optim/adam.h"
#include "weft/optim/sgd.h"
#include "weft/parallel/elastic.h"
#include "weft/parallel/job.h"
#include "weft/parallel/param_offload.h"
#include "weft/parallel/param_server.h"
#include "weft/parallel/pipeline.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/kernel_table.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"
#include "weft/train/resume.h"
#include "weft/util/checked.h"
#include "weft/util/file.h"
#include "weft/util/machine.h"
#include "weft/util/parse.h"
#include "weft/util/progress.h"
#include "weft/util/size.h"
#include <zlib.h>

namespace weft {

namespace {

// A CRC-32 of the parameters, compared over the replicas: they must stay bitwise equal.
bool replicas_identical(Module& model, const parallel::RankGroup& replicas) {
  if (!replicas) return true;
  // The CRC-32 of the parameters' bytes where they lie (a copy of the model, as a
  // safetensors encoding was, had added two models' size to the run's peak memory).
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor t = p.value().contiguous();
    const auto* bytes = static_cast<const Bytef*>(t.raw_data());
    for (std::size_t left = t.nbytes(); left > 0;) {
      const auto n = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
      crc = crc32(crc, bytes, n);
      bytes += n;
      left -= n;
    }
  }
  const auto mine = static_cast<std::int64_t>(crc);
  const std::vector<std::int64_t> all = replicas.gather(mine);
  return std::all_of(all.begin(), all.end(), [&](std::int64_t c) { return c == mine; });
}

}  // namespace

// The metrics files (--metrics FILE, and metrics.jsonl in the checkpoint folder: the run's
// folder), each rank its own (FILE-rank<r>.jsonl beside rank 0's FILE); a resumed run
// appends. The run record says what the run is. None when the run writes no metrics.
std::unique_ptr<MetricsHook> Run::metrics_hook() {
  std::vector<std::string> paths;
  const int world = mesh_.size();
  auto rank_file = [&](const std::string& file) { return rank_ == 0 ? file : timeline_path(file, rank_, world); };
  if (!o_.metrics.empty()) paths.push_back(rank_file(o_.metrics));
  if (!o_.checkpoint_dir.empty()) paths.push_back(rank_file(o_.checkpoint_dir + "/metrics.jsonl"));
  if (paths.empty()) return nullptr;
  nlohmann::json run = {{"kind", "run"},
                        {"model", o_.model},
                        {"rank", rank_},
                        {"ranks", world},
                        {"layout", mesh_.shape().describe()},
                        {"strategies", strategies_->describe()},
                        {"precision", o_.precision},
                        {"kernels", kernels::summary()},
                        {"batch", *o_.batch},
                        {"unit", task_->unit()},
                        {"steps_per_epoch", task_->steps_per_epoch()},
                        {"step_loss", steps_in_lockstep() ? "global batch" : "this worker's batch"},
                        {"first_step", at_.step + 1},
                        {"planned_steps", planned_},
                        {"parameters", parameters_}};
  if (const auto* p = strategies_->pipeline())
    run["pipeline"] = {{"stages", p->stages()}, {"micro_batches", o_.parallel.pipeline.micro_batches},
                       {"schedule", algo::pipe_schedule_name(o_.parallel.pipeline.schedule)}};
  if (checkpoint_) run["resumed_from"] = checkpoint_->meta.step;
  return std::make_unique<MetricsHook>(std::make_unique<MetricsLog>(paths, checkpoint_.has_value()), run, replicas_,
                                       steps_in_lockstep(), task_->unit(), task_->steps_per_epoch(), t_.start);
}

// Every rank takes part in gathering the state; rank 0 writes it.
void Run::save() {
  if (o_.checkpoint_dir.empty()) return;
  parallel::TrainState state = agreed_state_ ? std::move(*agreed_state_) : strategies_->gather_state();
  agreed_state_.reset();
  if (rank_ != 0) return;
  last_checkpoint_ =
      save_checkpoint(o_.checkpoint_dir, checkpoint_meta(), state.model, state.optimizer, o_.keep_checkpoints, state.per_rank);
}

// Where the run stands and how it was set up (meta.json).
CheckpointMeta Run::checkpoint_meta() const {
  CheckpointMeta meta;
  meta.model = task_->model_tag();
  meta.step = at_.step;
  meta.epoch = at_.epoch;
  meta.batch_in_epoch = at_.at / *o_.batch;
  meta.sample_in_epoch = at_.at;
  meta.optimizer = *o_.optimizer;
  meta.optimizer_steps = strategies_->optimizer().steps();
  meta.rngs.emplace_back(task_->generator_name(), rng_.state());
  for (auto& [name, r] : model_->named_rngs()) meta.rngs.emplace_back(name, r->state());
  meta.info = {{"batch", std::to_string(*o_.batch)}, {"ranks", std::to_string(mesh_.size())},
               {"lr", fmt::format("{}", lr_)},        {"seed", std::to_string(o_.seed)},
               {"layout", mesh_.shape().describe()},  {"data", *o_.data}};
  for (auto& [key, value] : task_->model_metadata()) meta.info[key] = value;
  if (frozen_ > 0) meta.info["frozen_layers"] = std::to_string(frozen_);
  if (!o_.config_yaml.empty()) meta.info["config"] = o_.config_yaml;
  return meta;
}

// The whole model on rank 0; the figures; the sample; the saved model.
TrainSummary Run::finish() {
  strategies_->finish();
  for (const std::string& line : strategies_->report_lines()) fmt::print(out_, "{}\n", line);
  if (profile_)
    for (const std::string& line : profile_->profile().table()) fmt::print(out_, "{}\n", line);
  nlohmann::json summary = {{"model", o_.model}, {"optimizer", *o_.optimizer}, {"precision", o_.precision},
                            {"parameters", parameters_}, {"threads", get_num_threads()},
                            {"ranks", mesh_.size()}, {"kernels", kernels::summary()}};
  report(summary);
  if (profile_) summary["profile"] = profile_->profile().to_json();
  task_->summarize(summary);
  if (timeline_) timeline_->timeline().write(timeline_path(o_.timeline, rank_, mesh_.size()));
  if (rank_ == 0) {
    if (!o_.save_model.empty()) {  // saved first: whatever the sample meets, the model is kept
      Metadata metadata = task_->model_metadata();
      metadata["format"] = "pt";
      make_parent_directories(o_.save_model);
      write_safetensors(o_.save_model, model_->state_dict(), metadata);
    }
    task_->finish(*model_, rng_, out_, summary);
  }
  summary["wall_seconds"] = seconds_since(t_.start);
  summary["peak_rss_bytes"] = peak_resident_bytes();  // the process's, to here (the model saved)
  return {rank_, summary};
}

void Run::report(nlohmann::json& summary) {
  if (t_.resumed_from) summary["resumed_from"] = *t_.resumed_from;
  if (!t_.resizes.empty()) summary["resizes"] = t_.resizes;
  summary["steps"] = at_.step;
  if (frozen_ > 0) summary["frozen_layers"] = frozen_;
  summary["epochs"] = at_.epoch;
  if (t_.train_loss) summary["train_loss"] = *t_.train_loss;
  if (t_.last_eval) summary[t_.last_eval->field] = t_.last_eval->value;
  summary["train_seconds"] = t_.train_seconds;
  summary["rank_parameters"] = strategies_->rank_parameter_elements();
  summary["rank_state_bytes"] = rank_state_bytes_;
  summary["peak_step_bytes"] = t_.peak_step_bytes;
  summary["optimizer_state_bytes"] = strategies_->optimizer().state_total_bytes();
  summary["optimizer_state_resident_bytes"] = strategies_->optimizer().state_resident_bytes();
  double rate = static_cast<double>(t_.units) / std::max(t_.train_seconds, 1e-9);
  const std::string unit = task_->unit();
  if (replicas_) {
    // Totals over the job: every replica's rate.
    const std::vector<double> rates = replicas_.gather(rate);
    std::string per_replica;
    double total = 0;
    for (std::size_t r = 0; r < rates.size(); ++r) {
      total += rates[r];
      per_replica += fmt::format("{}replica {}: {:.0f}", r ? ", " : "", r, rates[r]);
    }
    fmt::print(out_, "throughput ({}/s): {}; total {:.0f}\n", unit, per_replica, total);
    summary["per_rank_" + unit + "_per_second"] = rate;
    rate = total;
    // (Under model parallelism each replica holds its own slice or stage: no checksum to compare.)
    // (Nor when ZeRO-3's parameters stayed sharded: the ranks hold no replica.)
    if (o_.parallel.zero < 3 || o_.parallel.whole_model_at_end) {
      const bool same = replicas_identical(*model_, o_.parallel.model_parallel() ? parallel::RankGroup() : replicas_);
      if (!same) fmt::print(out_, "warning: the ranks' parameters differ (checksums disagree)\n");
      summary["replicas_identical"] = same;
    }
    const parallel::CommStats& comm = strategies_->stats();
    summary["compute_seconds"] = t_.compute_seconds;
    summary["comm_seconds"] = comm.seconds;
    summary["exposed_comm_seconds"] = comm.exposed_seconds;
    summary["overlap"] = comm.seconds > 0 ? std::max(0.0, 1.0 - comm.exposed_seconds / comm.seconds) : 0.0;
  }
  summary[unit + "_per_second"] = rate;
  summary["samples"] = t_.rows;
  if (mesh_.shape().dp > 1) {
    summary["data_parallel"] = mesh_.shape().dp;
    summary["dp_shares"] = proportional_shares(*o_.batch, task_->speeds());
  }
  if (mesh_.shape().tp > 1) summary["tensor_parallel"] = mesh_.shape().tp;
  strategies_->summarize(summary);  // ZeRO's memory, the pipeline's bubble, the parameter server's link
  if (!last_checkpoint_.empty()) summary["checkpoint"] = last_checkpoint_;
}

}  // namespace weft
