// Distributed data parallelism (PyTorch DDP's design): every rank holds a replica of the
// model and trains on its own shard of each batch; gradients are averaged with all-reduce.
//
// - The constructor broadcasts rank 0's parameters, so every replica starts equal.
// - Parameters are grouped into buckets in reverse registration order (the order backward
//   produces their gradients): the first bucket holds up to first_bucket_mb, the others up
//   to bucket_mb.
// - A hook on every parameter counts gradients as backward() finalizes them; when a
//   bucket is complete its gradients are copied into one flat buffer and an asynchronous
//   all-reduce (average) starts at once, so communication overlaps the rest of backward.
// - finish() (after backward) starts what is left, waits, and points every parameter's
//   gradient at its averaged slice of the bucket.
// - With no_sync (gradient accumulation), gradients only accumulate locally.
// - Compressed gradients (seed 003 chapter 4's fewer bits, --grad-dtype bf16): a bucket's
//   float32 gradients travel as bfloat16, half the bytes, and are reduced in float32 with one
//   rounding per combine (comm/reduce.h); with error feedback each rank adds what rounding
//   took from its gradients to the next step's, so over the steps nothing is lost.
//   --grad-dtype fp16: as float16, which has 3 more bits of mantissa and far less range, so
//   each bucket is scaled first (by a power of two every rank derives alike from the last
//   averaged gradients: their largest value times 8 x ranks stays within float16's 65504);
//   a bucket whose average still overflowed is all-reduced again in float32 (every rank sees
//   the same infinities and does so) and its scale cut by 16.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/nn/module.h"
#include "weft/parallel/strategy.h"

namespace weft::parallel {

struct DdpOptions {
  double first_bucket_mb = 1.0;
  double bucket_mb = 25.0;
  // The gradients' type on the wire: fp32, bf16 (float32 buckets all-reduced as bfloat16) or
  // fp16 (as float16, scaled per bucket).
  std::string grad_dtype = "fp32";
  bool error_feedback = false;  // with bf16 or fp16: carry the rounding error to the next step
};

// Timings of the last synchronized backward pass, for timelines and overlap figures.
struct BucketTiming {
  std::chrono::steady_clock::time_point launched, finished;
  std::int64_t bytes = 0;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(Module& model, std::shared_ptr<comm::Communicator> comm, DdpOptions options = {});
  // The same over some parameters (a pipeline stage's, a tensor-parallel slice's).
  DistributedDataParallel(std::vector<Var> params, std::shared_ptr<comm::Communicator> comm, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Call after loss.backward(): completes the gradient all-reduce. Returns the time it
  // blocked waiting for communication (the exposed communication).
  std::chrono::duration<double> finish();
  // While false (no_sync), backward only accumulates gradients locally.
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }

  const std::vector<BucketTiming>& timings() const { return timings_; }

  // The gradient norms of the last synchronized pass (strategy.h), when measured (one pass
  // over the gradients each).
  void measure_norms(bool on) { measure_ = on; }
  // f16 gradients: buckets whose average overflowed float16 (all-reduced again in float32).
  std::int64_t overflows() const { return overflows_; }
  const GradientNorms& norms() const { return norms_; }

 private:
  struct Bucket {
    std::vector<std::size_t> params;  // indices into params_
    std::vector<std::int64_t> offsets;
    std::int64_t elements = 0;
    Tensor flat;
    Tensor wire, residual;  // bf16 gradients: what travels, and what rounding left behind
    std::vector<std::uint16_t> half;  // f16 gradients: what travels (float16 bits)
    float scale = 1;                  // f16: the bucket's scale (a power of two)
    int ready = 0;
    comm::WorkPtr work;
  };
  void on_ready(std::size_t param);
  void launch(std::size_t bucket);
  static void compress(Bucket& b);
  static void compress_f16(Bucket& b);
  // f16: the averaged gradients back into the bucket, and the next scale; false on overflow.
  bool widen_f16(Bucket& b);

  std::shared_ptr<comm::Communicator> comm_;
  std::vector<Var> params_;
  std::vector<std::size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<BucketTiming> timings_;
  bool sync_ = true;
  bool measure_ = false;
  std::int64_t overflows_ = 0;
  double local_sq_ = 0;  // this pass's, over the buckets launched so far
  GradientNorms norms_;
};

// Scope guard: no gradient synchronization while alive (PyTorch's no_sync()).
class NoSync {
 public:
  explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync()) { ddp.set_sync(false); }
  ~NoSync() { ddp_.set_sync(previous_); }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;

 private:
  DistributedDataParallel& ddp_;
  bool previous_;
};

// The strategy: DDP over the mesh's data-parallel group (nothing to do on a group of one).
// Under a pipeline (gradients accumulating over micro-batches) the buckets start at the
// update instead of during backward, after the tied embedding's gradients are summed.
class DataParallel : public Strategy {
 public:
  DataParallel(std::shared_ptr<comm::Communicator> group, DdpOptions options) : group_(std::move(group)), options_(options) {}
  std::string name() const override { return "ddp"; }
  void prepare(ModelPart& part) override;
  void after_backward(CommStats& stats) override;
  bool measure_gradient_norms() override {
    if (ddp_) ddp_->measure_norms(true);
    return ddp_ != nullptr;
  }
  const GradientNorms* gradient_norms() const override { return ddp_ ? &ddp_->norms() : nullptr; }
  DistributedDataParallel* ddp() { return ddp_.get(); }

 private:
  std::shared_ptr<comm::Communicator> group_;
  DdpOptions options_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  bool at_update_ = false;
};

// The communicator's element type for a tensor.
comm::DataType comm_dtype(const Tensor& t);

}  // namespace weft::parallel
