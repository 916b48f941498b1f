// Tensor-parallel decoding across processes (seed 003 chapter 7's model parallelism for
// inference; the split of seed 002 chapter 8): every rank of a weft launch job holds its
// slice of the GPT (GptDecoder with a TensorSlice) and the key-value cache of its heads.
// Rank 0 serves (HTTP or the command line) through a TensorParallelDecoder: each step it
// broadcasts what to compute (the sequences, their new tokens, the sequences that ended),
// then all ranks compute it together, summing the partial projections with all-reduce.
// The other ranks follow (follow_tensor_parallel) until rank 0 ends the job. While idle,
// rank 0 sends a heartbeat so that the followers' wait never reaches the communicator's
// timeout.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "weft/comm/communicator.h"
#include "weft/serve/decoder.h"

namespace weft::serve {

class TensorParallelDecoder : public Decoder {
 public:
  TensorParallelDecoder(const GPT& model, WeightFormat format, std::shared_ptr<comm::Communicator> group);
  ~TensorParallelDecoder() override;  // tells the followers to stop
  std::unique_ptr<SequenceState> start() const override;
  Tensor extend(const std::vector<SequenceState*>& sequences,
                const std::vector<std::vector<std::int32_t>>& tokens) override;
  std::int64_t vocab() const override { return local_->vocab(); }
  std::int64_t context() const override { return local_->context(); }
  std::int64_t cache_bytes_per_sequence() const override { return local_->cache_bytes_per_sequence(); }
  std::int64_t weight_bytes() const override { return local_->weight_bytes(); }

 private:
  friend class TensorParallelState;
  void heartbeat();

  std::shared_ptr<comm::Communicator> group_;
  std::unique_ptr<GptDecoder> local_;
  mutable std::mutex mu_;  // one message at a time: the steps and the heartbeat
  mutable std::int64_t next_id_ = 0;
  std::vector<std::int64_t> ended_;  // sequences to drop with the next step
  std::map<std::int64_t, std::unique_ptr<SequenceState>> states_;  // this rank's caches, by id
  bool stopping_ = false;
  std::condition_variable cv_;
  std::thread heartbeat_;
};

// Ranks other than 0: computes the steps rank 0 broadcasts until it ends the job.
void follow_tensor_parallel(const GPT& model, WeightFormat format, std::shared_ptr<comm::Communicator> group);

// The decoder of a process of a job with `tp` tensor-parallel ranks (tp 1: make_decoder, no
// job). Under weft launch with tp ranks: rank 0 gets a TensorParallelDecoder; the others
// follow rank 0's steps until it ends the job, then get null. Throws ConfigError when the
// job's size is not tp or the model is not a GPT.
std::unique_ptr<Decoder> join_decoder(LanguageModel& model, WeightFormat format, int tp);

// The slice of `group`'s rank, summing over `group`.
TensorSlice tensor_slice(const std::shared_ptr<comm::Communicator>& group);

}  // namespace weft::serve
