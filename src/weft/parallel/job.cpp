#include "weft/parallel/job.h"

#include <numeric>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "weft/parallel/fedavg.h"
#include "weft/parallel/param_server.h"
#include "weft/parallel/tensor_parallel.h"
#include "weft/parallel/zero.h"
#include "weft/util/error.h"

namespace weft::parallel {

void validate(const ParallelOptions& o) {
  if (o.mesh.dp < 0 || o.mesh.pp < 1 || o.mesh.tp < 1) throw ConfigError("--dp, --tp and --pp must be at least 1");
  if (o.strategy != "ddp" && o.strategy != "ps" && o.strategy != "fedavg")
    throw ConfigError("unknown strategy '" + o.strategy + "' (known: ddp, ps, fedavg)");
  if (o.zero < 0 || o.zero > 3) throw ConfigError("--zero must be 0, 1, 2 or 3, got " + std::to_string(o.zero));
  if (o.zero > 0 && o.strategy != "ddp") throw ConfigError("--zero works with --strategy ddp, not " + o.strategy);
  if (!(o.ddp.bucket_mb > 0 && o.ddp.bucket_mb <= 1e6) || !(o.ddp.first_bucket_mb > 0 && o.ddp.first_bucket_mb <= 1e6))
    throw ConfigError("--bucket-mb and --first-bucket-mb must be above 0 and at most 1e6 MiB");  // NaN and inf too
  if (o.servers < 1) throw ConfigError("--servers must be at least 1");
  if (o.staleness < -1) throw ConfigError("--staleness must be -1 (synchronous) or at least 0");
  if (o.staleness >= 0 && o.strategy != "ps") throw ConfigError("--staleness needs --strategy ps");
  if (o.local_steps < 1) throw ConfigError("--local-steps must be at least 1");
  if (o.eval_rounds < 0) throw ConfigError("--eval-rounds must be >= 0");
  if (o.pipeline.micro_batches < 1)
    throw ConfigError("--micro-batches must be at least 1, got " + std::to_string(o.pipeline.micro_batches));
  if (o.pipeline.chunks < 1) throw ConfigError("--chunks must be at least 1, got " + std::to_string(o.pipeline.chunks));
  if (o.pipeline.balance != "params" && o.pipeline.balance != "time")
    throw ConfigError("unknown --balance '" + o.pipeline.balance + "' (known: params, time)");
  if (o.tp_attention != "megatron" && o.tp_attention != "seed")
    throw ConfigError("unknown --tp-attention '" + o.tp_attention + "' (known: megatron, seed)");
  const std::string& wire = o.ddp.grad_dtype;
  if (wire != "fp32" && wire != "bf16" && wire != "fp16")
    throw ConfigError("unknown --grad-dtype '" + wire + "' (known: fp32, bf16, fp16)");
  if (wire != "fp32" && (o.strategy != "ddp" || o.zero > 0))
    throw ConfigError("--grad-dtype " + wire + " works with DDP (--strategy ddp without --zero)");
  if (o.ddp.error_feedback && wire == "fp32") throw ConfigError("--error-feedback needs --grad-dtype bf16 or fp16");
  if (o.model_parallel() && o.strategy != "ddp")
    throw ConfigError("--strategy " + o.strategy + " works with data parallelism alone, not with --pp, --tp or --micro-batches");
}

namespace {

// The roles and the mesh of a job of `job.process.world` ranks, whose group `connect` makes.
Job assign_roles(ParallelOptions& o, Job job, const std::function<std::shared_ptr<comm::Communicator>()>& connect) {
  const int world = job.process.world, model_ranks = o.mesh.pp * o.mesh.tp;
  const int servers = o.strategy == "ps" ? o.servers : 0;
  const int workers = world - servers;
  if (servers > 0 && workers < 1) {
    throw ConfigError(fmt::format("--strategy ps --servers {} needs more ranks than servers (the job has {})", servers,
                                  world));
  }
  const int dp = o.mesh.dp > 0 ? o.mesh.dp : std::max(1, workers / model_ranks);
  if (dp * model_ranks != workers) {
    const MeshShape want{dp, o.mesh.pp, o.mesh.tp};
    const int dims = (want.dp > 1) + (want.tp > 1) + (want.pp > 1);
    const std::string what = dims > 1       ? fmt::format("--dp {} x --tp {} x --pp {}", want.dp, want.tp, want.pp)
                             : want.tp > 1  ? fmt::format("--tp {}", want.tp)
                             : want.pp > 1  ? fmt::format("--pp {}", want.pp)
                                            : fmt::format("--dp {}", want.dp);
    const int need = want.size() + servers;
    throw ConfigError(fmt::format("{} needs {} ranks{}: start it with weft launch --nproc-per-node {} (the job has {})",
                                  what, need, servers ? fmt::format(" with {} server(s)", servers) : "", need, world));
  }
  o.mesh.dp = dp;
  job.workers = workers;
  job.world = connect();
  job.serves = job.process.rank >= workers;
  if (job.serves) {
    job.server = job.process.rank - workers;
    return job;
  }
  // The training ranks: the whole job, or (parameter servers) its first `workers` ranks.
  std::shared_ptr<comm::Communicator> trainers = job.world;
  if (servers > 0 && workers > 1) {
    std::vector<int> ranks(static_cast<std::size_t>(workers));
    for (int i = 0; i < workers; ++i) ranks[static_cast<std::size_t>(i)] = i;
    trainers = job.world->new_group(ranks);
  } else if (servers > 0) {
    trainers = nullptr;
  }
  job.mesh = Mesh(trainers, o.mesh);
  return job;
}

}  // namespace

int ranks_on_this_machine() { return std::max(comm::process_info_from_env().local_world, 1); }

Job join_job(ParallelOptions& o) {
  Job job;
  job.process = comm::process_info_from_env();
  const comm::ProcessInfo process = job.process;
  return assign_roles(o, job, [process]() -> std::shared_ptr<comm::Communicator> {
    if (process.world == 1) return nullptr;
    return comm::Communicator::init(process, comm::CommOptions::from_env());
  });
}

Job join_group(ParallelOptions& o, std::shared_ptr<comm::Communicator> world) {
  Job job;
  job.process.rank = world ? world->rank() : 0;
  job.process.world = world ? world->size() : 1;
  job.process.launcher = "weft";
  return assign_roles(o, job, [&world] { return world; });
}

void add_strategies(Strategies& strategies, const ParallelOptions& o, const Job& job,
                    const OptimizerFactory& make_optimizer) {
  const Mesh& mesh = job.mesh;
  if (o.mesh.tp > 1)
    strategies.add(std::make_unique<TensorParallel>(mesh.tp(), mesh.model().get(), o.tp_attention == "seed"));
  if (o.pipelined()) strategies.add(std::make_unique<Pipeline>(mesh.pp(), mesh.model().get(), o.pipeline));
  if (o.strategy == "ps") {
    strategies.add(std::make_unique<ParameterServer>(job.world, job.workers, o.servers, o.staleness));
  } else if (o.strategy == "fedavg") {
    strategies.add(std::make_unique<FederatedAveraging>(mesh.dp(), o.local_steps, o.eval_rounds));
  } else if (o.zero > 0) {
    strategies.add(std::make_unique<Zero>(mesh.dp(), o.zero, make_optimizer, o.whole_model_at_end));
  } else if (mesh.dp()) {
    strategies.add(std::make_unique<DataParallel>(mesh.dp(), o.ddp));
  }
}

std::shared_ptr<comm::Communicator> first_ranks(const std::shared_ptr<comm::Communicator>& world, int ranks) {
  std::vector<int> members(static_cast<std::size_t>(ranks));
  std::iota(members.begin(), members.end(), 0);
  return ranks > 1 ? world->new_group(members) : nullptr;
}

}  // namespace weft::parallel
