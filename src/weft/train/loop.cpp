#include "weft/train/loop.h"

#include <fmt/format.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include "weft/optim/adam.h"
#include "weft/optim/sgd.h"
#include "weft/parallel/fedavg.h"
#include "weft/parallel/job.h"
#include "weft/parallel/param_server.h"
#include "weft/parallel/pipeline.h"
#include "weft/parallel/zero.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/thread_pool.h"
#include "weft/train/checkpoint.h"
#include "weft/train/safetensors.h"
#include "weft/train/task.h"
#include "weft/train/timeline.h"
#include "weft/util/file.h"
#include "weft/util/progress.h"

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
  if (ck.meta.model != task.model_tag())
    throw CheckpointError(ck.path + " holds model '" + ck.meta.model + "', not '" + task.model_tag() + "'");
  if (ck.meta.optimizer != *o.optimizer)
    throw CheckpointError(ck.path + " was trained with optimizer '" + ck.meta.optimizer + "', not '" + *o.optimizer + "'");
  return ck;
}

// Where the data stands: the epoch, the next batch of it, and the optimizer steps taken.
struct Position {
  std::int64_t epoch = 0, index = 0, step = 0;
};

// The position a checkpoint records, on this run's batch: another global batch (the same
// per-rank batch on another number of ranks) keeps the position in samples, and the
// learning rate may follow the batch (--scale-lr linear).
Position resume_position(const Checkpoint& ck, const TrainOptions& o, const Task& task, double& lr, std::FILE* out) {
  Position p{ck.meta.epoch, ck.meta.batch_in_epoch, ck.meta.step};
  const std::int64_t old_batch = ck.meta.info.count("batch") ? std::stoll(ck.meta.info.at("batch")) : *o.batch;
  if (old_batch != *o.batch) {
    const std::int64_t consumed = p.index * old_batch;
    if (consumed % *o.batch != 0) {
      throw CheckpointError(fmt::format("{}: {} samples of the epoch are done, not a multiple of the new global batch {}; "
                                        "resume at an epoch boundary or with a batch that divides it",
                                        ck.path, consumed, *o.batch));
    }
    p.index = consumed / *o.batch;
    if (o.scale_lr == "linear") {
      const double base = ck.meta.info.count("lr") ? std::stod(ck.meta.info.at("lr")) : lr;
      const double scaled = base * static_cast<double>(*o.batch) / static_cast<double>(old_batch);
      fmt::print(out, "learning rate scaled linearly with the global batch ({} -> {}): {} -> {}\n", old_batch, *o.batch,
                 base, scaled);
      lr = scaled;
    }
  }
  if (p.index >= task.steps_per_epoch() && p.epoch < task.epochs()) {
    throw CheckpointError(fmt::format("{}: position {} is past the epoch's {} batches (different data or batch size?)",
                                      ck.path, p.index, task.steps_per_epoch()));
  }
  return p;
}

// A parameter-server rank: it serves the workers until their last step, and checkpoints
// with worker 0 (which saves).
TrainSummary serve_parameters(const TrainOptions& o, const parallel::Job& job, std::FILE* out) {
  const auto task = make_task(o, 0, job.workers, out);
  Rng rng(o.seed);
  auto model = task->make_model(rng);
  const std::int64_t spe = task->steps_per_epoch();
  std::int64_t total = spe * task->epochs();
  if (*o.max_steps > 0) total = std::min(total, *o.max_steps);
  if (job.server == 0) parallel::measure_link(*job.world, job.workers, false, model->num_parameters());
  std::optional<Checkpoint> ck;
  if (o.resume || o.auto_resume) {
    if (auto latest = latest_checkpoint(o.checkpoint_dir)) {
      ck = load_checkpoint(*latest);
      model->load_state_dict(ck->model);
    }
  }
  parallel::ServerCheckpoints saves;
  if (!o.checkpoint_dir.empty()) {  // where worker 0 saves (loop below)
    saves.at = [&o, total, spe](std::int64_t s) {
      return s == total || s % spe == 0 || (o.checkpoint_every > 0 && s % o.checkpoint_every == 0);
    };
  }
  const Schedule schedule = lr_schedule(o, spe * task->epochs());
  const auto report = parallel::run_parameter_server(
      *model, job.world, job.workers, o.parallel.servers, job.server, total,
      [&](parallel::NamedParameters shard) { return make_optimizer(o, *o.lr, std::move(shard)); },
      [&](std::int64_t s) { return learning_rate(schedule, *o.lr, s); }, o.parallel.staleness, ck ? ck->meta.step : 0,
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

}  // namespace

TrainSummary train(const TrainOptions& given, std::FILE* out) {
  const auto wall_start = Clock::now();
  TrainOptions o = with_task_defaults(given);
  validate(o);
  if (o.threads > 0) set_num_threads(o.threads);
  Bf16Guard precision(o.precision == "bf16");

  // The job: who serves, who trains where in the mesh; one voice (rank 0) reports.
  parallel::Job job = parallel::join_job(o.parallel);
  if (job.serves) return serve_parameters(o, job, out);
  const parallel::Mesh& mesh = job.mesh;
  const int rank = job.process.rank;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> devnull(nullptr, &std::fclose);
  if (rank != 0) {
    devnull.reset(std::fopen("/dev/null", "w"));
    out = devnull.get();
    o.quiet = true;
  }
  const auto task = make_task(o, mesh.dp_rank(), mesh.shape().dp, out);
  comm::Communicator* replicas = mesh.dp().get();

  // The model (the same on every rank: one seed), resumed before the strategies split it.
  Rng rng(o.seed);
  std::shared_ptr<Module> model = task->make_model(rng);
  const std::string about = task->describe(*model);
  if (!about.empty()) fmt::print(out, "{}\n", about);
  double lr = *o.lr;
  const std::optional<Checkpoint> ck = checkpoint_to_resume(o, *task, out);
  Position at;
  if (ck) {
    model->load_state_dict(ck->model);
    at = resume_position(*ck, o, *task, lr, out);
  }

  parallel::Strategies strategies(*model);
  const parallel::OptimizerFactory optimizer_for = [&](parallel::NamedParameters params) {
    return make_optimizer(o, lr, std::move(params));
  };
  parallel::add_strategies(strategies, o.parallel, job, optimizer_for);
  strategies.prepare(optimizer_for);
  Optimizer& optimizer = strategies.optimizer();
  if (ck) {
    strategies.restore(ck->optimizer, ck->meta.optimizer_steps);
    for (const auto& [name, state] : ck->meta.rngs) {
      if (name == task->generator_name()) rng.set_state(state);
      for (auto& [module_rng, r] : model->named_rngs())
        if (module_rng == name) r->set_state(state);
    }
    const std::string ranks = ck->meta.info.count("ranks") ? ck->meta.info.at("ranks") : "?";
    fmt::print(out, "resumed from {} (epoch {}, step {}{})\n", ck->path, at.epoch + 1, at.step,
               ranks != std::to_string(mesh.size()) ? fmt::format(", written by {} rank(s), now {}", ranks, mesh.size())
                                                     : std::string());
  }
  for (const std::string& line : strategies.intro_lines()) fmt::print(out, "{}\n", line);

  const std::int64_t spe = task->steps_per_epoch(), epochs = task->epochs(), max_steps = *o.max_steps;
  const Schedule schedule = lr_schedule(o, spe * epochs);
  std::int64_t planned = (epochs - at.epoch) * spe - at.index;
  if (max_steps > 0) planned = std::max<std::int64_t>(0, std::min(planned, max_steps - at.step));

  nlohmann::json summary = {{"model", o.model}, {"optimizer", *o.optimizer}, {"precision", o.precision},
                            {"parameters", model->num_parameters()}, {"threads", get_num_threads()},
                            {"ranks", mesh.size()}};
  if (ck) summary["resumed_from"] = ck->meta.step;
  std::int64_t rank_parameters = 0;
  for (const auto& [name, p] : strategies.part().trained) rank_parameters += p.value().numel();
  if (auto* z = strategies.find<parallel::Zero>(); z && z->stage() == 3) rank_parameters = z->zero().shard_elements();

  std::string last_checkpoint;
  auto save = [&](const Position& p) {
    if (o.checkpoint_dir.empty()) return;
    parallel::TrainState state = strategies.gather_state();  // every rank takes part
    if (rank != 0) return;
    CheckpointMeta meta;
    meta.model = task->model_tag();
    meta.step = p.step;
    meta.epoch = p.epoch;
    meta.batch_in_epoch = p.index;
    meta.optimizer = *o.optimizer;
    meta.optimizer_steps = optimizer.steps();
    meta.rngs.emplace_back(task->generator_name(), rng.state());
    for (auto& [name, r] : model->named_rngs()) meta.rngs.emplace_back(name, r->state());
    meta.info = {{"batch", std::to_string(*o.batch)}, {"ranks", std::to_string(mesh.size())},
                 {"lr", fmt::format("{}", lr)},        {"seed", std::to_string(o.seed)},
                 {"layout", mesh.shape().describe()},  {"data", *o.data}};
    last_checkpoint = save_checkpoint(o.checkpoint_dir, meta, state.model, state.optimizer, o.keep_checkpoints,
                                      state.per_rank);
  };

  std::unique_ptr<Timeline> timeline;
  if (!o.timeline.empty()) timeline = std::make_unique<Timeline>(rank);
  const int straggle_ms = straggler_ms(rank);
  const parallel::LossFn loss_fn = [&](Module& m, const parallel::StepBatch& b) { return task->loss(m, b); };
  const std::int64_t rank_state_bytes = static_cast<std::int64_t>(allocator_live_bytes());
  std::int64_t peak_step_bytes = 0, units = 0, window_steps = 0;
  double train_seconds = 0, compute_seconds = 0, window_loss = 0, window_seconds = 0, train_loss = 0;
  std::int64_t window_units = 0;
  std::optional<Evaluation> last_eval;
  Progress progress("step", static_cast<long>(planned));
  const auto run_start = Clock::now();

  // The loop.
  model->train();
  for (std::int64_t done = 0; done < planned; ++done) {
    const auto t0 = Clock::now();
    const parallel::StepBatch batch = task->batch(at.epoch, at.index, at.step, rng);
    if (straggle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(straggle_ms));
    const auto t1 = Clock::now();
    optimizer.set_lr(learning_rate(schedule, lr, at.step));
    const std::size_t live_before = allocator_live_bytes();
    allocator_reset_peak();
    const double comm_before = strategies.stats().exposed_seconds;
    const double loss = strategies.step(at.step + 1, done + 1 == planned, batch, loss_fn, *o.clip_grad);
    ++at.step;
    peak_step_bytes = std::max<std::int64_t>(peak_step_bytes, static_cast<std::int64_t>(allocator_peak_bytes() - live_before));
    const double step_seconds = seconds_since(t0);
    train_seconds += step_seconds;
    window_seconds += step_seconds;
    compute_seconds += seconds_since(t1) - (strategies.stats().exposed_seconds - comm_before);
    if (!std::isfinite(loss)) throw Error(fmt::format("loss became {} at step {}: lower the learning rate", loss, at.step));
    const std::int64_t rows = batch.inputs.size(0) * task->units_per_row();
    units += rows;
    window_units += rows;
    window_loss += loss;
    ++window_steps;
    if (timeline) {
      timeline->add("data", "data", t0, t1);
      for (const auto& s : strategies.stats().spans) timeline->add(s.name, s.category, s.start, s.end, s.row);
    }
    if (++at.index == spe) {
      at.index = 0;
      ++at.epoch;
    }
    const bool last = done + 1 == planned, epoch_end = at.index == 0;
    if (!o.quiet) {
      const double elapsed = seconds_since(run_start);
      progress.update(static_cast<long>(done + 1), elapsed / static_cast<double>(done + 1) * static_cast<double>(planned - done - 1),
                      fmt::format("loss {:.4f}  {:.0f} {}/s", window_loss / static_cast<double>(window_steps),
                                  static_cast<double>(units) / std::max(train_seconds, 1e-9), task->unit()));
    }
    if ((o.checkpoint_every > 0 && at.step % o.checkpoint_every == 0) || epoch_end || last) save(at);
    const bool round = strategies.round_ended();
    const bool evaluate_now = epoch_end || last || (*o.eval_every > 0 && at.step % *o.eval_every == 0) || round;
    if (!evaluate_now) continue;
    progress.finish();
    // The mean loss since the last evaluation, over every replica.
    double sums[2] = {window_loss, static_cast<double>(window_steps)};
    if (replicas) replicas->allreduce(sums, 2, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
    train_loss = sums[0] / std::max(sums[1], 1.0);
    const std::string rate = fmt::format("{:.0f} {}/s{}", static_cast<double>(window_units * mesh.shape().dp) /
                                                               std::max(window_seconds, 1e-9),
                                         task->unit(), mesh.size() > 1 ? fmt::format(" on {} ranks", mesh.size()) : "");
    std::optional<Evaluation> e;
    if (o.evaluate) e = task->evaluate(strategies, replicas);
    if (round && !epoch_end && !last) {
      fmt::print(out, "round {}: {}\n", strategies.find<parallel::FederatedAveraging>()->round(), e ? e->text : "");
    } else {
      fmt::print(out, "{}\n", task->progress_line(epoch_end ? at.epoch - 1 : at.epoch, at.step, epoch_end, train_loss,
                                                  e ? &*e : nullptr, rate));
      window_loss = window_seconds = 0;
      window_steps = window_units = 0;
    }
    std::fflush(out);
    if (e) last_eval = e;
  }
  progress.finish();

  // The whole model on rank 0; reports.
  strategies.finish();
  for (const std::string& line : strategies.report_lines()) fmt::print(out, "{}\n", line);
  const parallel::CommStats& comm = strategies.stats();
  double rate = static_cast<double>(units) / std::max(train_seconds, 1e-9);
  summary["steps"] = at.step;
  summary["epochs"] = at.epoch;
  summary["train_loss"] = train_loss;
  if (last_eval) summary[last_eval->field] = last_eval->value;
  summary["train_seconds"] = train_seconds;
  summary["rank_parameters"] = rank_parameters;
  summary["rank_state_bytes"] = rank_state_bytes;
  summary["peak_step_bytes"] = peak_step_bytes;
  if (mesh.size() > 1) {
    // Totals over the job: every replica's rate; times of this rank.
    std::vector<double> rates(static_cast<size_t>(mesh.shape().dp), rate);
    if (replicas) replicas->allgather(&rate, rates.data(), 1, comm::DataType::kF64)->wait();
    std::string per_rank;
    double total = 0;
    for (std::size_t r = 0; r < rates.size(); ++r) {
      total += rates[r];
      per_rank += fmt::format("{}replica {}: {:.0f}", r ? ", " : "", r, rates[r]);
    }
    if (replicas) fmt::print(out, "throughput ({}/s): {}; total {:.0f}\n", task->unit(), per_rank, total);
    summary["per_rank_" + task->unit() + "_per_second"] = rate;
    rate = total;
    const bool same = replicas_identical(*model, o.parallel.model_parallel() ? nullptr : replicas);
    if (!same) fmt::print(out, "warning: the ranks' parameters differ (checksums disagree)\n");
    summary["replicas_identical"] = same;
    summary["compute_seconds"] = compute_seconds;
    summary["comm_seconds"] = comm.seconds;
    summary["exposed_comm_seconds"] = comm.exposed_seconds;
    summary["overlap"] = comm.seconds > 0 ? std::max(0.0, 1.0 - comm.exposed_seconds / comm.seconds) : 0.0;
  }
  summary[task->unit() + "_per_second"] = rate;
  summary["samples"] = units / task->units_per_row() * mesh.shape().dp;
  if (mesh.shape().dp > 1) summary["data_parallel"] = mesh.shape().dp;
  if (mesh.shape().tp > 1) summary["tensor_parallel"] = mesh.shape().tp;
  if (auto* z = strategies.find<parallel::Zero>()) {
    const parallel::ZeroMemory m = z->zero().memory();
    summary["zero"] = z->stage();
    summary["zero_memory"] = {{"stage", z->stage()},         {"parameters", m.parameters},
                              {"gradients", m.gradients},     {"optimizer", m.optimizer},
                              {"step_parameters", m.peak_parameters}, {"replicated", z->replicated_bytes()}};
  }
  if (auto* p = strategies.find<parallel::Pipeline>()) {
    summary["pipeline"] = {{"stages", p->pipeline().stages()}, {"micro_batches", o.parallel.pipeline.micro_batches},
                           {"schedule", algo::pipe_schedule_name(o.parallel.pipeline.schedule)},
                           {"bubble", p->bubble()}, {"bubble_formula", p->bubble_formula()}};
  }
  if (auto* ps = strategies.find<parallel::ParameterServer>(); ps && ps->link_bytes_per_second() > 0) {
    summary["ps_model_seconds"] = ps->model_seconds();
    summary["ps_link_gbps"] = ps->link_bytes_per_second() / 1e9;
  }
  if (!last_checkpoint.empty()) summary["checkpoint"] = last_checkpoint;
  task->summarize(summary);
  if (timeline) timeline->write(timeline_path(o.timeline, rank, mesh.size()));
  if (rank == 0) {
    task->finish(*model, rng, out, summary);
    if (!o.save_model.empty())
      write_file_atomic(o.save_model, encode_safetensors(model->state_dict(), {{"format", "pt"}, {"weft_model", o.model}}));
  }
  summary["wall_seconds"] = seconds_since(wall_start);
  return {rank, summary};
}

}  // namespace weft
