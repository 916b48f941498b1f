#include "weft/train/run.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>

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
#include "weft/train/timeline.h"
#include "weft/util/checked.h"
#include "weft/util/file.h"
#include "weft/util/machine.h"
#include "weft/util/parse.h"
#include "weft/util/progress.h"
#include "weft/util/size.h"

namespace weft {


std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o, double lr, parallel::NamedParameters params) {
  if (*o.optimizer == "sgd") return std::make_unique<SGD>(params, lr, o.momentum, *o.weight_decay);
  AdamOptions a;
  a.weight_decay = *o.weight_decay;
  a.decoupled = *o.optimizer == "adamw";
  if (is_language_model(o.model)) a.beta2 = 0.95;  // the usual choice for transformers (GPT-3)
  return std::make_unique<Adam>(params, lr, a);
}

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
  replicas_ = parallel::RankGroup(mesh_.dp().get());
  if (const std::vector<double> shares = parse_dp_shares(o_.dp_shares); !shares.empty()) {
    if (static_cast<int>(shares.size()) != mesh_.shape().dp)
      throw ConfigError(fmt::format("--dp-shares {}: {} shares for {} data-parallel replicas", o_.dp_shares, shares.size(),
                                    mesh_.shape().dp));
    task_->set_speeds(shares);
    fmt::print(out_, "batch shares: {} of {} rows per replica (--dp-shares {})\n", shares_text(*o_.batch, shares),
               *o_.batch, o_.dp_shares);
  }
  // The model: the same on every rank (one seed), resumed before the strategies split it.
  // Built within the memory this machine has available to this rank (its ranks share it), so
  // that a model too large for it is one line rather than the machine swapping.
  {
    const int ranks_here = std::max(job_.process.local_world, 1);
    const auto ceiling = ceiling_at_available_memory(
        fmt::format("building the model (--model {}){}", o_.model,
                    ranks_here > 1 ? fmt::format(", which each of this machine's {} ranks does whole before splitting it,",
                                                 ranks_here)
                                   : std::string()),
        ranks_here);
    model_ = task_->make_model(rng_);
  }
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
  faults_ = FaultInjection::from_env(rank_);
  // ZeRO-3's parameters gathered after the last step only for what rank 0 does with them,
  // and for the model-parallel strategies, which then bring their slices and stages to it.
  o_.parallel.whole_model_at_end =
      !o_.save_model.empty() || (is_language_model(o_.model) && o_.sample > 0) || o_.parallel.model_parallel();
  build_strategies();
  if (checkpoint_) resume();
  if (!o_.merge_frozen_stages.empty()) relayout_ = plan_relayout(false);
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
  add_step_hooks();
  loss_fn_ = [this](Module& m, const parallel::StepBatch& b) { return task_->loss(m, b); };
  rank_state_bytes_ = static_cast<std::int64_t>(allocator_live_bytes());
}

// The strategies over the parameters not frozen (whose layers compute without gradients).
// What watches the steps (step_hooks.h), in the order they are called.
void Run::add_step_hooks() {
  if (auto metrics = metrics_hook()) hooks_.push_back(std::move(metrics));  // (first: its sum before the others')
  if (faults_) hooks_.push_back(faults_);
  if (o_.profile) hooks_.push_back(std::shared_ptr<ProfileHook>(profile_ = new ProfileHook()));
  if (o_.adapt_threads == "on" && get_num_threads() > 1)
    hooks_.push_back(std::make_unique<ThreadGovernorHook>(get_num_threads(), o_.quiet ? nullptr : out_));
  if (o_.dp_shares == "measured" && mesh_.shape().dp > 1)
    hooks_.push_back(std::make_unique<ShareBalancingHook>(*task_, replicas_, *o_.batch, out_));
  if (o_.grow_at == "noise") hooks_.push_back(std::make_unique<NoiseScaleHook>(strategies_, replicas_, t_.noise));
  if (freeze_rule_) hooks_.push_back(std::make_shared<ConvergedFreezing>(*freeze_rule_, strategies_, *task_, *model_, frozen_));
  if (o_.stage_shares == "measured")
    hooks_.push_back(std::make_shared<StageSpeeds>(strategies_, parallel::RankGroup(job_.world.get()), out_));
  if (!o_.timeline.empty()) {
    check_timeline_output(timeline_path(o_.timeline, rank_, mesh_.size()), "--timeline");  // this rank's file
    hooks_.push_back(std::shared_ptr<TimelineHook>(timeline_ = new TimelineHook(rank_)));
    strategies_->record_spans(true);
  }
}

void Run::build_strategies() {
  const std::size_t frozen = frozen_;
  const Task* task = task_.get();
  const auto is_frozen = [frozen, task](const std::string& name) {
    const int layer = task->layer_of(name);
    return layer >= 0 && static_cast<std::size_t>(layer) < frozen;
  };
  for (auto& [name, p] : model_->named_parameters()) p.set_requires_grad(!is_frozen(name));
  o_.parallel.pipeline.stage_speeds = parse_stage_shares(o_.stage_shares);
  if (faults_ && o_.parallel.pipelined()) {  // a pipeline slows each micro-batch
    faults_->per_micro_batch();
    o_.parallel.pipeline.after_compute = [faults = faults_.get()](double seconds) { faults->slow_by(seconds); };
  }
  o_.parallel.pipeline.frozen_blocks = static_cast<std::int64_t>(frozen_);
  if (frozen_ > 0) caches_ = task_->freeze(frozen_, static_cast<std::int64_t>(o_.freeze_cache_mb * (1 << 20)));
  // (counted before the strategies: ZeRO-3 leaves the model's own parameters without storage)
  parameters_ = model_->num_parameters();
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
  if (o_.grow_at == "noise") strategies_->measure_gradient_norms();
  if (timeline_) strategies_->record_spans(true);
  place_optimizer_state();
}

// --offload optimizer and --memory-limit: the optimizer's state in memory, or in a file
// read back ahead of each update when asked or when the model states would exceed the limit.
void Run::place_optimizer_state() {
  const std::int64_t limit = o_.memory_limit.empty() ? 0 : parse_size(o_.memory_limit, "--memory-limit");
  if (const auto resident = strategies_->resident_parameter_bytes()) {  // --offload params
    const std::int64_t need = *resident + strategies_->optimizer().state_resident_bytes();
    if (limit > 0 && need > limit)
      throw ConfigError(fmt::format("--memory-limit {}: with the parameters offloaded a rank still holds {:.1f} MiB of "
                                    "them and their optimizer state (3 layers' worth)",
                                    o_.memory_limit, static_cast<double>(need) / (1 << 20)));
    return;
  }
  Optimizer& opt = strategies_->optimizer();
  // What this rank holds of the trained parameters (ZeRO-3: its shard) and of their gradients
  // (ZeRO-2 and -3: its shard), in fp32.
  const std::int64_t params = strategies_->rank_parameter_elements() * 4;
  // (From the full shapes: ZeRO-3's parameters hold no values between steps.)
  const parallel::ModelPart& part = strategies_->part();
  const std::map<std::string, Shape> shapes(part.layout.begin(), part.layout.end());
  std::int64_t full = 0;
  for (const auto& [name, p] : part.trained) full += shape_numel(shapes.at(name));
  const int dp = std::max(mesh_.shape().dp, 1);
  const std::int64_t grads = (o_.parallel.zero >= 2 ? (full + dp - 1) / dp : full) * 4;
  const std::int64_t whole = opt.state_total_bytes(), largest = opt.state_largest_bytes();
  // Offloaded: three parameters' buffers in memory (one updated, one read ahead, one written
  // back), or two where three would pass the limit; only worth it below the whole state.
  const int slots = limit == 0 || params + grads + 3 * largest <= limit ? 3 : 2;
  const bool asked = o_.offload == "optimizer";
  const bool offload = whole > 0 && (asked || (limit > 0 && params + grads + whole > limit && slots * largest < whole));
  const std::int64_t state = offload ? slots * largest : whole;
  if (limit > 0 && params + grads + state > limit) {
    const bool can_offload_params = o_.parallel.strategy == "ddp" && o_.parallel.zero == 0 && !o_.parallel.model_parallel();
    throw ConfigError(fmt::format(
        "--memory-limit {}: this rank's model states need {:.1f} MiB in memory (parameters {:.1f} MiB, their gradients "
        "{:.1f} MiB, the optimizer's state {:.1f} MiB{}); {}",
        o_.memory_limit, static_cast<double>(params + grads + state) / (1 << 20), static_cast<double>(params) / (1 << 20),
        static_cast<double>(grads) / (1 << 20), static_cast<double>(state) / (1 << 20), offload ? " of it at a time" : "",
        can_offload_params        ? "--offload params keeps the parameters in a file too"
        : o_.parallel.zero == 3 ? "more ranks divide them further"
                                : "more ranks (or --zero 3) divide them further"));
  }
  if (!offload) return;
  const std::string dir = !o_.offload_dir.empty() ? o_.offload_dir : std::filesystem::temp_directory_path().string();
  opt.offload_state(dir, slots);
  if (!said_offload_)
    fmt::print(out_, "optimizer state offloaded to {}: {:.1f} MiB there, {:.1f} MiB in memory{}\n", dir,
               static_cast<double>(whole) / (1 << 20), static_cast<double>(opt.state_resident_bytes()) / (1 << 20),
               asked ? "" : fmt::format(" (the model states exceed --memory-limit {})", o_.memory_limit));
  said_offload_ = true;
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

std::optional<RunBreak> Run::train(parallel::LiveMembership* live) {
  if (planned_ == 0) fmt::print(out_, "nothing to train: the run already ends at step {}\n", at_.step);
  Progress progress("step", static_cast<long>(planned_));
  model_->train();
  // The steps within the memory this rank had available as they start, as the model was
  // built: a batch whose activations (or an optimizer's state) would not fit is one line
  // rather than the machine swapping or its out-of-memory killer ending the run.
  const int ranks_here = std::max(job_.process.local_world, 1);
  const auto ceiling = ceiling_at_available_memory(
      fmt::format("training (the model, its optimizer's state and a step's activations at --batch {}{})", *o_.batch,
                  ranks_here > 1 ? fmt::format(", on one of this machine's {} ranks", ranks_here) : std::string()),
      ranks_here);
  const auto relayout = [&] {  // a pipeline's new layout, before the next step
    progress.finish();
    t_.change_agreed = Clock::now();
    t_.change = *relayout_;
    return RunBreak(*relayout_);
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
    const StepOutcome outcome{e, e ? t_.train_loss : std::nullopt,
                              o_.grow_at == "noise" ? t_.noise.value() : std::nullopt};
    for (auto& hook : hooks_) hook->after_evaluation(outcome);
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
        t_.change = *change;
        if (strategies_->servers_hold_state()) agreed_state_ = strategies_->gather_state();
        return change;
      }
    }
  }
  progress.finish();
  return std::nullopt;
}

bool Run::steps_in_lockstep() const { return !(o_.parallel.strategy == "ps" && o_.parallel.staleness >= 0); }

// A failed collective says which training step it was in (the collective's own message
// counts the steps of its schedule).
template <class Fn>
double Run::step_naming_failures(const Fn& fn) const {
  try {
    return fn();
  } catch (const CommError& e) {
    throw CommError(fmt::format("training step {}: {}", at_.step + 1, e.what()), e.op(), e.rank(), e.peer(), e.timeout_s());
  }
}

// One step: this replica's batch, the learning rate, forward, backward and update through
// the strategies (`last`: of this run), the figures.
void Run::step(bool last) {
  allocator_trim_idle();  // what the last step left unused goes back (allocator.h)
  const auto t0 = Clock::now();
  parallel::RankGroup(job_.world.get()).trace_mark("step");
  const std::int64_t rows = task_->rows_at(at_.at);  // the global batch's
  const parallel::StepBatch batch = task_->batch(at_.epoch, at_.at, at_.step, rng_);
  // This replica's rows: those it computes, and those that count (a placeholder has weight 0).
  const std::int64_t computed = batch.inputs.size(0), mine = batch.weight > 0 ? computed : 0;
  for (auto& hook : hooks_) hook->before_compute();
  const auto t1 = Clock::now();
  const double lr = learning_rate(schedule_, lr_, at_.step);
  strategies_->optimizer().set_lr(lr);
  const std::size_t live_before = allocator_live_bytes();
  allocator_reset_peak();
  const double exposed_before = strategies_->stats().exposed_seconds, comm_before = strategies_->stats().seconds;
  const double loss = step_naming_failures([&] { return strategies_->step(at_.step + 1, last, batch, loss_fn_, *o_.clip_grad); });
  const double busy = seconds_since(t1) - (strategies_->stats().exposed_seconds - exposed_before);
  for (auto& hook : hooks_) hook->after_compute(busy);
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
  const std::int64_t units = mine * task_->units_per_row();
  const StepFacts facts{at_.step, &batch, rows, t0, t1, seconds, compute, exposed, &strategies_->stats(), loss, lr,
                        strategies_->stats().seconds - comm_before, units, step_peak, get_active_threads()};
  for (auto& hook : hooks_) hook->after_step(facts);
  for (auto& hook : hooks_)  // (a change may rebuild the strategies: once every hook saw the step)
    if (auto request = hook->take_layout_request()) apply(*request);
  t_.units += units;
  t_.rows += rows;
  t_.window_units += rows * task_->units_per_row();
  t_.window_loss += loss * batch.weight;  // the replicas' mean of weighted losses: the batch's mean
  ++t_.window_steps;
  at_.at += rows;
  if (at_.at == task_->rows_per_epoch()) {
    at_.at = 0;
    ++at_.epoch;
  }
}

// The mean loss since the last evaluation over every replica, the task's evaluation, one
// line. A federated round's evaluation (round_only) keeps the loss window open.
std::optional<Evaluation> Run::evaluate(bool round_only) {
  std::optional<Evaluation> e;
  if (o_.evaluate) e = task_->evaluate(*strategies_, replicas_);
  if (round_only) {
    fmt::print(out_, "round {}: {}\n", strategies_->round().value_or(0), e ? e->text : "");
  } else {
    double sums[2] = {t_.window_loss, static_cast<double>(t_.window_steps)};
    replicas_.sum(sums, 2);
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

}  // namespace weft
