// Model-parallel decoding across the processes of a weft launch job (seed 003 chapter 7:
// model parallelism for inference). Rank 0 serves (HTTP or the command line) through a
// DistributedDecoder: each decoding step it broadcasts what to compute (the sequences, their
// new tokens, the sequences that ended, those it restarted for preemption) and every rank
// runs the step on its part of the model with a StepRunner:
//
//   tensor parallelism (--tp N, seed 002 chapter 8's split): each rank holds its heads, its
//     slice of every MLP and the cache of its heads (GptDecoder with a TensorSlice); the
//     output projections' partial sums are all-reduced;
//   pipeline parallelism (--pp S): stage s holds blocks [s·L/S, (s+1)·L/S) and their caches;
//     the step's sequences are split into micro-batches that flow stage to stage (point to
//     point), so the stages work on different micro-batches at once; the last stage sends
//     each micro-batch's logits back to rank 0;
//   both (--tp N --pp S): each stage a group of N tensor-parallel ranks (world ranks
//     [s·N, (s+1)·N)), each rank passing its micro-batches to its counterpart in the next
//     stage (a stage's ranks each hold the whole activations), the last stage's first rank
//     sending the logits.
//
// The other ranks follow rank 0's steps until it ends the job. While idle, rank 0 sends a
// heartbeat so that the followers' wait stays within the communicator's timeout.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "weft/comm/communicator.h"
#include "weft/serve/decoder.h"

namespace weft::serve {

// What one rank does with a step (every rank gets the same step).
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual std::unique_ptr<SequenceState> start() = 0;  // this rank's state of a new sequence
  // Rank 0 returns the logits [S, vocab]; the others return an empty tensor.
  virtual Tensor run(const std::vector<SequenceState*>& sequences, const std::vector<std::vector<std::int32_t>>& tokens) = 0;
  virtual std::int64_t vocab() const = 0;
  virtual std::int64_t context() const = 0;
  virtual std::int64_t weight_bytes() const = 0;  // on this rank
  virtual std::int64_t cache_bytes_per_token() const = 0;  // this rank's cache (Decoder's)
  virtual std::int64_t cache_block_positions() const = 0;
  // Decoder's, on this rank's state of a sequence.
  virtual std::int64_t cache_blocks_after(const SequenceState& state, std::int64_t fed) const = 0;
  virtual std::unique_ptr<SequenceState> restart(const SequenceState& preempted,
                                                 std::vector<std::vector<std::int32_t>>& replay) const = 0;
};

std::unique_ptr<StepRunner> tensor_parallel_runner(const GPT& model, DecoderFormat format,
                                                   std::shared_ptr<comm::Communicator> group);
// Stages of `tp` tensor-parallel ranks each (tp 1: a rank a stage).
std::unique_ptr<StepRunner> pipeline_runner(const GPT& model, DecoderFormat format,
                                            std::shared_ptr<comm::Communicator> group, int micro_batches, int tp = 1);

// Rank 0's decoder: broadcasts each step, then runs its own part.
class DistributedDecoder : public Decoder {
 public:
  DistributedDecoder(std::unique_ptr<StepRunner> runner, std::shared_ptr<comm::Communicator> group);
  ~DistributedDecoder() override;  // tells the followers to stop
  std::unique_ptr<SequenceState> start() const override;
  Tensor extend(const std::vector<SequenceState*>& sequences,
                const std::vector<std::vector<std::int32_t>>& tokens) override;
  std::int64_t vocab() const override { return runner_->vocab(); }
  std::int64_t context() const override { return runner_->context(); }
  std::int64_t weight_bytes() const override { return runner_->weight_bytes(); }
  std::int64_t cache_bytes_per_token() const override { return runner_->cache_bytes_per_token(); }  // (rank 0's)
  std::int64_t cache_block_positions() const override { return runner_->cache_block_positions(); }
  // Rank 0's blocks (each rank's sequences hold the same positions).
  std::int64_t cache_blocks_after(const SequenceState& state, std::int64_t fed) const override;
  // Rank 0 restarts its state of the sequence at once (the replay is its feeds), every other
  // rank its own with the next step's message, before the step drops the preempted sequence;
  // the replay's feeds then rebuild each rank's cache bit for bit (GptDecoder::restart).
  std::unique_ptr<SequenceState> restart(const SequenceState& preempted,
                                         std::vector<std::vector<std::int32_t>>& replay) const override;

 private:
  friend class DistributedState;
  void heartbeat();

  std::unique_ptr<StepRunner> runner_;
  std::shared_ptr<comm::Communicator> group_;
  mutable std::mutex mu_;  // one message at a time: the steps and the heartbeat
  mutable std::int64_t next_id_ = 0;
  std::vector<std::int64_t> ended_;  // sequences to drop with the next step
  mutable std::vector<std::pair<std::int64_t, std::int64_t>> restarts_;  // (preempted, fresh) for the next step
  mutable std::map<std::int64_t, std::unique_ptr<SequenceState>> states_;  // this rank's states, by id
  bool stopping_ = false;
  std::string failed_;  // why the group failed (a heartbeat's error), if it did
  std::condition_variable cv_;
  std::thread heartbeat_;
};

// Ranks other than 0: runs the steps rank 0 broadcasts until it ends the job.
void follow(StepRunner& runner, comm::Communicator& group);

// The decoder of a process of a job with tp x pp model-parallel ranks (1 x 1: make_decoder,
// no job). Under a launcher with tp·pp ranks: rank 0 gets a DistributedDecoder; the others
// follow rank 0's steps until it ends the job, then get null. Run alone (no launcher in the
// environment), it checks the split and replaces the process with a job of tp·pp ranks on
// this node running the same command (comm::exec_as_local_job): it does not return. Throws
// ConfigError when the job's size does not match, or the model is not a GPT (or does not
// split so).
// How a split is named in messages: "--tp 2", "--pp 2" or "--tp 2 with --pp 2".
std::string split_name(int tp, int pp);

std::unique_ptr<Decoder> join_decoder(LanguageModel& model, DecoderFormat format, int tp, int pp = 1,
                                      int micro_batches = 0);

// The slice of `group`'s rank, summing over `group`.
TensorSlice tensor_slice(const std::shared_ptr<comm::Communicator>& group);

}  // namespace weft::serve
