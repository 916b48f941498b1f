#include "weft/data/dataloader.h"

#include <cstring>
#include <numeric>

#include "weft/tensor/rng.h"
#include "weft/tensor/thread_pool.h"

namespace weft {

DataLoader::DataLoader(const ImageDataset& dataset, LoaderOptions options)
    : dataset_(dataset), options_(std::move(options)) {
  for (auto i : options_.subset) {
    if (i < 0 || i >= dataset_.size()) throw ConfigError("sampler: subset index " + std::to_string(i) + " out of range");
  }
  if (options_.batch_size < 1) {
    throw ConfigError("batch size must be at least 1, got " + std::to_string(options_.batch_size));
  }
}

std::int64_t DataLoader::num_batches() const {
  const std::int64_t n = options_.subset.empty() ? dataset_.size() : static_cast<std::int64_t>(options_.subset.size());
  const std::int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<std::int64_t> DataLoader::epoch_order(std::int64_t epoch) const {
  std::vector<std::int64_t> order;
  if (options_.subset.empty()) {
    order.resize(static_cast<size_t>(dataset_.size()));
    std::iota(order.begin(), order.end(), 0);
  } else {
    order = options_.subset;
  }
  if (options_.shuffle) {
    Rng rng(options_.seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(epoch) + 1);
    rng.shuffle(order);
  }
  return order;
}

Batch DataLoader::batch(const std::vector<std::int64_t>& order, std::int64_t index) const {
  // Compared by division: index * batch may overflow for an index from outside.
  WEFT_CHECK(index >= 0 && index < (static_cast<std::int64_t>(order.size()) + options_.batch_size - 1) / options_.batch_size,
             "batch index out of range");
  std::int64_t begin = index * options_.batch_size;
  std::int64_t end = std::min<std::int64_t>(begin + options_.batch_size, static_cast<std::int64_t>(order.size()));
  std::int64_t b = end - begin;
  Shape shape = dataset_.images.shape();
  shape[0] = b;
  Batch out;
  out.images = Tensor::empty(shape, DType::F32);
  out.labels.resize(static_cast<size_t>(b));
  std::int64_t per = dataset_.images.numel() / std::max<std::int64_t>(dataset_.size(), 1);
  const float* src = dataset_.images.data<float>();
  float* dst = out.images.data<float>();
  parallel_for(b, 32, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t i = s; i < e; ++i) {
      std::memcpy(dst + i * per, src + order[begin + i] * per, sizeof(float) * per);
    }
  });
  for (std::int64_t i = 0; i < b; ++i) out.labels[i] = dataset_.labels[order[begin + i]];
  return out;
}

}  // namespace weft
