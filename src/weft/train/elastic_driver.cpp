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

namespace weft {

namespace {

// The first training rank (the job's first `workers` ranks) that stays after `change`; -1
// when none does, or when a parameter server is asked to leave (its shard of the state
// goes nowhere): the job then stops.
int first_staying_worker(const parallel::MembershipChange& change, int workers, int ranks) {
  const auto leaves = [&](int r) {
    return std::find(change.leaving.begin(), change.leaving.end(), r) != change.leaving.end();
  };
  for (int r = workers; r < ranks; ++r)
    if (leaves(r)) return -1;
  for (int r = 0; r < workers; ++r)
    if (!leaves(r)) return r;
  return -1;
}

// The global batch of a live job's new generation of `ranks` from the state handed over:
// the same (--elastic-batch fixed), or the same rows per rank (linear).
std::int64_t batch_after_change(const TrainOptions& o, const Checkpoint& image, int ranks) {
  const auto batch = parse_integer(image.meta.info.at("batch")), before = parse_integer(image.meta.info.at("ranks"));
  if (!batch || !before || *batch < 1 || *before < 1 || *batch > (std::int64_t{1} << 40) || *before > (1 << 20))
    throw CommError("the state handed over records no batch or ranks");
  if (o.elastic_batch == "fixed") return *batch;
  return std::max<std::int64_t>(1, std::llround(static_cast<double>(*batch) * ranks / static_cast<double>(*before)));
}

}  // namespace

// A parameter-server rank: it serves the workers until their last step, and checkpoints
// with worker 0 (which saves). In a live job it starts from the state the last generation
// handed over (`image`), and after each step takes part in the ranks' agreement on a
// change: `change` says the one agreed (none: the job ran to its end).
TrainSummary serve_parameters(const TrainOptions& o, const parallel::Job& job, std::FILE* out,
                              parallel::LiveMembership* live, std::optional<Checkpoint> image,
                              std::optional<parallel::MembershipChange>* change) {
  const auto task = make_task(o, 0, job.workers, out);
  Rng rng(o.seed);
  auto model = task->make_model(rng);
  const std::int64_t spe = task->steps_per_epoch();
  if (job.server == 0) parallel::measure_link(*job.world, job.workers, false, model->num_parameters());
  std::optional<Checkpoint> ck = std::move(image);
  Position from;  // the workers' (their Run resolves the same checkpoint)
  double lr = *o.lr;  // the servers apply the updates: with the workers' --scale-lr
  if (!ck && (o.resume || o.auto_resume))
    if (auto latest = latest_checkpoint(o.checkpoint_dir)) ck = load_checkpoint(*latest);
  if (ck) {
    model->load_state_dict(ck->model);
    from = resume_position(*ck, o, *task, lr, nullptr);
  }
  const std::int64_t total = from.step + steps_left(*task, from, *o.max_steps);
  parallel::ServerCheckpoints saves;
  if (!o.checkpoint_dir.empty()) {  // where worker 0 saves (loop below)
    // When the workers save (Run::train): at epoch ends, every --checkpoint-every, at the end.
    const std::int64_t first_end = from.step + batches_left(task->rows_per_epoch(), from.at, *o.batch);
    saves.at = [&o, total, spe, first_end](std::int64_t s) {
      return s == total || (s >= first_end && (s - first_end) % spe == 0) ||
             (o.checkpoint_every > 0 && s % o.checkpoint_every == 0);
    };
  }
  if (live)
    saves.stop_after = [&](std::int64_t step) {
      *change = live->poll(*job.world, step);
      if (!*change) return parallel::ServerCheckpoints::kGoOn;
      return first_staying_worker(**change, job.workers, job.process.world) < 0 ? parallel::ServerCheckpoints::kStop
                                                                               : parallel::ServerCheckpoints::kHandOver;
    };
  const Schedule schedule = lr_schedule(o, spe * task->epochs());
  const auto report = parallel::run_parameter_server(
      *model, job.world, job.workers, o.parallel.servers, job.server, total,
      [&](parallel::NamedParameters shard) { return make_optimizer(o, lr, std::move(shard)); },
      [&](std::int64_t s) { return learning_rate(schedule, lr, s); }, o.parallel.staleness, ck ? ck->meta.step : 0,
      ck ? &ck->optimizer : nullptr, saves);
  if (o.parallel.staleness >= 0)  // the servers speak for themselves (rank 0 is a worker)
    fmt::print(stdout, "parameter server {}: asynchronous, staleness bound {}: {} updates, largest staleness seen {}\n",
               job.server, o.parallel.staleness, report.updates, report.max_staleness);
  return {job.process.rank, {{"steps", report.steps}, {"comm_seconds", report.comm_seconds}}};
}

// A live job's next generation, from the state the last one handed over: the loss window
// goes on (each rank takes the mean so far), and rank 0 says what changed and how long
// training paused for it.
void Run::continue_handed_over() {
  const auto& info = checkpoint_->meta.info;
  auto number = [&](const char* key) {
    const auto v = info.count(key) ? parse_number(info.at(key)) : std::nullopt;
    if (!v || !(*v >= 0 && *v <= 1e15)) throw CommError(std::string("the state handed over has no valid ") + key);
    return *v;
  };
  const auto steps = static_cast<std::int64_t>(number("window_steps"));
  t_.window_loss = number("window_mean_loss") * static_cast<double>(steps);
  t_.window_steps = steps;
  if (!t_.change_agreed || !t_.change) return;  // a process that joined: rank 0 speaks
  const double pause = seconds_since(*t_.change_agreed);
  const auto before = static_cast<int>(number("ranks"));
  if (const auto* relayout = std::get_if<Relayout>(&*t_.change)) {  // a pipeline laid out anew
    const int from = relayout->stages_from, to = relayout->stages_to;
    t_.resizes.push_back({{"step", at_.step}, {"from", before}, {"to", mesh_.size()}, {"stages_from", from},
                          {"stages_to", to}, {"frozen_layers", frozen_}, {"pause_seconds", pause}});
    std::string what = to < from                          ? fmt::format("{} stages merged into {}", from, to)
                       : !relayout->stage_speeds.empty() ? fmt::format("stages balanced for speeds {}", o_.stage_shares)
                                                          : std::string("stages balanced anew");
    if (mesh_.size() < before) what += fmt::format(", {} rank(s) released", before - mesh_.size());
    if (to < from && mesh_.size() == before) what += ", the ranks freed now data-parallel replicas";
    fmt::print(out_, "pipeline after step {}{}: {}; now {}; training paused {:.2f} s\n", at_.step,
               frozen_ > 0 ? fmt::format(" (blocks 0-{} frozen)", frozen_ - 1) : std::string(), what,
               mesh_.shape().describe(), pause);
    std::fflush(out_);
    t_.change_agreed.reset();
    t_.change.reset();
    return;
  }
  const auto& change = std::get<parallel::MembershipChange>(*t_.change);
  const auto left = static_cast<std::int64_t>(change.leaving.size());
  const std::int64_t joined = mesh_.size() - (before - left);
  t_.resizes.push_back({{"step", at_.step}, {"from", before}, {"to", mesh_.size()}, {"joined", joined},
                        {change.failed ? "failed" : "left", left},
                        {"batch", *o_.batch}, {"lr", lr_}, {"pause_seconds", pause}});
  std::string what;
  if (joined > 0) what = fmt::format("{} joined", joined);
  if (left > 0) what += fmt::format("{}{} {}", what.empty() ? "" : ", ", left, change.failed ? "failed" : "left");
  fmt::print(out_, "resized: {} -> {} {} at step {} ({}): batch {}, learning rate {}; training paused {:.2f} s\n", before,
             mesh_.size(), job_.workers < job_.process.world ? "workers" : "ranks", at_.step, what, *o_.batch, lr_, pause);
  std::fflush(out_);  // seen as it happens, also through a pipe
  t_.change_agreed.reset();
  t_.change.reset();
}

std::string Run::hand_over_state(int keep) {
  // The loss window over the replicas, for the next generation to continue.
  double sums[2] = {t_.window_loss, static_cast<double>(t_.window_steps)};
  replicas_.sum(sums, 2);
  parallel::TrainState state = agreed_state_ ? std::move(*agreed_state_) : strategies_->gather_state();
  agreed_state_.reset();
  std::string bytes;
  if (rank_ == 0) bytes = state_image(std::move(state), sums[0] / std::max(sums[1], 1.0), sums[1] / mesh_.shape().dp);
  return parallel::hand_over(*job_.world, std::move(bytes), 0, keep);
}

std::string Run::own_state() {
  const double steps = static_cast<double>(t_.window_steps);
  return state_image(strategies_->gather_state(), t_.window_loss / std::max(steps, 1.0), steps);
}

// The state as a checkpoint image, with the loss window (its mean and steps) to go on.
std::string Run::state_image(parallel::TrainState state, double window_mean, double window_steps) const {
  Checkpoint ck;
  ck.meta = checkpoint_meta();
  ck.meta.info["window_mean_loss"] = fmt::format("{}", window_mean);
  ck.meta.info["window_steps"] = std::to_string(std::llround(window_steps));
  ck.model = std::move(state.model);
  ck.optimizer = std::move(state.optimizer);
  return encode_checkpoint(ck);
}

// A live job's options, checked: what can change its ranks while it runs.
void validate_live(const TrainOptions& o) {
  if ((o.parallel.strategy != "ddp" && o.parallel.strategy != "ps") || o.parallel.model_parallel())
    throw ConfigError("a live elastic job (weft launch --elastic) trains with data parallelism alone: --strategy ddp "
                      "(ZeRO allowed) or ps, without --tp, --pp or --micro-batches");
  if (o.parallel.strategy == "ps" && o.parallel.staleness >= 0)
    throw ConfigError("a live elastic job's parameter server is synchronous: leave out --staleness");
  if (o.dp_shares != "even" && o.dp_shares != "measured")
    throw ConfigError("--dp-shares " + o.dp_shares + ": a live elastic job's replicas change; use even or measured");
  if (o.grow_at == "noise" && (o.elastic_batch != "linear" || o.parallel.zero > 0))
    throw ConfigError("--grow-at noise grows the global batch with the ranks: it needs --elastic-batch linear, and DDP "
                      "(without --zero: the noise is measured on DDP's buckets)");
}

TrainSummary train_live(const TrainOptions& o, parallel::LiveMembership& live, std::FILE* out) {
  // A process that joins late loads its data while it waits to be admitted.
  std::unique_ptr<Task> task;
  if (live.joined_late()) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(std::fopen("/dev/null", "w"), &std::fclose);
    task = make_task(o, 0, 1, quiet.get());
  }
  // What every member of the job must share (a joiner started otherwise is refused).
  const int servers = o.parallel.strategy == "ps" ? o.parallel.servers : 0;  // the last ranks, in every generation
  const std::string what =
      fmt::format("model {} with {}, {} precision, data {}{}{}", o.model, *o.optimizer, o.precision, *o.data,
                  o.parallel.zero > 0 ? fmt::format(", ZeRO-{}", o.parallel.zero) : std::string(),
                  servers > 0 ? fmt::format(", a parameter server of {} rank(s)", servers) : std::string());
  live.keep_last(servers);
  if (!live.enter(what)) {
    fmt::print(stderr, "the job ended before it admitted this process\n");
    return {-1, {}};
  }
  for (const RankTarget& t : parse_grow_at(o.grow_at))
    live.schedule(t.step, t.world, fmt::format("--grow-at {}:{}", t.step, t.world));
  std::string state;  // handed over by the last generation (on the rank that stays first)
  RunTotals totals;
  for (;;) {
    auto world = live.connect();
    std::optional<Checkpoint> image;
    if (live.generation().number > 0)
      image = decode_checkpoint(parallel::share_state(*world, std::move(state)), "the state handed over");
    TrainOptions now = o;
    if (image) now.batch = batch_after_change(o, *image, world->size() - servers);
    parallel::Job job = parallel::join_group(now.parallel, world);
    if (job.serves) {  // a parameter server: it serves this generation and hands its state over with the workers
      std::optional<parallel::MembershipChange> change;
      TrainSummary summary = serve_parameters(now, job, out, &live, std::move(image), &change);
      const int keep = change ? first_staying_worker(*change, job.workers, world->size()) : -1;
      if (keep < 0) return summary;
      parallel::hand_over(*world, std::string(), 0, keep);
      job = {};
      world.reset();
      live.advance(*change);
      continue;
    }
    std::optional<parallel::MembershipChange> change;
    bool failed = false;  // a rank died: the survivors go on from the most advanced one's state
    std::int64_t step = 0;
    {
      Run run(now, job, out, std::move(image), std::move(totals), std::move(task));
      try {
        if (auto stop = run.train(&live)) change = std::get<parallel::MembershipChange>(*stop);  // (no pipelines live)
      } catch (const CommError& e) {
        if (!run.holds_whole_state()) throw;  // (ZeRO: the dead rank's shard is lost)
        fmt::print(stderr, "{}; going on without the rank(s) that failed\n", e.what());
        failed = true;
      }
      const int keep = change ? first_staying_worker(*change, job.workers, world->size()) : -1;  // the first that stays
      if (!failed && (!change || keep < 0)) {  // the end, or every rank asked to leave: the job stops here
        if (change) {
          run.save();
          const bool server =
              std::any_of(change->leaving.begin(), change->leaving.end(), [&](int r) { return r >= job.workers; });
          if (world->rank() == 0)
            fmt::print(out, "stopping after step {}: {}\n", run.step(),
                       server ? "a parameter server was asked to leave (its shard of the state has nowhere to go)"
                              : "every rank was asked to leave");
        }
        if (world->rank() == 0) live.finish();
        return run.finish();
      }
      state = failed ? run.own_state() : run.hand_over_state(keep);
      totals = run.take_totals();
      if (failed) totals.change_agreed = Clock::now();
      task = run.take_task();
      step = run.step();
    }
    const int rank = world->rank();
    const auto before = live.generation();
    job = {};
    world.reset();
    if (failed) {
      const auto after = live.recover(step);
      if (!after) {
        fmt::print(stderr, "the job ended before it admitted this process again\n");
        return {-1, {}};
      }
      if (after->rank != 0) state.clear();  // the survivor with the most steps goes on
      parallel::MembershipChange lost;
      lost.failed = true;
      for (int r = 0; r < before.size(); ++r)
        if (std::find(after->members.begin(), after->members.end(), before.members[static_cast<std::size_t>(r)]) ==
            after->members.end())
          lost.leaving.push_back(r);
      totals.change = lost;
      continue;
    }
    live.advance(*change);
    if (std::find(change->leaving.begin(), change->leaving.end(), rank) != change->leaving.end()) {
      fmt::print(stderr, "left the job after step {}\n", step);
      return {-1, {}};
    }
  }
}

}  // namespace weft
