#include "weft/train/loop.h"

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
#include "weft/train/train_flags.h"
#include "weft/util/checked.h"
#include "weft/util/env.h"
#include "weft/util/file.h"
#include "weft/util/machine.h"
#include "weft/util/parse.h"
#include "weft/util/progress.h"
#include "weft/util/size.h"
#include "weft/train/run.h"

namespace weft {

namespace {

// The most micro-batches, up to `m`, that split every replica's rows of `batch` over `dp`
// replicas (data/deal.h deals each batch / dp rows, or one more).
int micro_batches_for(std::int64_t batch, int dp, int m) {
  const std::int64_t lo = batch / dp, hi = (batch + dp - 1) / dp;
  while (m > 1 && (lo % m != 0 || hi % m != 0)) --m;
  return m;
}

// Trains on `job`. A pipeline whose frozen blocks change its layout (Run::plan_relayout)
// hands its state to rank 0; the ranks the new layout frees leave, the others form a group
// (the first ranks) and go on from that state in the new layout.
TrainSummary train_in_layouts(TrainOptions o, parallel::Job job, std::FILE* out) {
  std::optional<Checkpoint> image;
  RunTotals totals;
  std::unique_ptr<Task> task;
  std::vector<decltype(job.world)> earlier;  // the groups before: they end with the job
  for (;;) {
    Relayout change;
    std::string state;
    std::int64_t step = 0;
    {
      Run run(o, job, out, std::move(image), std::move(totals), std::move(task));
      const auto next = run.train();
      if (!next) return run.finish();
      change = std::get<Relayout>(*next);  // (a job that is not live changes only its layout)
      state = run.hand_over_state(0);
      totals = run.take_totals();
      task = run.take_task();
      step = run.step();
    }
    const int stay = job.mesh.size() - static_cast<int>(change.freed.size());
    auto world = job.world;
    if (world && world->rank() >= stay) {
      fmt::print(stderr, "rank {} released after step {}: the pipeline merged its frozen stages\n", world->rank(), step);
      return {-1, {}};
    }
    if (world && stay < world->size()) {
      earlier.push_back(world);
      world = parallel::first_ranks(world, stay);
    }
    if (world) state = parallel::share_state(*world, std::move(state));
    image = decode_checkpoint(state, "the state handed over");
    o.parallel.mesh = {0, change.stages_to, o.parallel.mesh.tp};
    const int dp = stay / (change.stages_to * o.parallel.mesh.tp);
    o.parallel.pipeline.micro_batches = micro_batches_for(*o.batch, dp, o.parallel.pipeline.micro_batches);
    if (!change.stage_speeds.empty()) {  // measured: the next layout's stages are given these
      o.stage_shares.clear();
      for (double v : change.stage_speeds) o.stage_shares += fmt::format("{}{:.3f}", o.stage_shares.empty() ? "" : ":", v);
    }
    job = parallel::join_group(o.parallel, world);
  }
}

// Whether `head` (a file's first bytes) is resolved flags as a run writes them into its
// checkpoint folder's config.yaml: whole lines of `flag: value`, each flag one of weft
// train's (its long name without the dashes), nothing else (no comment, no blank line).
bool is_resolved_flags(std::string_view head) {
  head = head.substr(0, head.rfind('\n') + 1);  // whole lines (the head may cut the last)
  const auto& flags = train_flags();
  for (std::size_t at = 0; at < head.size();) {
    const std::size_t end = head.find('\n', at);
    const std::string_view line = head.substr(at, end - at);
    const std::size_t colon = line.find(": ");
    if (colon == std::string_view::npos) return false;
    const std::string flag = "--" + std::string(line.substr(0, colon));
    if (std::none_of(flags.begin(), flags.end(), [&](const auto& f) { return f.name == flag; })) return false;
    at = end + 1;
  }
  return true;
}

// Every path the run will write, checked before its first step (a run must not end by
// failing to save what it trained).
void check_outputs(const TrainOptions& o) {
  for (const auto& [path, flag] : {std::pair{&o.report, "--report"}, {&o.timeline, "--timeline"}, {&o.sample_log, "--sample-log"}})
    if (!path->empty()) check_output_file(*path, flag);
  // The model and the metrics replace only a file of their kind (a saved model is not lost
  // to a mistyped --metrics): safetensors (an 8-byte header length, then its JSON), JSON lines.
  if (!o.save_model.empty())
    check_replaceable_file(o.save_model, "--save-model", "a safetensors file",
                           [](std::string_view head) { return head.size() > 8 && head[8] == '{'; });
  const auto is_metrics = [](std::string_view head) { return head.substr(0, 2) == "{\""; };
  if (!o.metrics.empty()) check_replaceable_file(o.metrics, "--metrics", "a metrics file", is_metrics);
  if (o.checkpoint_dir.empty()) return;
  check_output_folder(o.checkpoint_dir, "--checkpoint-dir");
  // The run's folder's own files as well: metrics.jsonl (replaced, or appended to by a resumed
  // run) only a metrics file, config.yaml only resolved flags as a run writes them there (lines
  // of `flag: value`, nothing else), so that a folder holding the user's own files loses none.
  check_replaceable_file(o.checkpoint_dir + "/metrics.jsonl", "--checkpoint-dir", "a metrics file", is_metrics);
  check_replaceable_file(o.checkpoint_dir + "/config.yaml", "--checkpoint-dir", "a run's resolved flags",
                         is_resolved_flags);
  // A run from the beginning (neither --resume nor --auto-resume) would save its checkpoints
  // among an earlier run's: replacing those of its own steps, pruned by step number (its first
  // ones at once), and the folder's latest still the earlier run's. Refused, unless they are
  // this job's own: a restarted attempt's, or a live job's (its joiners start as it saves).
  if (o.resume || o.auto_resume || !job_first_start() || parallel::LiveMembership::in_live_job()) return;
  if (const std::optional<std::string> latest = latest_checkpoint(o.checkpoint_dir))
    throw ConfigError("--checkpoint-dir " + o.checkpoint_dir + " holds an earlier run's checkpoints (the latest " +
                      *latest + "): continue it with --auto-resume, or give another folder; nothing is overwritten");
}

}  // namespace

TrainSummary train(const TrainOptions& options, std::FILE* out) {
  TrainOptions o = with_task_defaults(options);
  validate(o);
  check_outputs(o);
  kernels::summary();  // WEFT_KERNELS and WEFT_CPU_ISA are checked before the run begins
  if (o.threads > 0) set_num_threads(o.threads);
  Bf16Guard precision(o.precision == "bf16");
  if (auto live = parallel::LiveMembership::from_env()) {
    validate_live(o);
    return train_live(o, *live, out);
  }
  if (!o.grow_at.empty())
    throw ConfigError("--grow-at changes a live job's ranks: start it with weft launch --elastic");
  // The job: who serves, who trains where in the mesh.
  const parallel::Job job = parallel::join_job(o.parallel);
  // The run's folder records how it was configured (the file weft train --config reads).
  if ((!job.world || job.world->rank() == 0) && !o.checkpoint_dir.empty() && !o.config_yaml.empty()) {
    make_directories(o.checkpoint_dir);
    write_file_atomic(o.checkpoint_dir + "/config.yaml", o.config_yaml);
  }
  if (job.serves) return serve_parameters(o, job, out);
  return train_in_layouts(o, job, out);
}

}  // namespace weft
