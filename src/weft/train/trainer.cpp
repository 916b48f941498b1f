#include "weft/train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "weft/autograd/functions.h"
#include "weft/comm/communicator.h"
#include "weft/comm/process.h"
#include "weft/data/partition.h"
#include "weft/parallel/ddp.h"
#include "weft/parallel/zero.h"
#include "weft/util/units.h"
#include "weft/parallel/fedavg.h"
#include "weft/parallel/param_server.h"
#include "weft/train/safetensors.h"
#include "weft/train/timeline.h"

#include <zlib.h>
#include "weft/data/dataloader.h"
#include "weft/nn/models.h"
#include "weft/optim/adam.h"
#include "weft/optim/sgd.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"
#include "weft/train/checkpoint.h"
#include "weft/util/file.h"
#include "weft/util/progress.h"

namespace weft {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, std::vector<std::pair<std::string, Var>> params) {
  if (c.optimizer == "sgd") return std::make_unique<SGD>(params, c.lr, c.momentum, c.weight_decay);
  AdamOptions o;
  o.weight_decay = c.weight_decay;
  o.decoupled = c.optimizer == "adamw";
  return std::make_unique<Adam>(params, c.lr, o);
}

// Test accuracy; with several ranks, rank r evaluates samples r, r + world, ... and the
// counts are summed.
double evaluate(Module& model, const ImageDataset& test, comm::Communicator* comm) {
  NoGradGuard no_grad;
  model.eval();
  const std::int64_t world = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  std::vector<std::int64_t> mine;
  for (std::int64_t i = rank; i < test.size(); i += world) mine.push_back(i);
  DataLoader loader(test, {1000, false, false, 0});
  std::int64_t counts[2] = {0, static_cast<std::int64_t>(mine.size())};  // correct, seen
  for (std::int64_t b = 0; b * 1000 < static_cast<std::int64_t>(mine.size()); ++b) {
    Batch batch = loader.batch(mine, b);
    auto pred = ops::argmax_rows(model(Var(batch.images)).value());
    for (size_t i = 0; i < pred.size(); ++i) counts[0] += pred[i] == batch.labels[i];
  }
  if (comm) comm->allreduce(counts, 2, comm::DataType::kI64, comm::ReduceOp::kSum)->wait();
  model.train();
  return static_cast<double>(counts[0]) / static_cast<double>(std::max<std::int64_t>(counts[1], 1));
}

std::map<std::string, std::string> run_info(const TrainConfig& c, int world) {
  return {{"batch", std::to_string(c.batch)},      {"ranks", std::to_string(world)},   {"lr", fmt::format("{}", c.lr)},
          {"seed", std::to_string(c.seed)},     {"epochs", std::to_string(c.epochs)},
          {"schedule", c.schedule.kind},        {"momentum", fmt::format("{}", c.momentum)},
          {"weight_decay", fmt::format("{}", c.weight_decay)}};
}

}  // namespace

void check_precision(const std::string& precision) {
  if (precision != "fp32" && precision != "bf16")
    throw ConfigError("unknown --precision '" + precision + "' (known: fp32, bf16)");
}

void validate(const TrainConfig& c) {
  make_model(c.model, *std::make_unique<Rng>(0));  // throws for an unknown name
  require_finite("--lr", c.lr);
  require_finite("--weight-decay", c.weight_decay);
  if (c.epochs < 1) throw ConfigError("--epochs must be at least 1, got " + std::to_string(c.epochs));
  if (c.batch < 1) throw ConfigError("--batch must be at least 1, got " + std::to_string(c.batch));
  if (!(c.lr > 0)) throw ConfigError("--lr must be positive, got " + fmt::format("{}", c.lr));
  if (c.optimizer != "sgd" && c.optimizer != "adam" && c.optimizer != "adamw") {
    throw ConfigError("unknown optimizer '" + c.optimizer + "' (known: sgd, adam, adamw)");
  }
  if (c.momentum < 0 || c.momentum >= 1) throw ConfigError("--momentum must be in [0, 1)");
  if (c.weight_decay < 0) throw ConfigError("--weight-decay must be >= 0");
  if (c.threads < 0) throw ConfigError("--threads must be at least 1");
  check_precision(c.precision);
  if (c.checkpoint_every < 0 || c.max_steps < 0 || c.limit_train < 0 || c.limit_test < 0) {
    throw ConfigError("step and sample counts must be >= 0");
  }
  if (c.keep_checkpoints < 1) throw ConfigError("--keep-checkpoints must be at least 1");
  if (c.dp < 0) throw ConfigError("--dp must be at least 1");
  if (c.strategy != "ddp" && c.strategy != "ps" && c.strategy != "fedavg") {
    throw ConfigError("unknown strategy '" + c.strategy + "' (known: ddp, ps, fedavg)");
  }
  if (c.servers < 1) throw ConfigError("--servers must be at least 1");
  if (c.clients < 0) throw ConfigError("--clients must be at least 1");
  if (c.local_steps < 1) throw ConfigError("--local-steps must be at least 1");
  if (c.eval_rounds < 0) throw ConfigError("--eval-rounds must be >= 0");
  if (c.scale_lr != "none" && c.scale_lr != "linear") {
    throw ConfigError("--scale-lr '" + c.scale_lr + "' is not one of none, linear");
  }
  if (!(c.non_iid > 0)) throw ConfigError("--non-iid must be positive (or inf for IID data)");
  if (c.strategy == "ps" && c.staleness >= 0 && (!c.checkpoint_dir.empty() || c.resume || c.auto_resume)) {
    throw ConfigError("checkpoints are not supported with the asynchronous parameter server (--staleness) yet");
  }
  if (c.staleness < -1) throw ConfigError("--staleness must be -1 (synchronous) or at least 0");
  if (c.staleness >= 0 && c.strategy != "ps") throw ConfigError("--staleness needs --strategy ps");
  if (c.zero < 0 || c.zero > 3) throw ConfigError("--zero must be 0, 1, 2 or 3, got " + std::to_string(c.zero));
  if (c.zero > 0 && c.strategy != "ddp") throw ConfigError("--zero works with --strategy ddp, not " + c.strategy);
  if (!(c.bucket_mb > 0) || !(c.first_bucket_mb > 0)) throw ConfigError("bucket sizes must be positive");
  if ((c.resume || c.auto_resume) && c.checkpoint_dir.empty()) {
    throw ConfigError(std::string(c.resume ? "--resume" : "--auto-resume") + " needs --checkpoint-dir");
  }
  validate(c.schedule);
}

std::string TrainSummary::to_json() const {
  nlohmann::json j = {{"model", model},
                      {"optimizer", optimizer},
                      {"precision", precision},
                      {"parameters", parameters},
                      {"epochs", epochs_done},
                      {"steps", steps},
                      {"samples", samples},
                      {"train_loss", train_loss},
                      {"test_accuracy", test_accuracy},
                      {"train_seconds", train_seconds},
                      {"samples_per_second", samples_per_second},
                      {"wall_seconds", wall_seconds},
                      {"threads", threads},
                      {"ranks", ranks}};
  if (ps_model_seconds > 0) {
    j["ps_model_seconds"] = ps_model_seconds;
    j["ps_link_gbps"] = ps_link_gbps;
  }
  if (ranks > 1) {
    j["replicas_identical"] = replicas_identical;
    j["per_rank_samples_per_second"] = per_rank_samples_per_second;
    j["compute_seconds"] = compute_seconds;
    j["comm_seconds"] = comm_seconds;
    j["exposed_comm_seconds"] = exposed_comm_seconds;
    j["overlap"] = overlap;
  }
  if (zero > 0) {
    j["zero"] = zero;
    j["zero_memory"] = {{"parameters", zero_param_bytes},
                        {"gradients", zero_grad_bytes},
                        {"optimizer", zero_optimizer_bytes},
                        {"peak_parameters", zero_peak_param_bytes},
                        {"replicated", replicated_bytes}};
  }
  if (!checkpoint.empty()) j["checkpoint"] = checkpoint;
  return j.dump();
}

TrainSummary train(const TrainConfig& config, std::FILE* out) {
  const auto wall_start = Clock::now();
  TrainConfig c = config;
  validate(c);
  if (c.threads > 0) set_num_threads(c.threads);
  Bf16Guard precision(c.precision == "bf16");

  // Data parallelism: one rank per process, started by weft launch (or mpirun, Slurm).
  const comm::ProcessInfo proc = comm::process_info_from_env();
  if (c.dp > 1 && proc.world != c.dp) {
    throw ConfigError("--dp " + std::to_string(c.dp) + " but the job has " + std::to_string(proc.world) +
                      " rank(s): start it with weft launch --nproc-per-node " + std::to_string(c.dp));
  }
  if (c.dp == 1 && proc.world > 1) throw ConfigError("--dp 1 but the job has " + std::to_string(proc.world) + " ranks");
  std::shared_ptr<comm::Communicator> job;
  if (proc.world > 1) job = comm::Communicator::init(proc, comm::CommOptions::from_env());
  // The ranks that train (all of them, but for the parameter servers) form `comm`.
  std::shared_ptr<comm::Communicator> comm = job;
  int ps_workers = 0;
  bool is_server = false;
  if (c.strategy == "ps") {
    const int n = proc.world - c.servers;
    if (n < 1) {
      throw ConfigError("--strategy ps --servers " + std::to_string(c.servers) + " needs more ranks than servers (the job has " +
                        std::to_string(proc.world) + ")");
    }
    ps_workers = n;
    is_server = proc.rank >= n;
    if (!is_server) {
      std::vector<int> workers(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) workers[static_cast<size_t>(i)] = i;
      comm = n > 1 ? job->new_group(workers) : nullptr;
    }
  }
  if (c.strategy == "fedavg" && c.clients > 0 && c.clients != proc.world) {
    throw ConfigError("--clients " + std::to_string(c.clients) + " but the job has " + std::to_string(proc.world) +
                      " rank(s): one rank per client");
  }
  // For a server, `world` is the number of workers it serves.
  const int world = is_server ? ps_workers : (comm ? comm->size() : 1);
  const int rank = is_server ? proc.rank : (comm ? comm->rank() : 0);
  if (c.batch % world != 0) {
    throw ConfigError("--batch " + std::to_string(c.batch) + " (the global batch) is not divisible by the " +
                      std::to_string(world) + " ranks");
  }
  std::FILE* null_out = nullptr;
  if (rank != 0) {  // one voice: rank 0 reports
    null_out = std::fopen("/dev/null", "w");
    out = null_out;
    c.quiet = true;
  }
  struct CloseNull {
    std::FILE* f;
    ~CloseNull() {
      if (f) std::fclose(f);
    }
  } close_null{null_out};

  std::string dir = resolve_data_dir(c.data, c.data_dir);
  ImageDataset train_set = load_mnist_format(dir, "train", kFashionMnistMean, kFashionMnistStd, c.limit_train);
  ImageDataset test_set;
  if (c.evaluate) test_set = load_mnist_format(dir, "test", kFashionMnistMean, kFashionMnistStd, c.limit_test);

  Rng rng(c.seed);
  auto model = make_model(c.model, rng);
  auto optimizer = make_optimizer(c, model->named_parameters());
  // (A server counts the steps of worker 0.)
  DataLoader loader(train_set, {c.batch / world, true, false, c.seed, world, is_server ? 0 : rank});
  const std::int64_t steps_per_epoch = loader.num_batches();
  if (c.schedule.total_steps <= 1) c.schedule.total_steps = steps_per_epoch * c.epochs;
  std::int64_t total_steps = steps_per_epoch * c.epochs;
  if (c.max_steps > 0) total_steps = std::min(total_steps, c.max_steps);

  // The link bandwidth for seed 003's cost model, measured before training.
  double ps_link = 0;
  std::int64_t model_bytes = model->num_parameters() * 4;
  if (c.strategy == "ps" && (rank == 0 || proc.rank == ps_workers)) {
    ps_link = parallel::measure_link(*job, ps_workers, rank == 0 && !is_server, model->num_parameters());
  }

  // A parameter server serves, and that is all it does. With checkpoints it sends worker 0
  // its shard after the steps where worker 0 saves, and resumes from the latest one.
  if (is_server) {
    TrainSummary s;
    s.rank = proc.rank;
    std::int64_t first_step = 0;
    std::optional<Checkpoint> ck;
    if (c.resume || c.auto_resume) {
      if (auto latest_ps = latest_checkpoint(c.checkpoint_dir)) {
        ck = load_checkpoint(*latest_ps);
        model->load_state_dict(ck->model);
        first_step = ck->meta.step;
      }
    }
    parallel::ServerCheckpoints saves;
    if (!c.checkpoint_dir.empty()) {
      // Worker 0 saves every --checkpoint-every steps, at each epoch's end, and at the end.
      saves.at = [&, total_steps, steps_per_epoch](std::int64_t st) {
        return st == total_steps || st % steps_per_epoch == 0 || (c.checkpoint_every > 0 && st % c.checkpoint_every == 0);
      };
      saves.final_after_weights = total_steps % steps_per_epoch == 0;  // then it pulls before saving
    }
    auto report = parallel::run_parameter_server(
        *model, job, ps_workers, c.servers, proc.rank - ps_workers, total_steps,
        [&](std::vector<std::pair<std::string, Var>> shard) { return make_optimizer(c, std::move(shard)); },
        [&](std::int64_t st) { return learning_rate(c.schedule, c.lr, st); }, c.staleness, first_step,
        ck ? &ck->optimizer : nullptr, saves);
    s.steps = report.steps;
    if (c.staleness >= 0)  // the servers speak for themselves (rank 0 is a worker)
      fmt::print(stdout, "parameter server {}: asynchronous, staleness bound {}: {} updates, largest staleness seen {}\n",
                 proc.rank - ps_workers, c.staleness, report.updates, report.max_staleness);
    s.comm_seconds = report.comm_seconds;
    s.wall_seconds = seconds_since(wall_start);
    return s;
  }

  // Federated clients with label skew train on their own part of the data.
  std::optional<DataLoader> client_loader;
  if (c.strategy == "fedavg" && !std::isinf(c.non_iid)) {
    auto parts = dirichlet_partition(train_set.labels, static_cast<int>(train_set.num_classes), world, c.non_iid, c.seed);
    if (parts[static_cast<size_t>(rank)].size() < static_cast<size_t>(c.batch / world)) {
      throw ConfigError("client " + std::to_string(rank) + " received only " +
                        std::to_string(parts[static_cast<size_t>(rank)].size()) +
                        " samples: raise --non-iid or use fewer clients");
    }
    client_loader.emplace(train_set, LoaderOptions{c.batch / world, true, false, c.seed + 1 + static_cast<std::uint64_t>(rank),
                                                   1, 0, parts[static_cast<size_t>(rank)]});
    if (rank == 0) {
      std::string sizes;
      for (const auto& part : parts) sizes += (sizes.empty() ? "" : ", ") + std::to_string(part.size());
      fmt::print(out, "federated averaging: {} clients, Dirichlet({}) label skew, samples per client: {}\n", world,
                 c.non_iid, sizes);
    }
  }
  std::int64_t client_epoch = -1;
  std::vector<std::int64_t> client_order;

  TrainSummary s;
  s.model = c.model;
  s.optimizer = c.optimizer;
  s.precision = c.precision;
  s.parameters = model->num_parameters();
  s.threads = get_num_threads();
  s.ranks = world;
  s.rank = rank;

  std::int64_t step = 0, start_epoch = 0, start_batch = 0;
  std::optional<std::string> latest;
  StateDict resumed_optimizer;
  if (c.resume || c.auto_resume) {
    latest = latest_checkpoint(c.checkpoint_dir);
    if (!latest && c.resume) throw CheckpointError("--resume: no checkpoint in " + c.checkpoint_dir);
    if (!latest) fmt::print(out, "no checkpoint in {} yet: starting from the beginning\n", c.checkpoint_dir);
  }
  if (latest) {
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
    resumed_optimizer = ck.optimizer;  // ZeRO takes its shard of it below
    for (const auto& [name, st] : ck.meta.rngs) {
      if (name == "init") rng.set_state(st);
      for (auto& [mname, r] : model->named_rngs())
        if (mname == name) r->set_state(st);
    }
    step = ck.meta.step;
    start_epoch = ck.meta.epoch;
    start_batch = ck.meta.batch_in_epoch;
    // Another global batch (say, the same per-rank batch on another number of ranks): the
    // position in the epoch carries over in samples, and the learning rate may follow the batch.
    const std::int64_t old_batch = ck.meta.info.count("batch") ? std::stoll(ck.meta.info.at("batch")) : c.batch;
    if (old_batch != c.batch) {
      const std::int64_t consumed = start_batch * old_batch;
      if (consumed % c.batch != 0) {
        throw CheckpointError(ck.path + ": " + std::to_string(consumed) + " samples of the epoch are done, not a multiple "
                              "of the new global batch " + std::to_string(c.batch) + "; resume at an epoch boundary or "
                              "with a batch that divides it");
      }
      start_batch = consumed / c.batch;
      if (c.scale_lr == "linear") {
        const double base = ck.meta.info.count("lr") ? std::stod(ck.meta.info.at("lr")) : c.lr;
        const double scaled = base * static_cast<double>(c.batch) / static_cast<double>(old_batch);
        fmt::print(out, "learning rate scaled linearly with the global batch ({} -> {}): {} -> {}\n", old_batch, c.batch,
                   base, scaled);
        c.lr = scaled;
      }
    }
    if (start_batch >= steps_per_epoch) {
      throw CheckpointError(ck.path + ": position " + std::to_string(start_batch) + " is past the epoch's " +
                            std::to_string(steps_per_epoch) + " batches (different data or batch size?)");
    }
    fmt::print(out, "resumed from {} (epoch {}, step {}{})\n", ck.path, start_epoch + 1, step,
               ck.meta.info.count("ranks") && ck.meta.info.at("ranks") != std::to_string(world)
                   ? ", written by " + ck.meta.info.at("ranks") + " rank(s), now " + std::to_string(world)
                   : std::string());
  }

  // After a resume every replica holds the checkpoint; DDP's broadcast keeps them equal.
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  std::unique_ptr<parallel::ParameterServerWorker> ps;
  std::unique_ptr<parallel::ZeroRedundancyOptimizer> zero;
  if (c.zero > 0) {
    zero = std::make_unique<parallel::ZeroRedundancyOptimizer>(
        *model, comm, c.zero, [&](std::vector<std::pair<std::string, Var>> shard) { return make_optimizer(c, std::move(shard)); });
  } else if (c.strategy == "ddp" && comm) {
    ddp = std::make_unique<parallel::DistributedDataParallel>(*model, comm,
                                                              parallel::DdpOptions{c.first_bucket_mb, c.bucket_mb});
  }
  if (zero && latest) {
    // A consolidated checkpoint (from ZeRO or not, on any number of ranks): this rank's shard.
    zero->load_state(resumed_optimizer);
    zero->optimizer().set_steps(optimizer->steps());
  }
  Optimizer* opt = zero ? &zero->optimizer() : optimizer.get();
  // Evaluation and the end of training need the full parameters (ZeRO stage 3 shards them).
  auto evaluate_model = [&]() {
    if (zero) zero->gather();
    const double acc = evaluate(*model, test_set, comm.get());
    if (zero) zero->release();
    return acc;
  };
  if (c.strategy == "ps") ps = std::make_unique<parallel::ParameterServerWorker>(*model, job, ps_workers, c.servers, c.staleness);
  if (c.strategy == "fedavg" && comm) parallel::average_weights(*model, *comm);  // one starting point
  std::unique_ptr<Timeline> timeline;
  if (!c.timeline.empty()) timeline = std::make_unique<Timeline>(rank);
  std::FILE* sample_log = nullptr;
  if (!c.sample_log.empty()) {
    std::string path = timeline_path(c.sample_log, rank, world);
    sample_log = std::fopen(path.c_str(), "a");
    if (!sample_log) throw ConfigError("--sample-log: cannot write " + path);
  }
  struct CloseLog {
    std::FILE* f;
    ~CloseLog() {
      if (f) std::fclose(f);
    }
  } close_log{sample_log};

  // WEFT_STRAGGLER=RANK:MS makes one rank sleep MS milliseconds per step: a slow worker, to
  // see what asynchronous parameter servers and overlap do about it.
  int straggle_ms = 0;
  if (const char* e = std::getenv("WEFT_STRAGGLER")) {
    int who = -1, ms = 0;
    if (std::sscanf(e, "%d:%d", &who, &ms) != 2 || who < 0 || ms < 0)
      throw ConfigError(std::string("WEFT_STRAGGLER='") + e + "' is not RANK:MILLISECONDS");
    if (who == rank) straggle_ms = ms;
  }
  auto save = [&](std::int64_t epoch, std::int64_t next_batch) {
    if (c.checkpoint_dir.empty()) return;
    // ZeRO: every rank takes part in consolidating the sharded state (and, stage 3, in
    // gathering the parameters); rank 0 writes it with each rank's shard next to it.
    parallel::ZeroCheckpointScope zero_scope(zero.get());  // every rank takes part
    const auto& zero_state = zero_scope.state;
    if (rank != 0) return;
    // A parameter server holds the optimizer state: worker 0 receives it, with the weights
    // after this step's update.
    StateDict ps_state;
    if (ps) {
      std::vector<std::string> buffers;
      for (const auto& [key, t] : optimizer->state()) {
        std::string prefix = key.substr(0, key.find('.'));
        if (std::find(buffers.begin(), buffers.end(), prefix + ".shard") == buffers.end()) buffers.push_back(prefix + ".shard");
      }
      ps_state = ps->receive_checkpoint(buffers);
    }
    CheckpointMeta meta;
    meta.model = c.model;
    meta.step = step;
    meta.epoch = epoch;
    meta.batch_in_epoch = next_batch;
    meta.optimizer = c.optimizer;
    meta.optimizer_steps = ps ? step : opt->steps();
    meta.rngs.emplace_back("init", rng.state());
    for (auto& [name, r] : model->named_rngs()) meta.rngs.emplace_back(name, r->state());
    meta.info = run_info(c, world);
    s.checkpoint = save_checkpoint(c.checkpoint_dir, meta, model->state_dict(),
                                   zero ? zero_state.consolidated : ps ? ps_state : optimizer->state(), c.keep_checkpoints,
                                   zero_state.per_rank);
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
      Batch batch;
      if (client_loader) {  // a federated client cycles through its own data
        const std::int64_t g = epoch * steps_per_epoch + b, nb = client_loader->num_batches();
        if (g / nb != client_epoch) {
          client_epoch = g / nb;
          client_order = client_loader->epoch_order(client_epoch);
        }
        batch = client_loader->batch(client_order, g % nb);
      } else {
        batch = loader.batch(order, b);
      }
      if (ps) ps->pull();
      if (straggle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(straggle_ms));
      if (sample_log && !client_loader) {  // "epoch step index" per sample, for audits of the data order
        for (std::int64_t i = b * loader.options().batch_size;
             i < std::min<std::int64_t>((b + 1) * loader.options().batch_size, static_cast<std::int64_t>(order.size()));
             ++i) {
          std::fprintf(sample_log, "%lld %lld %lld\n", static_cast<long long>(epoch), static_cast<long long>(step),
                       static_cast<long long>(order[static_cast<size_t>(i)]));
        }
        std::fflush(sample_log);
      }
      const auto t1 = Clock::now();
      opt->set_lr(learning_rate(c.schedule, c.lr, step));
      opt->zero_grad();
      std::chrono::duration<double> zero_comm(0);
      if (zero) zero_comm += zero->gather();
      Var loss = cross_entropy(model->forward(Var(batch.images)), batch.labels);
      const auto t2 = Clock::now();
      loss.backward();
      const auto t3 = Clock::now();
      std::chrono::duration<double> exposed(0);
      if (ddp) exposed = ddp->finish();
      if (zero) exposed = zero->finish();
      if (ps) ps->push();
      const auto t4 = Clock::now();
      if (zero) {
        zero_comm += zero->step();  // the shard's update, then (stages 1, 2) the parameters' all-gather
        exposed += zero_comm;       // ZeRO's collectives all block
        s.comm_seconds += exposed.count();
      } else if (!ps) {
        optimizer->step();  // (with a parameter server, the servers update the weights)
      }
      const auto t5 = Clock::now();
      ++step;
      if (c.strategy == "fedavg" && comm && step % c.local_steps == 0) {
        auto f0 = Clock::now();
        parallel::average_weights(*model, *comm);
        s.comm_seconds += seconds_since(f0);
        s.exposed_comm_seconds += seconds_since(f0);
        const std::int64_t round = step / c.local_steps;
        if (c.eval_rounds > 0 && c.evaluate && round % c.eval_rounds == 0) {
          double acc = evaluate_model();
          fmt::print(out, "round {}: test accuracy {:.2f}%\n", round, 100.0 * acc);
        }
      }
      epoch_train_seconds += seconds_since(t0);
      s.compute_seconds += std::chrono::duration<double>((t3 - t1) + (t5 - t4)).count() - zero_comm.count();
      s.exposed_comm_seconds += exposed.count();
      if (ddp) {
        for (const auto& bt : ddp->timings()) {
          s.comm_seconds += std::chrono::duration<double>(bt.finished - bt.launched).count();
          if (timeline) timeline->add("allreduce " + std::to_string(bt.bytes >> 10) + " KiB", "comm", bt.launched,
                                      bt.finished, 1);
        }
      }
      if (timeline) {
        timeline->add("data", "data", t0, t1);
        timeline->add("forward", "compute", t1, t2);
        timeline->add("backward", "compute", t2, t3);
        if (ddp) timeline->add("wait for all-reduce", "comm", t3, t4);
        if (zero) timeline->add(c.zero == 1 ? "all-reduce gradients" : "reduce-scatter gradients", "comm", t3, t4);
        timeline->add("optimizer", "compute", t4, t5);
      }
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
    if (ps && (partial || stop || epoch + 1 == c.epochs)) ps->pull();  // the final weights
    if (c.strategy == "fedavg" && comm && step % c.local_steps != 0 && (partial || stop || epoch + 1 == c.epochs)) {
      parallel::average_weights(*model, *comm);  // the last, partial round
    }
    s.train_seconds += epoch_train_seconds;
    s.samples += epoch_samples;
    s.steps = step;
    if (comm) {  // the mean loss over all ranks
      double sums[2] = {loss_sum, static_cast<double>(loss_count)};
      comm->allreduce(sums, 2, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
      loss_sum = sums[0];
      loss_count = static_cast<std::int64_t>(sums[1]);
    }
    s.train_loss = loss_sum / static_cast<double>(std::max<std::int64_t>(loss_count, 1));
    if (partial) {
      fmt::print(out, "stopped after step {} (--max-steps), in epoch {}: train loss {:.4f}  ({:.0f} samples/s)\n", step,
                 epoch + 1, s.train_loss, static_cast<double>(epoch_samples) / std::max(epoch_train_seconds, 1e-9));
      break;
    }
    s.epochs_done = epoch + 1;
    std::string acc_text;
    if (c.evaluate) {
      s.test_accuracy = evaluate_model();
      acc_text = fmt::format(", test accuracy {:.2f}%", 100.0 * s.test_accuracy);
    }
    fmt::print(out, "epoch {}/{}: train loss {:.4f}{}  ({:.0f} samples/s{}, {} steps)\n", epoch + 1, c.epochs,
               s.train_loss, acc_text, world * epoch_samples / std::max(epoch_train_seconds, 1e-9),
               world > 1 ? fmt::format(" on {} ranks", world) : std::string(), step);
    std::fflush(out);
    save(epoch + 1, 0);
  }
  s.steps = step;
  s.samples_per_second = s.samples / std::max(s.train_seconds, 1e-9);
  if (zero) {
    zero->gather();  // the full parameters, for the replica check and --save-model
    const parallel::ZeroMemory m = zero->memory();
    s.zero = c.zero;
    s.zero_param_bytes = m.parameters;
    s.zero_grad_bytes = m.gradients;
    s.zero_optimizer_bytes = m.optimizer;
    s.zero_peak_param_bytes = m.peak_parameters;
    const std::int64_t n = model->num_parameters() * 4;
    s.replicated_bytes = n + n + n * (c.optimizer == "sgd" ? (c.momentum > 0 ? 1 : 0) : 2);
    fmt::print(out,
               "ZeRO stage {} on {} rank(s), rank 0 holds between steps: parameters {}, gradients {}, optimizer state "
               "{}; total {} (replicated, as DDP: {}); parameters during a step: {}\n",
               c.zero, world, human_bytes(m.parameters), human_bytes(m.gradients), human_bytes(m.optimizer),
               human_bytes(m.total()), human_bytes(s.replicated_bytes), human_bytes(m.peak_parameters));
  }
  if (comm) {
    // Totals over the job: samples of every rank; times of the slowest rank.
    std::vector<double> rates(static_cast<size_t>(world));
    comm->allgather(&s.samples_per_second, rates.data(), 1, comm::DataType::kF64)->wait();
    s.per_rank_samples_per_second = s.samples_per_second;
    s.samples_per_second = 0;
    std::string per_rank;
    for (int r = 0; r < world; ++r) {
      s.samples_per_second += rates[static_cast<size_t>(r)];
      per_rank += fmt::format("{}rank {}: {:.0f}", r ? ", " : "", r, rates[static_cast<size_t>(r)]);
    }
    fmt::print(out, "throughput (samples/s): {}; total {:.0f}\n", per_rank, s.samples_per_second);
    s.samples *= world;
    s.overlap = s.comm_seconds > 0 ? std::max(0.0, 1.0 - s.exposed_comm_seconds / s.comm_seconds) : 0.0;
    // Replicas must stay bitwise identical: compare a checksum of every rank's parameters.
    std::string bytes = encode_safetensors(model->state_dict());
    std::int64_t mine = static_cast<std::int64_t>(crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()),
                                                        static_cast<uInt>(bytes.size())));
    std::vector<std::int64_t> all(static_cast<size_t>(world));
    comm->allgather(&mine, all.data(), 1, comm::DataType::kI64)->wait();
    for (auto sum : all) s.replicas_identical = s.replicas_identical && sum == mine;
    if (!s.replicas_identical) fmt::print(out, "warning: the ranks' parameters differ (checksums disagree)\n");
  }
  if (ps) {
    s.comm_seconds = ps->comm_seconds();
    s.exposed_comm_seconds = s.comm_seconds;
    if (rank == 0 && ps_link > 0) {
      const double bytes = static_cast<double>(model_bytes);
      s.ps_link_gbps = ps_link / 1e9;
      s.ps_model_seconds =
          parallel::ps_cost_model_seconds(world, c.servers, bytes, bytes, ps_link) * static_cast<double>(std::max<std::int64_t>(s.steps, 1));
      fmt::print(out,
                 "parameter server, {} worker(s), {} server(s): communication {:.3f} ms per step measured; seed 003's "
                 "model N*g/(M*BW) + N*W/(M*BW) gives {:.3f} ms (g = W = {:.2f} MB, BW = {:.2f} GB/s measured point to "
                 "point)\n",
                 world, c.servers, 1e3 * s.comm_seconds / static_cast<double>(std::max<std::int64_t>(s.steps, 1)),
                 1e3 * s.ps_model_seconds / static_cast<double>(std::max<std::int64_t>(s.steps, 1)), bytes / 1e6,
                 s.ps_link_gbps);
    }
  }
  if (timeline) timeline->write(timeline_path(c.timeline, rank, world));
  if (!c.save_model.empty() && rank == 0) {
    write_file_atomic(c.save_model, encode_safetensors(model->state_dict(), {{"format", "pt"}, {"weft_model", c.model}}));
  }
  s.wall_seconds = seconds_since(wall_start);
  return s;
}

}  // namespace weft
