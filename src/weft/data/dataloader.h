// DataLoader: batches of an in-memory dataset (or of a subset of it) in a seeded order.
//
// The order of epoch e is a pure function of (seed, e), so a run resumed from a checkpoint
// at any step sees exactly the batches the uninterrupted run would have seen. Data-parallel
// replicas all draw this order and take their rows of each global batch (deal.h).
#pragma once

#include <cstdint>
#include <vector>

#include "weft/data/dataset.h"

namespace weft {

struct Batch {
  Tensor images;                     // [B, C, H, W]
  std::vector<std::int32_t> labels;  // B
};

struct LoaderOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  std::uint64_t seed = 0;
  std::vector<std::int64_t> subset = {};  // when not empty: only these samples (a client's data)
};

class DataLoader {
 public:
  // Throws ConfigError for a batch size below 1.
  DataLoader(const ImageDataset& dataset, LoaderOptions options);
  std::int64_t num_batches() const;
  // The sample indices of epoch `epoch`, in order.
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;
  // Batch `index` of a list of sample indices (an epoch's order, or any list).
  Batch batch(const std::vector<std::int64_t>& order, std::int64_t index) const;
  const LoaderOptions& options() const { return options_; }

 private:
  const ImageDataset& dataset_;
  LoaderOptions options_;
};

}  // namespace weft
