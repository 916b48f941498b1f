#include "weft/train/loop.h"

#include <fmt/format.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <cmath>
#include <numeric>
#include <optional>
#include <thread>

#include "weft/io/checkpoint.h"
#include "weft/io/safetensors.h"
#include "weft/optim/adam.h"
#include "weft/optim/sgd.h"
#include "weft/parallel/elastic.h"
#include "weft/parallel/fedavg.h"
#include "weft/parallel/job.h"
#include "weft/parallel/param_offload.h"
#include "weft/parallel/param_server.h"
#include "weft/parallel/pipeline.h"
#include "weft/parallel/zero.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/kernel_table.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_governor.h"
#include "weft/tensor/thread_pool.h"
#include "weft/train/metrics.h"
#include "weft/train/noise_scale.h"
#include "weft/train/share_balancer.h"
#include "weft/train/step_profile.h"
#include "weft/train/task.h"
#include "weft/train/timeline.h"
#include "weft/util/checked.h"
#include "weft/util/file.h"
#include "weft/util/machine.h"
#include "weft/util/parse.h"
#include "weft/util/progress.h"
#include "weft/util/size.h"

namespace weft {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o, double lr, parallel::NamedParameters params) {
  if (*o.optimizer == "sgd") return std::make_unique<SGD>(params, lr, o.momentum, *o.weight_decay);
  AdamOptions a;
  a.weight_decay = *o.weight_decay;
  a.decoupled = *o.optimizer == "adamw";
  if (is_language_model(o.model)) a.beta2 = 0.95;  // the usual choice for transformers (GPT-3)
  return std::make_unique<Adam>(params, lr, a);
}

// WEFT_STRAGGLER=RANK:MS makes one rank sleep MS milliseconds per step: a slow worker, to
// see what asynchronous parameter servers and overlap do about it.
int straggler_ms(int rank) {
  const char* e = std::getenv("WEFT_STRAGGLER");
  if (!e) return 0;
  int who = -1, ms = 0;
  char extra = 0;
  if (std::sscanf(e, "%d:%d%c", &who, &ms, &extra) != 2 || who < 0 || ms < 0)
    throw ConfigError(std::string("WEFT_STRAGGLER='") + e + "' is not RANK:MILLISECONDS");
  return who == rank ? ms : 0;
}

// WEFT_SLOWDOWN=RANK:FACTOR makes one rank compute FACTOR times slower (it sleeps FACTOR - 1
// times each step's computation): a slower worker, for heterogeneous data parallelism.
double slowdown_factor(int rank) {
  const char* e = std::getenv("WEFT_SLOWDOWN");
  if (!e) return 1;
  int who = -1;
  double factor = 0;
  char extra = 0;
  if (std::sscanf(e, "%d:%lf%c", &who, &factor, &extra) != 2 || who < 0 || !(factor >= 1 && factor <= 1000))
    throw ConfigError(std::string("WEFT_SLOWDOWN='") + e + "' is not RANK:FACTOR (a factor from 1 to 1000)");
  return who == rank ? factor : 1;
}

// "43:21": the rows of a global batch of `batch` each replica computes at these speeds.
std::string shares_text(std::int64_t batch, const std::vector<double>& speeds) {
  std::string text;
  for (std::int64_t s : proportional_shares(batch, speeds)) {
    if (!text.empty()) text += ':';
    text += std::to_string(s);
  }
  return text;
}

// The checkpoint a run continues from (--resume, --auto-resume), checked against the run.
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

// Where the data stands: the epoch, the samples of it trained, and the optimizer steps taken.
struct Position {
  std::int64_t epoch = 0, at = 0, step = 0;
};

// The steps from `p` to the run's end: the rest of its epoch and the epochs after it,
// within --max-steps in total.
std::int64_t steps_left(const Task& task, const Position& p, std::int64_t max_steps) {
  std::int64_t n = 0;
  if (p.epoch < task.epochs())
    n = batches_left(task.rows_per_epoch(), p.at, task.global_batch()) + (task.epochs() - p.epoch - 1) * task.steps_per_epoch();
  if (max_steps > 0) n = std::max<std::int64_t>(0, std::min(n, max_steps - p.step));
  return n;
}

// The position a checkpoint records, in samples of the epoch, so that a run with another
// global batch or number of ranks continues the epoch exactly (task.h); the learning rate
// may follow the batch (--scale-lr linear or sqrt; said on `out` unless null).
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
  if (p.at >= task.rows_per_epoch() && p.epoch < task.epochs()) {
    throw CheckpointError(fmt::format("{}: position {} samples into the epoch is past its {} samples (different data?)",
                                      ck.path, p.at, task.rows_per_epoch()));
  }
  return p;
}

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

// A parameter-server rank: it serves the workers until their last step, and checkpoints
// with worker 0 (which saves). In a live job it starts from the state the last generation
// handed over (`image`), and after each step takes part in the ranks' agreement on a
// change: `change` says the one agreed (none: the job ran to its end).
TrainSummary serve_parameters(const TrainOptions& o, const parallel::Job& job, std::FILE* out,
                              parallel::LiveMembership* live = nullptr, std::optional<Checkpoint> image = {},
                              std::optional<parallel::MembershipChange>* change = nullptr) {
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

// A CRC-32 of the parameters, compared over the replicas: they must stay bitwise equal.
bool replicas_identical(Module& model, comm::Communicator* replicas) {
  if (!replicas) return true;
  const std::string bytes = encode_safetensors(model.state_dict());
  std::int64_t mine = static_cast<std::int64_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
  std::vector<std::int64_t> all(static_cast<size_t>(replicas->size()));
  replicas->allgather(&mine, all.data(), 1, comm::DataType::kI64)->wait();
  return std::all_of(all.begin(), all.end(), [&](std::int64_t c) { return c == mine; });
}

// A rank's figures of the whole run, and of the window since the last evaluation: carried
// from one generation of a live elastic job to the next.
struct RunTotals {
  Clock::time_point start = Clock::now();
  std::int64_t peak_step_bytes = 0, units = 0;  // units: this replica's
  std::int64_t rows = 0;  // the global batches' rows trained
  double train_seconds = 0, compute_seconds = 0;
  std::optional<double> train_loss;  // the last window's mean (none when nothing was trained)
  std::optional<Evaluation> last_eval;
  std::int64_t window_steps = 0, window_units = 0;  // window_units: every replica's
  double window_loss = 0, window_seconds = 0;
  nlohmann::json resizes = nlohmann::json::array();  // a live job's changes so far
  std::optional<Clock::time_point> change_agreed;     // when the change under way was agreed
  std::optional<parallel::MembershipChange> change;             // and what it is
  std::optional<std::int64_t> resumed_from;  // the step of the checkpoint the run resumed from
  NoiseScale noise;                    // --grow-at noise: the gradient noise scale
  std::int64_t noise_quiet_until = 0;  // no new decision before this step
};

// One training run on a training rank: what the loop needs between steps.
class Run {
 public:
  // `image`: the state a live job's last generation handed over (instead of --resume's
  // checkpoint), `totals`: this process's figures so far, `task`: its data, already loaded
  // (for the same global batch).
  Run(TrainOptions options, const parallel::Job& job, std::FILE* out, std::optional<Checkpoint> image = {},
      RunTotals totals = {}, std::unique_ptr<Task> task = nullptr);
  // Trains to the end, or (a live job) until the ranks agree on a change of membership.
  std::optional<parallel::MembershipChange> train(parallel::LiveMembership* live = nullptr);
  // Collective: the run's state as a checkpoint image, given to rank `keep` of the group.
  std::string hand_over_state(int keep);
  // After a failure of the group: whether this rank holds the whole state (DDP: every
  // replica does; ZeRO's shards do not), and that state, taken without communicating.
  // (the parameter server's servers hold theirs).
  bool holds_whole_state() {
    return !strategies_->find<parallel::Zero>() && !strategies_->find<parallel::ParameterServer>();
  }
  std::string own_state();
  RunTotals take_totals() { return std::move(t_); }
  std::unique_ptr<Task> take_task() { return std::move(task_); }
  std::int64_t step() const { return at_.step; }
  TrainSummary finish();
  void save();

 private:
  void resume();
  void continue_handed_over();
  CheckpointMeta checkpoint_meta() const;
  std::string state_image(parallel::TrainState state, double window_mean, double window_steps) const;
  void step(bool last);
  std::optional<Evaluation> evaluate(bool round_only);
  void report(nlohmann::json& summary);
  void open_metrics();
  void record_step(const std::optional<Evaluation>& e);
  void adapt_threads(double step_seconds);
  void rebalance();
  void observe_noise(const parallel::StepBatch& batch, std::int64_t rows);
  void build_strategies();
  void place_optimizer_state();
  void freeze_converged();
  std::optional<parallel::MembershipChange> plan_relayout(bool frozen_changed) const;
  void measure_stage_speeds();
  std::int64_t parameters_below(std::size_t layers) const;
  void grow_by_noise(parallel::LiveMembership& live);

  TrainOptions o_;
  const parallel::Job& job_;
  const parallel::Mesh& mesh_;
  const int rank_;
  std::FILE* out_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> devnull_{nullptr, &std::fclose};
  std::unique_ptr<Task> task_;
  comm::Communicator* replicas_;
  Rng rng_;
  std::shared_ptr<Module> model_;
  double lr_;
  std::optional<Checkpoint> checkpoint_;
  Position at_;
  std::unique_ptr<parallel::Strategies> strategies_;
  Schedule schedule_;
  std::int64_t planned_ = 0;
  std::string last_checkpoint_;
  std::unique_ptr<Timeline> timeline_;
  std::optional<StepProfile> profile_;  // --profile
  int straggle_ms_ = 0;
  double slowdown_ = 1;
  std::optional<ShareBalancer> balancer_;  // --dp-shares measured
  parallel::LossFn loss_fn_;
  std::unique_ptr<MetricsLog> metrics_;
  std::optional<ThreadGovernor> governor_;  // --adapt-threads on with more than one thread
  OtherCpuLoad other_load_;
  // The last step's figures (the metrics file's step record).
  struct StepFigures {
    double loss = 0, lr = 0, seconds = 0, compute = 0, comm = 0, exposed = 0;
    std::int64_t units = 0, peak_bytes = 0, rows = 0;  // units: this replica's; rows: the global batch's
    int threads = 1;
  } last_;
  std::int64_t rank_state_bytes_ = 0;
  bool said_offload_ = false;
  std::size_t frozen_ = 0;                 // leading layers frozen
  bool caches_ = false;                    // the task keeps the frozen layers' outputs
  std::optional<FreezeRule> freeze_rule_;  // --freeze-converged
  std::vector<std::int64_t> calm_;         // per layer: steps in a row under the ratio
  // A pipeline whose frozen blocks changed goes on in another layout after the step
  // (plan_relayout).
  std::optional<parallel::MembershipChange> relayout_;
  // A live parameter-server job's state, received from the servers as soon as a change
  // was agreed (they send it then, unasked): the hand-over or the last checkpoint use it.
  std::optional<parallel::TrainState> agreed_state_;
  // --stage-shares measured: the steps timed so far and this stage's computation in them.
  bool measure_stages_ = false;
  int stage_steps_ = 0;
  double stage_busy_ = 0;
  RunTotals t_;
};

Run::Run(TrainOptions options, const parallel::Job& job, std::FILE* out, std::optional<Checkpoint> image, RunTotals totals,
         std::unique_ptr<Task> task)
    : o_(std::move(options)), job_(job), mesh_(job.mesh), rank_(job.process.rank), out_(out), rng_(o_.seed), lr_(*o_.lr),
      t_(std::move(totals)) {
  if (rank_ != 0) {  // one voice: rank 0 reports
    devnull_.reset(std::fopen("/dev/null", "w"));
    out_ = devnull_.get();
    o_.quiet = true;
  }
  if (task && task->regroup(*o_.batch, mesh_.dp_rank(), mesh_.shape().dp)) {  // the data stays loaded
    task_ = std::move(task);
  } else {
    task_ = make_task(o_, mesh_.dp_rank(), mesh_.shape().dp, out_);
  }
  replicas_ = mesh_.dp().get();
  if (const std::vector<double> shares = parse_dp_shares(o_.dp_shares); !shares.empty()) {
    if (static_cast<int>(shares.size()) != mesh_.shape().dp)
      throw ConfigError(fmt::format("--dp-shares {}: {} shares for {} data-parallel replicas", o_.dp_shares, shares.size(),
                                    mesh_.shape().dp));
    task_->set_speeds(shares);
    fmt::print(out_, "batch shares: {} of {} rows per replica (--dp-shares {})\n", shares_text(*o_.batch, shares),
               *o_.batch, o_.dp_shares);
  }
  if (o_.dp_shares == "measured" && mesh_.shape().dp > 1) balancer_.emplace();
  // The model: the same on every rank (one seed), resumed before the strategies split it.
  model_ = task_->make_model(rng_);
  const std::string about = task_->describe(*model_);
  if (!about.empty() && !t_.change) fmt::print(out_, "{}\n", about);  // (said once in a live job)
  if (image && (image->meta.model != task_->model_tag() || image->meta.optimizer != *o_.optimizer))
    throw ConfigError(fmt::format("the job trains model '{}' with {}, this process was started for '{}' with {}: join a "
                                  "live job with its own command",
                                  image->meta.model, image->meta.optimizer, task_->model_tag(), *o_.optimizer));
  checkpoint_ = image ? std::move(image) : checkpoint_to_resume(o_, *task_, out_);
  if (checkpoint_) {
    model_->load_state_dict(checkpoint_->model);
    at_ = resume_position(*checkpoint_, o_, *task_, lr_, out_);
  }
  // Frozen layers: --freeze-below, and those the run resumed had frozen.
  freeze_rule_ = parse_freeze_converged(o_.freeze_converged);
  frozen_ = static_cast<std::size_t>(o_.freeze_below);
  if (checkpoint_ && checkpoint_->meta.info.count("frozen_layers")) {
    const std::string& text = checkpoint_->meta.info.at("frozen_layers");
    const auto n = parse_integer(text);
    if (!n || *n < 0 || *n > (1 << 20))
      throw CheckpointError(checkpoint_->path + ": meta.json's frozen_layers '" + text + "' is not a layer count");
    frozen_ = std::max<std::size_t>(frozen_, static_cast<std::size_t>(*n));
  }
  if (frozen_ > 0 || freeze_rule_) {
    task_->freeze(0, 0);  // (a task whose model has no layers in sequence refuses here)
    const std::size_t layers = task_->layers(*model_);
    if (frozen_ + 1 > layers)
      throw ConfigError(fmt::format("--freeze-below {}: the model has {} layers, and one at least must train", frozen_, layers));
  }
  build_strategies();
  if (checkpoint_) resume();
  if (!o_.merge_frozen_stages.empty()) relayout_ = plan_relayout(false);
  if (auto* p = strategies_->find<parallel::Pipeline>(); p && p->pipeline().stages() > 1)
    measure_stages_ = o_.stage_shares == "measured";
  if (frozen_ > 0 && !t_.change)
    fmt::print(out_, "frozen: the first {} layer(s), {} parameters; {}\n", frozen_, parameters_below(frozen_),
               caches_ ? fmt::format("their outputs cached up to {} MiB per rank", o_.freeze_cache_mb)
                       : std::string("computed without their weights' gradients"));
  if (checkpoint_ && checkpoint_->meta.info.count("window_mean_loss")) continue_handed_over();
  if (mesh_.size() > 1 || job_.world)
    fmt::print(out_, "layout: {} ranks, {}; strategies: {}\n", job_.process.world, mesh_.shape().describe(),
               strategies_->describe());
  for (const std::string& line : strategies_->intro_lines()) fmt::print(out_, "{}\n", line);
  std::fflush(out_);

  schedule_ = lr_schedule(o_, task_->steps_per_epoch() * task_->epochs());
  planned_ = steps_left(*task_, at_, *o_.max_steps);
  open_metrics();
  if (!o_.timeline.empty()) {
    timeline_ = std::make_unique<Timeline>(rank_);
    strategies_->record_spans(true);
  }
  straggle_ms_ = straggler_ms(rank_);
  slowdown_ = o_.parallel.pipelined() ? 1 : slowdown_factor(rank_);
  if (o_.profile) profile_.emplace();
  if (o_.adapt_threads == "on" && get_num_threads() > 1) governor_.emplace(get_num_threads());
  loss_fn_ = [this](Module& m, const parallel::StepBatch& b) { return task_->loss(m, b); };
  rank_state_bytes_ = static_cast<std::int64_t>(allocator_live_bytes());
}

// The strategies over the parameters not frozen (whose layers compute without gradients).
void Run::build_strategies() {
  const std::size_t frozen = frozen_;
  const Task* task = task_.get();
  const auto is_frozen = [frozen, task](const std::string& name) {
    const int layer = task->layer_of(name);
    return layer >= 0 && static_cast<std::size_t>(layer) < frozen;
  };
  for (auto& [name, p] : model_->named_parameters()) p.set_requires_grad(!is_frozen(name));
  o_.parallel.pipeline.stage_speeds = parse_stage_shares(o_.stage_shares);
  o_.parallel.pipeline.slowdown = slowdown_factor(rank_);  // (a pipeline slows each micro-batch)
  o_.parallel.pipeline.frozen_blocks = static_cast<std::int64_t>(frozen_);
  if (frozen_ > 0) caches_ = task_->freeze(frozen_, static_cast<std::int64_t>(o_.freeze_cache_mb * (1 << 20)));
  strategies_ = std::make_unique<parallel::Strategies>(*model_, is_frozen);
  const parallel::OptimizerFactory optimizer_for = [this](parallel::NamedParameters params) {
    return make_optimizer(o_, lr_, std::move(params));
  };
  if (o_.offload == "params") {  // (it is the data-parallel strategy too)
    const std::string dir = !o_.offload_dir.empty() ? o_.offload_dir : std::filesystem::temp_directory_path().string();
    const Task* task_for_loss = task_.get();  // (an image model's loss from its output; a GPT's head has its own)
    strategies_->add(std::make_unique<parallel::ParameterOffload>(
        dir, mesh_.dp(), [task_for_loss](const Var& y, const parallel::StepBatch& b) { return task_for_loss->output_loss(y, b); },
        optimizer_for));
  } else {
    parallel::add_strategies(*strategies_, o_.parallel, job_, optimizer_for);
  }
  strategies_->prepare(optimizer_for);
  if (o_.grow_at == "noise")
    if (auto* dp = strategies_->find<parallel::DataParallel>(); dp && dp->ddp()) dp->ddp()->measure_norms(true);
  if (timeline_) strategies_->record_spans(true);
  place_optimizer_state();
}

// --offload optimizer and --memory-limit: the optimizer's state in memory, or in a file
// read back ahead of each update when asked or when the model states would exceed the limit.
void Run::place_optimizer_state() {
  const std::int64_t limit = o_.memory_limit.empty() ? 0 : parse_size(o_.memory_limit, "--memory-limit");
  if (auto* offload = strategies_->find<parallel::ParameterOffload>()) {
    const std::int64_t need = offload->resident_bytes() + strategies_->optimizer().state_resident_bytes();
    if (limit > 0 && need > limit)
      throw ConfigError(fmt::format("--memory-limit {}: with the parameters offloaded a rank still holds {:.1f} MiB of "
                                    "them and their optimizer state (3 layers' worth)",
                                    o_.memory_limit, static_cast<double>(need) / (1 << 20)));
    return;
  }
  Optimizer& opt = strategies_->optimizer();
  std::int64_t params = 0;  // the trained parameters' bytes (their gradients take as many)
  for (const auto& [name, p] : strategies_->part().trained) params += static_cast<std::int64_t>(p.value().nbytes());
  const std::int64_t whole = opt.state_total_bytes(), largest = opt.state_largest_bytes();
  // Offloaded: three parameters' buffers in memory (one updated, one read ahead, one written
  // back), or two where three would pass the limit; only worth it below the whole state.
  const int slots = limit == 0 || 2 * params + 3 * largest <= limit ? 3 : 2;
  const bool asked = o_.offload == "optimizer";
  const bool offload = whole > 0 && (asked || (limit > 0 && 2 * params + whole > limit && slots * largest < whole));
  const std::int64_t state = offload ? slots * largest : whole;
  if (limit > 0 && 2 * params + state > limit)
    throw ConfigError(fmt::format(
        "--memory-limit {}: this rank's model states need {:.1f} MiB in memory (parameters {:.1f} MiB, their gradients as "
        "many, the optimizer's state {:.1f} MiB{}); --offload params keeps the parameters in a file too",
        o_.memory_limit, static_cast<double>(2 * params + state) / (1 << 20), static_cast<double>(params) / (1 << 20),
        static_cast<double>(state) / (1 << 20), offload ? " of it at a time" : ""));
  if (!offload) return;
  const std::string dir = !o_.offload_dir.empty() ? o_.offload_dir : std::filesystem::temp_directory_path().string();
  opt.offload_state(dir, slots);
  if (!said_offload_)
    fmt::print(out_, "optimizer state offloaded to {}: {:.1f} MiB there, {:.1f} MiB in memory{}\n", dir,
               static_cast<double>(whole) / (1 << 20), static_cast<double>(opt.state_resident_bytes()) / (1 << 20),
               asked ? "" : fmt::format(" (the model states exceed --memory-limit {})", o_.memory_limit));
  said_offload_ = true;
}

// The parameters of the first `layers` layers (full shapes: a pipeline stage freed the
// others' values).
std::int64_t Run::parameters_below(std::size_t layers) const {
  std::int64_t n = 0;
  for (const auto& [name, shape] : strategies_->part().layout) {
    const int layer = task_->layer_of(name);
    n += layer >= 0 && static_cast<std::size_t>(layer) < layers ? shape_numel(shape) : 0;
  }
  return n;
}

// --freeze-converged, after a step: each leading layer's gradient norm against its weights'
// (the same on every replica after the all-reduce, summed over a pipeline's stages: every
// rank decides alike). The layers that stayed under the ratio for the window from the first
// unfrozen one on are frozen, with the layers without parameters after them, while one with
// parameters still trains. A pipeline goes on in a new layout after the step.
void Run::freeze_converged() {
  const std::size_t layers = task_->layers(*model_);
  std::vector<double> sums(3 * layers, 0);  // per layer: gradient, weights (squared norms), has parameters
  for (const auto& [name, p] : strategies_->part().trained) {
    const int layer = task_->layer_of(name);
    if (layer < 0 || static_cast<std::size_t>(layer) >= layers) continue;
    const auto l = static_cast<std::size_t>(layer);
    sums[2 * layers + l] = 1;
    sums[layers + l] += ops::sum_of_squares(p.value());
    if (p.grad().defined()) sums[l] += ops::sum_of_squares(p.grad());
  }
  if (comm::Communicator* stages = strategies_->part().model_group)
    stages->allreduce(sums.data(), sums.size(), comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
  const std::vector<double> grad_sq(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(layers));
  const std::vector<double> weight_sq(sums.begin() + static_cast<std::ptrdiff_t>(layers),
                                      sums.begin() + static_cast<std::ptrdiff_t>(2 * layers));
  std::vector<bool> has(layers);
  for (std::size_t l = 0; l < layers; ++l) has[l] = sums[2 * layers + l] > 0;
  calm_.resize(layers, 0);
  std::size_t last_trained = 0;  // the last layer with parameters: it always trains
  for (std::size_t l = 0; l < layers; ++l)
    if (has[l]) last_trained = l;
  for (std::size_t l = frozen_; l < last_trained; ++l)
    if (has[l]) calm_[l] = std::sqrt(grad_sq[l]) < freeze_rule_->ratio * std::sqrt(weight_sq[l]) ? calm_[l] + 1 : 0;
  std::size_t next = frozen_;  // the longest run of calm layers from the first unfrozen one
  for (std::size_t l = frozen_; l < last_trained; ++l) {
    if (has[l] && calm_[l] < freeze_rule_->steps) break;
    if (has[l]) next = l + 1;
  }
  if (next > frozen_)
    while (next < last_trained && !has[next]) ++next;  // with the layers without parameters after it
  if (next <= frozen_) return;
  fmt::print(out_, "freezing layers {}-{} (step {}: their gradient norms stayed under {} of their weights' for {} steps): "
                   "{} parameters frozen in all\n",
             frozen_, next - 1, at_.step, freeze_rule_->ratio, freeze_rule_->steps, parameters_below(next));
  std::fflush(out_);
  if (auto* p = strategies_->find<parallel::Pipeline>(); p && p->pipeline().stages() > 1) {  // (each freed the others' layers)
    frozen_ = next;
    relayout_ = plan_relayout(true);
    return;
  }
  const parallel::TrainState state = strategies_->gather_state();
  const std::int64_t steps = strategies_->optimizer().steps();
  frozen_ = next;
  build_strategies();
  strategies_->restore(state.optimizer, steps);
}

// A pipeline's layout for its frozen blocks: the same stages balanced anew (a frozen block
// costs less), or with --merge-frozen-stages one stage fewer for every stage whose blocks
// all froze (GptPipeline::stages_frozen; seed 003 chapter 11: adaptive model parallelism),
// the ranks that frees leaving the job or (dp) re-laid out as more data-parallel replicas.
// None when nothing changes.
std::optional<parallel::MembershipChange> Run::plan_relayout(bool frozen_changed) const {
  auto* pipeline = strategies_->find<parallel::Pipeline>();
  if (!pipeline || pipeline->pipeline().stages() == 1) return std::nullopt;
  const int stages = pipeline->pipeline().stages();
  const int frozen_stages =
      o_.merge_frozen_stages.empty() ? 0 : pipeline->pipeline().stages_frozen(static_cast<std::int64_t>(frozen_));
  const int to = std::max(1, stages - frozen_stages);
  if (to == stages && !frozen_changed) return std::nullopt;
  const int ranks = mesh_.size(), tp = mesh_.shape().tp;
  const int dp = o_.merge_frozen_stages == "dp" ? ranks / (to * tp) : mesh_.shape().dp;
  parallel::MembershipChange change;
  change.stages_from = stages;
  change.stages_to = to;
  for (int r = dp * to * tp; r < ranks; ++r) change.leaving.push_back(r);
  return change;
}

// --stage-shares measured (seed 003 chapter 12: heterogeneous workers): each stage times
// its computation (forward and backward of its micro-batches, not its waits) over the
// run's steps 2-6; every rank then knows each stage's speed, its cost (in the units the
// partition balances) over its time, the mean over the replicas, and when the partition
// those speeds give differs, the pipeline goes on in it after the step. Once per run.
void Run::measure_stage_speeds() {
  constexpr int kWarmup = 1, kTimed = 5;
  const parallel::GptPipeline& pipe = strategies_->find<parallel::Pipeline>()->pipeline();
  if (++stage_steps_ <= kWarmup) return;
  stage_busy_ += pipe.last_busy();
  if (stage_steps_ < kWarmup + kTimed) return;
  measure_stages_ = false;
  const int stages = pipe.stages();
  std::vector<double> sums(2 * static_cast<std::size_t>(stages), 0);  // per stage: costs, seconds
  sums[static_cast<std::size_t>(pipe.stage())] = pipe.stage_cost();
  sums[static_cast<std::size_t>(stages + pipe.stage())] = stage_busy_;
  job_.world->allreduce(sums.data(), sums.size(), comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
  std::vector<double> speeds(static_cast<std::size_t>(stages));
  for (std::size_t s = 0; s < speeds.size(); ++s) speeds[s] = sums[s] / std::max(sums[speeds.size() + s], 1e-12);
  const double fastest = *std::max_element(speeds.begin(), speeds.end());
  std::string shares;
  for (double& v : speeds) {
    v = std::max(v / fastest, 1e-3);
    shares += fmt::format("{}{:.2f}", shares.empty() ? "" : ":", v);
  }
  const std::vector<std::int64_t> bounds = pipe.partition_for(speeds);
  const auto blocks = [](const std::vector<std::int64_t>& b) {
    std::string text;
    for (std::size_t v = 0; v + 1 < b.size(); ++v) text += fmt::format("{}{}-{}", v ? " | " : "", b[v], b[v + 1] - 1);
    return text;
  };
  const bool moves = bounds != pipe.boundaries();
  fmt::print(out_, "stage speeds measured over steps {}-{}: {}; {}\n", at_.step - kTimed + 1, at_.step, shares,
             moves ? fmt::format("blocks per stage {} -> {}", blocks(pipe.boundaries()), blocks(bounds))
                   : std::string("the blocks stay where they are"));
  std::fflush(out_);
  if (!moves || relayout_) return;
  parallel::MembershipChange change;
  change.stages_from = change.stages_to = stages;
  change.stage_speeds = speeds;
  relayout_ = change;
}

// The optimizer state (each strategy takes its part) and the generators of a checkpoint.
void Run::resume() {
  const Checkpoint& ck = *checkpoint_;
  strategies_->restore(ck.optimizer, ck.meta.optimizer_steps);
  for (const auto& [name, state] : ck.meta.rngs) {
    if (name == task_->generator_name()) rng_.set_state(state);
    for (auto& [module_rng, r] : model_->named_rngs())
      if (module_rng == name) r->set_state(state);
  }
  if (ck.meta.info.count("window_mean_loss")) return;  // a live job's hand-over: continue_handed_over says it
  t_.resumed_from = ck.meta.step;
  const std::string ranks = ck.meta.info.count("ranks") ? ck.meta.info.at("ranks") : "?";
  fmt::print(out_, "resumed from {} (epoch {}, step {}{})\n", ck.path, at_.epoch + 1, at_.step,
             ranks != std::to_string(mesh_.size()) ? fmt::format(", written by {} rank(s), now {}", ranks, mesh_.size())
                                                    : std::string());
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
  if (const int from = t_.change->stages_from, to = t_.change->stages_to; to > 0) {  // a pipeline laid out anew
    t_.resizes.push_back({{"step", at_.step}, {"from", before}, {"to", mesh_.size()}, {"stages_from", from},
                          {"stages_to", to}, {"frozen_layers", frozen_}, {"pause_seconds", pause}});
    std::string what = to < from                          ? fmt::format("{} stages merged into {}", from, to)
                       : !t_.change->stage_speeds.empty() ? fmt::format("stages balanced for speeds {}", o_.stage_shares)
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
  const auto left = static_cast<std::int64_t>(t_.change->leaving.size());
  const std::int64_t joined = mesh_.size() - (before - left);
  t_.resizes.push_back({{"step", at_.step}, {"from", before}, {"to", mesh_.size()}, {"joined", joined},
                        {t_.change->failed ? "failed" : "left", left},
                        {"batch", *o_.batch}, {"lr", lr_}, {"pause_seconds", pause}});
  std::string what;
  if (joined > 0) what = fmt::format("{} joined", joined);
  if (left > 0) what += fmt::format("{}{} {}", what.empty() ? "" : ", ", left, t_.change->failed ? "failed" : "left");
  fmt::print(out_, "resized: {} -> {} {} at step {} ({}): batch {}, learning rate {}; training paused {:.2f} s\n", before,
             mesh_.size(), job_.workers < job_.process.world ? "workers" : "ranks", at_.step, what, *o_.batch, lr_, pause);
  std::fflush(out_);  // seen as it happens, also through a pipe
  t_.change_agreed.reset();
  t_.change.reset();
}

std::optional<parallel::MembershipChange> Run::train(parallel::LiveMembership* live) {
  if (planned_ == 0) fmt::print(out_, "nothing to train: the run already ends at step {}\n", at_.step);
  Progress progress("step", static_cast<long>(planned_));
  model_->train();
  const auto relayout = [&] {  // a pipeline's new layout, before the next step
    progress.finish();
    t_.change_agreed = Clock::now();
    t_.change = relayout_;
    return relayout_;
  };
  if (relayout_ && planned_ > 0) return relayout();
  for (std::int64_t done = 0; done < planned_; ++done) {
    const bool last = done + 1 == planned_;
    step(last);
    if (!o_.quiet) {
      const double elapsed = seconds_since(t_.start);
      progress.update(static_cast<long>(done + 1),
                      elapsed / static_cast<double>(done + 1) * static_cast<double>(planned_ - done - 1),
                      fmt::format("loss {:.4f}  {:.0f} {}/s", t_.window_loss / static_cast<double>(std::max<std::int64_t>(t_.window_steps, 1)),
                                  static_cast<double>(t_.units) / std::max(t_.train_seconds, 1e-9), task_->unit()));
    }
    const bool epoch_end = at_.at == 0;
    if ((o_.checkpoint_every > 0 && at_.step % o_.checkpoint_every == 0) || epoch_end || last) save();
    const bool scheduled = epoch_end || last || (*o_.eval_every > 0 && at_.step % *o_.eval_every == 0);
    std::optional<Evaluation> e;
    if (scheduled || strategies_->round_ended()) {
      progress.finish();
      e = evaluate(!scheduled);
    }
    record_step(e);
    if (relayout_ && !last) return relayout();
    if (live && !last) {
      if (o_.grow_at == "noise" && rank_ == 0) grow_by_noise(*live);
      auto change = live->poll(*job_.world, at_.step);
      if (auto note = live->take_note()) {
        fmt::print(out_, "{}\n", *note);
        std::fflush(out_);
      }
      if (change) {
        progress.finish();
        t_.change_agreed = Clock::now();
        t_.change = change;
        if (strategies_->find<parallel::ParameterServer>()) agreed_state_ = strategies_->gather_state();
        return change;
      }
    }
  }
  progress.finish();
  return std::nullopt;
}

std::string Run::hand_over_state(int keep) {
  // The loss window over the replicas, for the next generation to continue.
  double sums[2] = {t_.window_loss, static_cast<double>(t_.window_steps)};
  if (replicas_) replicas_->allreduce(sums, 2, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
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

// The metrics files (--metrics FILE, and metrics.jsonl in the checkpoint folder: the run's
// folder), each rank its own (FILE-rank<r>.jsonl beside rank 0's FILE); a resumed run
// appends. The run record says what the run is.
void Run::open_metrics() {
  std::vector<std::string> paths;
  const int world = mesh_.size();
  auto rank_file = [&](const std::string& file) { return rank_ == 0 ? file : timeline_path(file, rank_, world); };
  if (!o_.metrics.empty()) paths.push_back(rank_file(o_.metrics));
  if (!o_.checkpoint_dir.empty()) paths.push_back(rank_file(o_.checkpoint_dir + "/metrics.jsonl"));
  if (paths.empty()) return;
  metrics_ = std::make_unique<MetricsLog>(paths, checkpoint_.has_value());
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
                        {"first_step", at_.step + 1},
                        {"planned_steps", planned_},
                        {"parameters", model_->num_parameters()}};
  if (auto* p = strategies_->find<parallel::Pipeline>())
    run["pipeline"] = {{"stages", p->pipeline().stages()}, {"micro_batches", o_.parallel.pipeline.micro_batches},
                       {"schedule", algo::pipe_schedule_name(o_.parallel.pipeline.schedule)}};
  if (checkpoint_) run["resumed_from"] = checkpoint_->meta.step;
  metrics_->write(run);
}

// The step record of the step just taken, with the evaluation `e` made after it.
void Run::record_step(const std::optional<Evaluation>& e) {
  if (!metrics_) return;
  const std::string unit = task_->unit();
  nlohmann::json r = {{"kind", "step"},
                      {"step", at_.step},
                      {"epoch", static_cast<double>(at_.step) / static_cast<double>(task_->steps_per_epoch())},
                      {"time", seconds_since(t_.start)},
                      {"unix_time", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
                      {"loss", last_.loss},
                      {"lr", last_.lr},
                      {unit + "_per_second", static_cast<double>(last_.units) / std::max(last_.seconds, 1e-9)},
                      {"seconds", last_.seconds},
                      {"batch_rows", last_.rows},
                      {"compute_seconds", last_.compute},
                      {"comm_seconds", last_.comm},
                      {"exposed_seconds", last_.exposed},
                      {"memory_bytes", static_cast<std::int64_t>(allocator_live_bytes())},
                      {"peak_step_bytes", last_.peak_bytes},
                      {"threads", last_.threads}};
  if (e) r[e->field] = e->value;
  if (e && t_.train_loss) r["train_loss"] = *t_.train_loss;
  if (o_.grow_at == "noise")
    if (auto b = t_.noise.value()) r["noise_scale"] = *b;
  metrics_->write(r);
}

// The thread count for the next step, from this one's time (tensor/thread_governor.h).
void Run::adapt_threads(double step_seconds) {
  // Other processes' share of the cores during the step: a quarter of them counts as busy.
  const int next = governor_->observe(step_seconds, other_load_.sample() > 0.25);
  if (next != get_active_threads()) set_active_threads(next);
  if (auto change = governor_->take_change())
    fmt::print(out_, "threads: {} -> {} ({})\n", change->from, change->to, change->why);
}

// One step: this replica's batch, the learning rate, forward, backward and update through
// the strategies (`last`: of this run), the figures.
void Run::step(bool last) {
  const auto t0 = Clock::now();
  if (job_.world) job_.world->trace_mark("step");
  const std::int64_t rows = task_->rows_at(at_.at);  // the global batch's
  const parallel::StepBatch batch = task_->batch(at_.epoch, at_.at, at_.step, rng_);
  // This replica's rows: those it computes, and those that count (a placeholder has weight 0).
  const std::int64_t computed = batch.inputs.size(0), mine = batch.weight > 0 ? computed : 0;
  if (straggle_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(straggle_ms_));
  const auto t1 = Clock::now();
  if (profile_) profile_->begin_step();
  const double lr = learning_rate(schedule_, lr_, at_.step);
  strategies_->optimizer().set_lr(lr);
  const std::size_t live_before = allocator_live_bytes();
  allocator_reset_peak();
  const double exposed_before = strategies_->stats().exposed_seconds, comm_before = strategies_->stats().seconds;
  const double loss = strategies_->step(at_.step + 1, last, batch, loss_fn_, *o_.clip_grad);
  if (slowdown_ > 1) {  // WEFT_SLOWDOWN: FACTOR - 1 more times this step's computation
    const double busy = seconds_since(t1) - (strategies_->stats().exposed_seconds - exposed_before);
    std::this_thread::sleep_for(std::chrono::duration<double>((slowdown_ - 1) * std::max(busy, 0.0)));
  }
  ++at_.step;
  if (!std::isfinite(loss)) throw Error(fmt::format("loss became {} at step {}: lower the learning rate", loss, at_.step));
  const auto step_peak = static_cast<std::int64_t>(allocator_peak_bytes() - live_before);
  t_.peak_step_bytes = std::max(t_.peak_step_bytes, step_peak);
  const double seconds = seconds_since(t0);
  t_.train_seconds += seconds;
  t_.window_seconds += seconds;
  const double exposed = strategies_->stats().exposed_seconds - exposed_before;
  const double compute = seconds_since(t1) - exposed;
  t_.compute_seconds += compute;
  if (profile_) profile_->end_step(seconds, std::chrono::duration<double>(t1 - t0).count(), exposed);
  const std::int64_t units = mine * task_->units_per_row();
  last_ = {loss, lr, seconds, compute, strategies_->stats().seconds - comm_before, exposed, units, step_peak, rows,
           get_active_threads()};
  if (governor_) adapt_threads(seconds);
  if (balancer_ && balancer_->observe(compute, computed)) rebalance();
  if (o_.grow_at == "noise") observe_noise(batch, rows);
  if (freeze_rule_) freeze_converged();
  if (measure_stages_) measure_stage_speeds();
  t_.units += units;
  t_.rows += rows;
  t_.window_units += rows * task_->units_per_row();
  t_.window_loss += loss * batch.weight;  // the replicas' mean of weighted losses: the batch's mean
  ++t_.window_steps;
  if (timeline_) {
    timeline_->add("data", "data", t0, t1);
    for (const auto& s : strategies_->stats().spans) timeline_->add(s.name, s.category, s.start, s.end, s.row);
  }
  at_.at += rows;
  if (at_.at == task_->rows_per_epoch()) {
    at_.at = 0;
    ++at_.epoch;
  }
}

// --grow-at noise: this step's two gradient estimates (each replica's own, the replicas'
// mean) into the noise scale. A replica's gradient carries its weight (task.h): divided out.
void Run::observe_noise(const parallel::StepBatch& batch, std::int64_t rows) {
  auto* dp = strategies_->find<parallel::DataParallel>();
  if (!dp || !dp->ddp() || !replicas_) return;
  const auto& norms = dp->ddp()->norms();
  const double w = batch.weight, own_rows = static_cast<double>(batch.inputs.size(0));
  double sums[2] = {w > 0 ? norms.local_sq / (w * w) : 0.0, w > 0 ? 1.0 / own_rows : 0.0};
  replicas_->allreduce(sums, 2, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
  const double replicas = static_cast<double>(mesh_.shape().dp);
  t_.noise.observe(sums[0] / replicas, sums[1] / replicas, norms.mean_sq, static_cast<double>(rows));
}

// --grow-at noise (rank 0, every 10 steps): when the gradient noise scale is larger than the
// global batch would be on more ranks (--elastic-batch linear: the rows per rank stay), ask
// for those ranks, up to --max-ranks; then wait 50 steps before deciding again.
void Run::grow_by_noise(parallel::LiveMembership& live) {
  const auto b_noise = t_.noise.value();
  if (!b_noise || at_.step % 10 != 0 || at_.step < t_.noise_quiet_until) return;
  const int world = mesh_.shape().dp;
  const double per_rank = static_cast<double>(*o_.batch) / world;
  const int target = static_cast<int>(std::min<double>(o_.max_ranks, std::floor(*b_noise / per_rank)));
  if (target <= world) return;
  live.schedule(at_.step, target, fmt::format("--grow-at noise: gradient noise scale {:.0f}, global batch {}", *b_noise,
                                              *o_.batch));
  t_.noise_quiet_until = at_.step + 50;
}

// --dp-shares measured, at the end of a window: the replicas' speeds, and the shares of the
// batches that follow when they changed.
void Run::rebalance() {
  const double mine = balancer_->speed();
  std::vector<double> speeds(static_cast<std::size_t>(mesh_.shape().dp), mine);
  replicas_->allgather(&mine, speeds.data(), 1, comm::DataType::kF64)->wait();
  const auto next = balancer_->decide(task_->speeds(), speeds, *o_.batch);
  if (!next) return;
  std::string measured;
  for (double s : speeds) measured += fmt::format("{}{:.0f}", measured.empty() ? "" : ", ", s);
  fmt::print(out_, "batch shares: {} -> {} (step {}: the replicas compute {} {}/s)\n", shares_text(*o_.batch, task_->speeds()),
             shares_text(*o_.batch, *next), at_.step, measured, task_->unit() == "tokens" ? "rows" : task_->unit());
  task_->set_speeds(*next);
}

// The mean loss since the last evaluation over every replica, the task's evaluation, one
// line. A federated round's evaluation (round_only) keeps the loss window open.
std::optional<Evaluation> Run::evaluate(bool round_only) {
  std::optional<Evaluation> e;
  if (o_.evaluate) e = task_->evaluate(*strategies_, replicas_);
  if (round_only) {
    fmt::print(out_, "round {}: {}\n", strategies_->find<parallel::FederatedAveraging>()->round(), e ? e->text : "");
  } else {
    double sums[2] = {t_.window_loss, static_cast<double>(t_.window_steps)};
    if (replicas_) replicas_->allreduce(sums, 2, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
    t_.train_loss = sums[0] / std::max(sums[1], 1.0);
    const double train_loss = *t_.train_loss;
    const double rate = static_cast<double>(t_.window_units) / std::max(t_.window_seconds, 1e-9);
    const std::string rate_text =
        fmt::format("{:.0f} {}/s{}", rate, task_->unit(), mesh_.size() > 1 ? fmt::format(" on {} ranks", mesh_.size()) : "");
    const bool epoch_end = at_.at == 0;
    fmt::print(out_, "{}\n", task_->progress_line(epoch_end ? at_.epoch - 1 : at_.epoch, at_.step, epoch_end, train_loss,
                                                  e ? &*e : nullptr, rate_text));
    t_.window_loss = t_.window_seconds = 0;
    t_.window_steps = t_.window_units = 0;
  }
  std::fflush(out_);
  if (e) t_.last_eval = e;
  return e;
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
    for (const std::string& line : profile_->table()) fmt::print(out_, "{}\n", line);
  nlohmann::json summary = {{"model", o_.model}, {"optimizer", *o_.optimizer}, {"precision", o_.precision},
                            {"parameters", model_->num_parameters()}, {"threads", get_num_threads()},
                            {"ranks", mesh_.size()}, {"kernels", kernels::summary()}};
  report(summary);
  if (profile_) summary["profile"] = profile_->to_json();
  task_->summarize(summary);
  if (timeline_) timeline_->write(timeline_path(o_.timeline, rank_, mesh_.size()));
  if (rank_ == 0) {
    task_->finish(*model_, rng_, out_, summary);
    if (!o_.save_model.empty()) {
      Metadata metadata = task_->model_metadata();
      metadata["format"] = "pt";
      write_file_atomic(o_.save_model, encode_safetensors(model_->state_dict(), metadata));
    }
  }
  summary["wall_seconds"] = seconds_since(t_.start);
  summary["peak_rss_bytes"] = peak_resident_bytes();  // the process's, to here (the model saved)
  return {rank_, summary};
}

void Run::report(nlohmann::json& summary) {
  if (t_.resumed_from) summary["resumed_from"] = *t_.resumed_from;
  if (!t_.resizes.empty()) summary["resizes"] = t_.resizes;
  std::int64_t rank_parameters = 0;
  for (const auto& [name, p] : strategies_->part().trained) rank_parameters += p.value().numel();
  auto* zero = strategies_->find<parallel::Zero>();
  if (zero && zero->stage() == 3) rank_parameters = zero->zero().shard_elements();
  summary["steps"] = at_.step;
  if (frozen_ > 0) summary["frozen_layers"] = frozen_;
  summary["epochs"] = at_.epoch;
  if (t_.train_loss) summary["train_loss"] = *t_.train_loss;
  if (t_.last_eval) summary[t_.last_eval->field] = t_.last_eval->value;
  summary["train_seconds"] = t_.train_seconds;
  summary["rank_parameters"] = rank_parameters;
  summary["rank_state_bytes"] = rank_state_bytes_;
  summary["peak_step_bytes"] = t_.peak_step_bytes;
  summary["optimizer_state_bytes"] = strategies_->optimizer().state_total_bytes();
  summary["optimizer_state_resident_bytes"] = strategies_->optimizer().state_resident_bytes();
  double rate = static_cast<double>(t_.units) / std::max(t_.train_seconds, 1e-9);
  const std::string unit = task_->unit();
  if (replicas_) {
    // Totals over the job: every replica's rate.
    std::vector<double> rates(static_cast<size_t>(mesh_.shape().dp), rate);
    replicas_->allgather(&rate, rates.data(), 1, comm::DataType::kF64)->wait();
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
    const bool same = replicas_identical(*model_, o_.parallel.model_parallel() ? nullptr : replicas_);
    if (!same) fmt::print(out_, "warning: the ranks' parameters differ (checksums disagree)\n");
    const parallel::CommStats& comm = strategies_->stats();
    summary["replicas_identical"] = same;
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
  if (zero) {
    const parallel::ZeroMemory m = zero->zero().memory();
    summary["zero"] = zero->stage();
    summary["zero_memory"] = {{"stage", zero->stage()},     {"parameters", m.parameters},
                              {"gradients", m.gradients},   {"optimizer", m.optimizer},
                              {"step_parameters", m.peak_parameters}, {"replicated", zero->replicated_bytes()}};
  }
  if (auto* p = strategies_->find<parallel::Pipeline>()) {
    summary["pipeline"] = {{"stages", p->pipeline().stages()}, {"micro_batches", o_.parallel.pipeline.micro_batches},
                           {"schedule", algo::pipe_schedule_name(o_.parallel.pipeline.schedule)},
                           {"bubble", p->bubble()}, {"bubble_formula", p->bubble_formula()}};
  }
  if (auto* ps = strategies_->find<parallel::ParameterServer>(); ps && ps->link_bytes_per_second() > 0) {
    summary["ps_model_seconds"] = ps->model_seconds();
    summary["ps_link_gbps"] = ps->link_bytes_per_second() / 1e9;
  }
  if (!last_checkpoint_.empty()) summary["checkpoint"] = last_checkpoint_;
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

// The global batch of a live job's new generation of `ranks` from the state handed over:
// the same (--elastic-batch fixed), or the same rows per rank (linear).
std::int64_t batch_after_change(const TrainOptions& o, const Checkpoint& image, int ranks) {
  const auto batch = parse_integer(image.meta.info.at("batch")), before = parse_integer(image.meta.info.at("ranks"));
  if (!batch || !before || *batch < 1 || *before < 1 || *batch > (std::int64_t{1} << 40) || *before > (1 << 20))
    throw CommError("the state handed over records no batch or ranks");
  if (o.elastic_batch == "fixed") return *batch;
  return std::max<std::int64_t>(1, std::llround(static_cast<double>(*batch) * ranks / static_cast<double>(*before)));
}

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
  std::vector<std::shared_ptr<comm::Communicator>> earlier;  // the groups before: they end with the job
  for (;;) {
    parallel::MembershipChange change;
    std::string state;
    std::int64_t step = 0;
    {
      Run run(o, job, out, std::move(image), std::move(totals), std::move(task));
      const auto next = run.train();
      if (!next) return run.finish();
      change = *next;
      state = run.hand_over_state(0);
      totals = run.take_totals();
      task = run.take_task();
      step = run.step();
    }
    const int stay = job.mesh.size() - static_cast<int>(change.leaving.size());
    std::shared_ptr<comm::Communicator> world = job.world;
    if (world && world->rank() >= stay) {
      fmt::print(stderr, "rank {} released after step {}: the pipeline merged its frozen stages\n", world->rank(), step);
      return {-1, {}};
    }
    if (world && stay < world->size()) {
      earlier.push_back(world);
      std::vector<int> members(static_cast<std::size_t>(stay));
      std::iota(members.begin(), members.end(), 0);
      world = stay > 1 ? world->new_group(members) : nullptr;
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
  const comm::CommOptions comm_options = comm::CommOptions::from_env();
  std::string state;  // handed over by the last generation (on the rank that stays first)
  RunTotals totals;
  for (;;) {
    std::shared_ptr<comm::Communicator> world = live.connect(comm_options);
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
        change = run.train(&live);
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
    const comm::Generation before = live.generation();
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

}  // namespace

TrainSummary train(const TrainOptions& options, std::FILE* out) {
  TrainOptions o = with_task_defaults(options);
  validate(o);
  kernels::summary();  // WEFT_KERNELS and WEFT_CPU_ISA are checked before the run begins
  if (o.threads > 0) set_num_threads(o.threads);
  Bf16Guard precision(o.precision == "bf16");
  if (auto live = parallel::LiveMembership::from_env(comm::process_info_from_env().rank, comm::process_info_from_env().world)) {
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
