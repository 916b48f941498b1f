#include "weft/parallel/ddp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "weft/tensor/ops.h"

namespace weft::parallel {

using Clock = std::chrono::steady_clock;

comm::DataType comm_dtype(const Tensor& t) {
  return t.dtype() == DType::F32 ? comm::DataType::kF32 : comm::DataType::kF64;
}

DistributedDataParallel::DistributedDataParallel(Module& model, std::shared_ptr<comm::Communicator> comm,
                                                 DdpOptions options)
    : DistributedDataParallel(model.parameters(), std::move(comm), options) {}

DistributedDataParallel::DistributedDataParallel(std::vector<Var> params, std::shared_ptr<comm::Communicator> comm,
                                                 DdpOptions options)
    : comm_(std::move(comm)), params_(std::move(params)) {
  if (!(options.first_bucket_mb > 0) || !(options.bucket_mb > 0)) throw ConfigError("bucket sizes must be positive");
  // Every replica starts from rank 0's parameters.
  for (auto& p : params_) {
    Tensor& v = p.mutable_value();
    WEFT_CHECK(v.is_contiguous(), "DDP needs contiguous parameters");
    comm_->broadcast(v.raw_data(), v.numel(), comm_dtype(v), 0)->wait();
  }
  // Buckets in reverse registration order: the order backward finishes gradients.
  bucket_of_.assign(params_.size(), 0);
  double cap = options.first_bucket_mb * 1024 * 1024;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const Tensor& v = params_[k].value();
    const double bytes = static_cast<double>(v.nbytes());
    bool new_bucket = buckets_.empty() ||
                      (!buckets_.back().params.empty() &&
                       static_cast<double>(buckets_.back().elements) * static_cast<double>(dtype_size(v.dtype())) +
                               bytes > cap) ||
                      params_[buckets_.back().params.front()].dtype() != v.dtype();
    if (new_bucket) {
      if (!buckets_.empty()) cap = options.bucket_mb * 1024 * 1024;
      buckets_.emplace_back();
    }
    Bucket& b = buckets_.back();
    b.params.push_back(k);
    b.offsets.push_back(b.elements);
    b.elements += v.numel();
    bucket_of_[k] = buckets_.size() - 1;
  }
  for (auto& b : buckets_) {
    b.flat = Tensor::zeros({b.elements}, params_[b.params.front()].dtype());
    if (options.grad_dtype == "bf16" && b.flat.dtype() == DType::F32) b.wire = Tensor::zeros({b.elements}, DType::BF16);
    if (options.grad_dtype == "fp16" && b.flat.dtype() == DType::F32) b.half.resize(static_cast<std::size_t>(b.elements));
    if ((b.wire.defined() || !b.half.empty()) && options.error_feedback)
      b.residual = Tensor::zeros({b.elements}, DType::F32);
  }
  timings_.resize(buckets_.size());
  for (std::size_t k = 0; k < params_.size(); ++k) params_[k].set_grad_ready_hook([this, k] { on_ready(k); });
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& p : params_) p.set_grad_ready_hook(nullptr);
  for (auto& b : buckets_)
    if (b.work) b.work->test();
}

void DistributedDataParallel::on_ready(std::size_t param) {
  if (!sync_) return;
  Bucket& b = buckets_[bucket_of_[param]];
  if (++b.ready == static_cast<int>(b.params.size())) launch(bucket_of_[param]);
}

void DistributedDataParallel::launch(std::size_t index) {
  Bucket& b = buckets_[index];
  if (b.work) return;
  // Gather the gradients (zeros for a parameter without one) into the flat buffer.
  for (std::size_t j = 0; j < b.params.size(); ++j) {
    const Var& p = params_[b.params[j]];
    Tensor dst = b.flat.slice(0, b.offsets[j], b.offsets[j] + p.value().numel()).view(p.shape());
    if (p.grad().defined()) dst.copy_(p.grad()); else dst.zero_();
  }
  if (measure_) local_sq_ += ops::sum_of_squares(b.flat);
  timings_[index].launched = Clock::now();
  if (!b.half.empty()) {
    compress_f16(b);
    timings_[index].bytes = b.elements * 2;
    b.work = comm_->allreduce(b.half.data(), b.elements, comm::DataType::kF16, comm::ReduceOp::kAvg);
    b.work->start();
    return;
  }
  if (b.wire.defined()) {
    compress(b);
    timings_[index].bytes = static_cast<std::int64_t>(b.wire.nbytes());
    b.work = comm_->allreduce(b.wire.raw_data(), b.elements, comm::DataType::kBF16, comm::ReduceOp::kAvg);
    b.work->start();
    return;
  }
  timings_[index].bytes = static_cast<std::int64_t>(b.flat.nbytes());
  b.work = comm_->allreduce(b.flat.raw_data(), b.elements, comm_dtype(b.flat), comm::ReduceOp::kAvg);
  b.work->start();  // runs on the communicator's thread while the backward pass goes on
}

// The bucket's gradients (plus the error carried from the last step) rounded to bf16 into
// the wire buffer; the error carried on is what that rounding took.
void DistributedDataParallel::compress(Bucket& b) {
  float* g = b.flat.data<float>();
  bf16* w = b.wire.data<bf16>();
  float* r = b.residual.defined() ? b.residual.data<float>() : nullptr;
  for (std::int64_t i = 0; i < b.elements; ++i) {
    const float v = r ? g[i] + r[i] : g[i];
    w[i] = to_bf16(v);
    if (r) r[i] = v - from_bf16(w[i]);
  }
}

// The bucket's gradients (plus the error carried) times its scale, rounded to float16; the
// error carried on is what that rounding took, unscaled.
void DistributedDataParallel::compress_f16(Bucket& b) {
  const float* g = b.flat.data<float>();
  float* r = b.residual.defined() ? b.residual.data<float>() : nullptr;
  const float s = b.scale, inverse = 1.0f / b.scale;
  constexpr std::int64_t kBlock = 512;  // converted a block at a time (util/half_float.h)
  float v[kBlock], back[kBlock];
  for (std::int64_t at = 0; at < b.elements; at += kBlock) {
    const std::int64_t n = std::min(kBlock, b.elements - at);
    for (std::int64_t i = 0; i < n; ++i) v[i] = (r ? g[at + i] + r[at + i] : g[at + i]) * s;
    std::uint16_t* h = b.half.data() + at;
    f16_from_floats(v, h, static_cast<std::size_t>(n));
    if (!r) continue;
    floats_from_f16(h, back, static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) r[at + i] = (v[i] - back[i]) * inverse;
  }
}

bool DistributedDataParallel::widen_f16(Bucket& b) {
  float* g = b.flat.data<float>();
  const float inverse = 1.0f / b.scale;
  constexpr std::int64_t kBlock = 512;
  float v[kBlock];
  float largest = 0;
  for (std::int64_t at = 0; at < b.elements; at += kBlock) {  // (the local gradients stay until all is finite)
    const std::int64_t n = std::min(kBlock, b.elements - at);
    floats_from_f16(b.half.data() + at, v, static_cast<std::size_t>(n));
    float m = 0;
    for (std::int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));  // (NaN: ignored by max, caught below)
    bool finite = std::isfinite(m);
    for (std::int64_t i = 0; i < n && finite; ++i) finite = v[i] == v[i];
    if (!finite) return false;
    largest = std::max(largest, m);
  }
  for (std::int64_t at = 0; at < b.elements; at += kBlock) {
    const std::int64_t n = std::min(kBlock, b.elements - at);
    floats_from_f16(b.half.data() + at, g + at, static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) g[at + i] *= inverse;
  }
  largest *= inverse;
  // The next scale: the largest averaged value times 8 x ranks within float16's range.
  if (largest > 0) {
    const double room = 65504.0 / (8.0 * comm_->size() * largest);
    b.scale = static_cast<float>(std::ldexp(1.0, std::clamp(static_cast<int>(std::floor(std::log2(room))), -24, 24)));
  }
  return true;
}

std::chrono::duration<double> DistributedDataParallel::finish() {
  if (!sync_) return std::chrono::duration<double>(0);
  // Buckets whose parameters got no gradient this pass still take part (as zeros), so
  // every rank issues the same all-reduces.
  for (std::size_t i = 0; i < buckets_.size(); ++i) launch(i);
  auto start = Clock::now();
  double mean_sq = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    b.work->wait();
    timings_[i].finished = b.work->finished_at();
    if (b.wire.defined()) b.flat.copy_(b.wire);  // the averaged bf16 gradients, widened
    if (!b.half.empty() && !widen_f16(b)) {
      // The average overflowed float16 on every rank alike: this bucket again in float32
      // (the local gradients are still in it), nothing carried, a smaller scale.
      b.work = comm_->allreduce(b.flat.raw_data(), b.elements, comm::DataType::kF32, comm::ReduceOp::kAvg);
      b.work->wait();
      if (b.residual.defined()) b.residual.zero_();
      b.scale /= 16;
      ++overflows_;
    }
    if (measure_) mean_sq += ops::sum_of_squares(b.flat);
    for (std::size_t j = 0; j < b.params.size(); ++j) {
      Var p = params_[b.params[j]];
      p.set_grad(b.flat.slice(0, b.offsets[j], b.offsets[j] + p.value().numel()).view(p.shape()));
    }
    b.work.reset();
    b.ready = 0;
  }
  if (measure_) norms_ = {local_sq_, mean_sq};
  local_sq_ = 0;
  return Clock::now() - start;
}

void DataParallel::prepare(ModelPart& part) {
  if (!group_) return;
  std::vector<Var> params;
  for (const auto& [name, p] : part.trained) params.push_back(p);
  ddp_ = std::make_unique<DistributedDataParallel>(std::move(params), group_, options_);
  at_update_ = part.accumulates;
  ddp_->set_sync(!at_update_);
}

void DataParallel::after_backward(CommStats& stats) {
  if (!ddp_) return;
  if (at_update_) ddp_->set_sync(true);
  const auto start = std::chrono::steady_clock::now();
  const auto exposed = ddp_->finish();
  record_span("wait for all-reduce", "comm", 0, start);
  if (at_update_) ddp_->set_sync(false);
  stats.exposed_seconds += exposed.count();
  for (const BucketTiming& t : ddp_->timings()) {
    stats.seconds += std::chrono::duration<double>(t.finished - t.launched).count();
    record_span("allreduce " + std::to_string(t.bytes >> 10) + " KiB", "comm", 1, t.launched, t.finished);
  }
}

}  // namespace weft::parallel
