// A training job's processes and how they share the work: the options that name a layout
// (mesh dimensions, the data-parallel strategy, ZeRO, pipeline and tensor settings), the
// roles they give the processes (parameter-server ranks serve; the others train on a
// mesh), and the composition of strategies a training rank runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "weft/comm/communicator.h"
#include "weft/comm/process.h"
#include "weft/parallel/ddp.h"
#include "weft/parallel/mesh.h"
#include "weft/parallel/pipeline.h"
#include "weft/parallel/strategy.h"

namespace weft::parallel {

struct ParallelOptions {
  MeshShape mesh{0, 1, 1};           // dp x pp x tp training ranks (dp 0: what the job's ranks allow)
  std::string strategy = "ddp";      // how replicas agree: ddp | ps | fedavg
  int zero = 0;                      // ZeRO stage over the data-parallel group (0: off)
  DdpOptions ddp;
  PipelineOptions pipeline{1, algo::PipeSchedule::k1F1B, 2, "params"};  // micro_batches > 1 with pp 1: in one process
  std::string tp_attention = "megatron";  // megatron | seed (seed 002 chapter 8)
  int servers = 1;                   // ps: server ranks, the last ones of the job
  int staleness = -1;                // ps: asynchronous with this bound; -1 synchronous
  std::int64_t local_steps = 1;      // fedavg: steps per round
  std::int64_t eval_rounds = 0;      // fedavg: an evaluation every this many rounds
  bool whole_model_at_end = true;    // zero 3: gather the parameters after the last step (zero.h)

  bool pipelined() const { return mesh.pp > 1 || pipeline.micro_batches > 1; }
  bool model_parallel() const { return pipelined() || mesh.tp > 1; }
};

// Throws ConfigError on values no layout has (before any process starts talking).
void validate(const ParallelOptions& options);

struct Job {
  comm::ProcessInfo process;
  std::shared_ptr<comm::Communicator> world;  // every rank (null: a job of one)
  bool serves = false;                        // a parameter-server rank
  int server = -1;                            // which server (0..servers-1)
  int workers = 1;                            // training ranks
  Mesh mesh;                                  // of the training ranks
};

// How many of the job's processes run on this machine (the launcher's LOCAL_WORLD_SIZE or its
// equivalent; 1 without a launcher): the processes that share its memory.
int ranks_on_this_machine();

// Joins the job the launcher (or mpirun, Slurm) started and gives this process its role;
// throws ConfigError when the job's size does not fit the options.
Job join_job(ParallelOptions& options);
// The same for a group already connected (a live elastic job's generation, or the ranks a
// pipeline keeps after merging stages): `world` holds every rank of the job (null: one).
Job join_group(ParallelOptions& options, std::shared_ptr<comm::Communicator> world);

// The first `ranks` ranks of `world` as a group of their own (collective over `world`;
// null for one rank): the ranks a pipeline keeps after merging stages.
std::shared_ptr<comm::Communicator> first_ranks(const std::shared_ptr<comm::Communicator>& world, int ranks);

// The strategies `options` name, for a training rank of `job`, in wrapping order.
void add_strategies(Strategies& strategies, const ParallelOptions& options, const Job& job,
                    const OptimizerFactory& make_optimizer);

}  // namespace weft::parallel
