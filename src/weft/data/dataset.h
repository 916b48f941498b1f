// Image classification datasets in memory: Fashion-MNIST (or any MNIST-format folder).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/tensor/tensor.h"

namespace weft {

struct ImageDataset {
  Tensor images;                     // [N, C, H, W] float32, normalized
  std::vector<std::int32_t> labels;  // N class indices
  std::int64_t num_classes = 10;
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
};

// Where the Debian package dataset-fashion-mnist installs the data.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Fashion-MNIST training-set pixel mean and standard deviation (of values scaled to [0, 1]).
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

// Loads "<dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"; split is "train" or
// "test". Pixels become (p / 255 - mean) / std. `limit` > 0 keeps the first `limit`
// samples. `side` > 0: the images must be side x side (what the model takes). Throws
// DataError naming the folder or file and the problem (for a size: the expected shape).
ImageDataset load_mnist_format(const std::string& dir, const std::string& split, double mean = kFashionMnistMean,
                               double stddev = kFashionMnistStd, std::int64_t limit = 0, std::int64_t side = 0);

// The folder for a --data name: "fashion-mnist" means `data_dir` when given, else the
// Debian package's folder; anything else is taken as a folder path.
std::string resolve_data_dir(const std::string& data, const std::string& data_dir);

}  // namespace weft
