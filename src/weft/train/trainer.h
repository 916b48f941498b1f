// The training loop for image classifiers: data, model, optimizer, schedule, progress,
// evaluation after each epoch, periodic and per-epoch checkpoints, exact resume.
#pragma once

#include <cstdio>
#include <limits>
#include <string>

#include "weft/optim/schedule.h"

namespace weft {

struct TrainConfig {
  std::string model = "mlp";
  std::string data = "fashion-mnist";  // or a folder of MNIST-format files
  std::string data_dir;                // overrides the Debian package folder for fashion-mnist
  std::int64_t epochs = 1;
  std::int64_t batch = 64;
  double lr = 0.01;
  std::string optimizer = "sgd";  // sgd | adam | adamw
  double momentum = 0.9;          // sgd
  double weight_decay = 0.0;
  Schedule schedule;  // total_steps is filled in from epochs when 0
  std::uint64_t seed = 0;
  int threads = 0;  // 0: WEFT_NUM_THREADS or the number of cores
  std::string checkpoint_dir;
  bool resume = false;       // continue from the newest checkpoint (which must exist)
  bool auto_resume = false;  // continue from the newest checkpoint when there is one (restarts)
  // On a resume with another global batch: "linear" scales the learning rate with the batch
  // (seed 003: multiply the single-node rate by the number of workers); "none" keeps --lr.
  std::string scale_lr = "none";
  std::string sample_log;    // append every trained sample index to this file (per rank)
  std::string save_model;    // write the final parameters here (safetensors; rank 0)
  std::int64_t checkpoint_every = 0;  // steps; 0: only at the end of each epoch
  int keep_checkpoints = 3;
  std::int64_t max_steps = 0;   // stop after this many steps in total (0: no limit)
  std::int64_t limit_train = 0;  // use only the first N training samples (0: all)
  std::int64_t limit_test = 0;
  bool evaluate = true;
  bool quiet = false;  // no progress display
  // Data parallelism: with more than one rank (weft launch), `batch` is the global batch,
  // split evenly among the ranks. dp = 0 takes the world size from the launcher; a value
  // must match it.
  int dp = 0;
  // How the replicas stay in step: ddp (all-reduce of gradients), ps (parameter server:
  // the last `servers` ranks hold the weights), fedavg (clients train `local_steps` steps on
  // their own data, then rank 0 averages the weights; non_iid = Dirichlet concentration of
  // the label skew, infinity = IID).
  std::string strategy = "ddp";
  int zero = 0;  // ZeRO stage (1, 2, 3) instead of DDP's replicated optimizer; 0: off
  int servers = 1;
  int staleness = -1;  // ps: asynchronous with this bound (stale synchronous parallel); -1: synchronous
  int clients = 0;  // 0: every rank of the job
  std::int64_t local_steps = 1;
  double non_iid = std::numeric_limits<double>::infinity();
  std::int64_t eval_rounds = 0;  // fedavg: test accuracy every this many rounds (0: per epoch only)
  double bucket_mb = 25.0;
  double first_bucket_mb = 1.0;
  std::string timeline;  // a Chrome-trace file per rank
  // fp32, or bf16: mixed precision (products read bf16 operands, activations kept for
  // backward are stored in bf16; parameters, gradients and optimizer state stay fp32).
  std::string precision = "fp32";
};

struct TrainSummary {
  std::string model;
  std::string optimizer;
  std::string precision = "fp32";
  std::int64_t parameters = 0;
  std::int64_t epochs_done = 0;
  std::int64_t steps = 0;
  std::int64_t samples = 0;        // trained in this run
  double train_loss = 0.0;         // mean over the last epoch's steps (this run)
  double test_accuracy = -1.0;     // after the last epoch; -1 when not evaluated
  double train_seconds = 0.0;      // forward, backward and update only
  double samples_per_second = 0.0;      // all ranks together
  double per_rank_samples_per_second = 0.0;
  double wall_seconds = 0.0;
  int threads = 1;
  int ranks = 1;
  int rank = 0;                         // this process's rank (only rank 0 reports)
  bool replicas_identical = true;       // every rank ended with bitwise the same parameters
  double compute_seconds = 0.0;         // forward, backward, optimizer (this rank)
  double comm_seconds = 0.0;            // all-reduce time, launch to finish, summed over buckets
  int zero = 0;                         // ZeRO stage, and rank 0's bytes (between steps) under it
  std::int64_t zero_param_bytes = 0, zero_grad_bytes = 0, zero_optimizer_bytes = 0, zero_peak_param_bytes = 0;
  std::int64_t replicated_bytes = 0;    // what the same state takes replicated (DDP)
  double exposed_comm_seconds = 0.0;    // time spent waiting for all-reduces after backward
  double overlap = 0.0;                 // 1 - exposed / comm: the share of communication hidden
  double ps_model_seconds = 0.0;        // parameter server: seed 003's cost model for the same run
  double ps_link_gbps = 0.0;            // the point-to-point bandwidth it was evaluated with
  std::string checkpoint;  // the last checkpoint written, if any
  std::string to_json() const;
};

// Validates the configuration and throws ConfigError on a bad value.
void validate(const TrainConfig& config);
// Throws ConfigError unless `precision` is fp32 or bf16.
void check_precision(const std::string& precision);
// Trains; human-readable lines go to `out` (one per epoch), progress to stderr.
TrainSummary train(const TrainConfig& config, std::FILE* out);

}  // namespace weft
