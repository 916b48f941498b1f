#include "weft/data/dataset.h"

#include <fmt/format.h>

#include "weft/data/idx.h"
#include "weft/util/dispatch.h"
#include "weft/util/file.h"

namespace weft {

namespace {
std::string find_file(const std::string& dir, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    std::string p = dir + "/" + stem + ext;
    if (file_exists(p)) return p;
  }
  throw DataError("data directory " + dir + " has no " + stem + " or " + stem + ".gz");
}
}  // namespace

std::string resolve_data_dir(const std::string& data, const std::string& data_dir) {
  if (data == "fashion-mnist") return data_dir.empty() ? std::string(kFashionMnistDir) : data_dir;
  if (!data_dir.empty()) throw ConfigError("give either --data PATH or --data fashion-mnist --data-dir PATH, not both");
  return data;
}

ImageDataset load_mnist_format(const std::string& dir, const std::string& split, double mean, double stddev,
                               std::int64_t limit, std::int64_t side) {
  if (!is_directory(dir)) {
    throw DataError("data directory " + dir + " does not exist (install the Debian package dataset-fashion-mnist, "
                    "or pass --data-dir)");
  }
  if (split != "train" && split != "test") throw ConfigError("unknown split '" + split + "'");
  std::string prefix = split == "train" ? "train" : "t10k";
  std::string image_path = find_file(dir, prefix + "-images-idx3-ubyte");
  std::string label_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx(image_path, limit);
  IdxArray labels = read_idx(label_path, limit);
  if (images.type != 0x08 || images.dims.size() != 3) {
    throw DataError(image_path + ": expected unsigned-byte images of rank 3 (count, rows, columns)");
  }
  if (labels.type != 0x08 || labels.dims.size() != 1) {
    throw DataError(label_path + ": expected unsigned-byte labels of rank 1");
  }
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(image_path + " has " + std::to_string(images.dims[0]) + " images but " + label_path + " has " +
                    std::to_string(labels.dims[0]) + " labels");
  }
  std::int64_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  if (side > 0 && (h != side || w != side)) {
    throw DataError(fmt::format("{}: images of {}x{} pixels; the model takes {}x{} (expected shape [N, {}, {}], got [{}, {}, {}])",
                                image_path, h, w, side, side, side, side, n, h, w));
  }
  if (limit > 0 && limit < n) n = limit;
  ImageDataset ds;
  ds.images = Tensor::empty({n, 1, h, w}, DType::F32);
  float* p = ds.images.data<float>();
  const float scale = static_cast<float>(1.0 / (255.0 * stddev));
  const float shift = static_cast<float>(mean / stddev);
  const std::uint8_t* raw = images.data.data();
  dispatched([&] {
    for (std::int64_t i = 0; i < n * h * w; ++i) p[i] = static_cast<float>(raw[i]) * scale - shift;
  });
  ds.labels.resize(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint8_t l = labels.data[i];
    if (l >= ds.num_classes) {
      throw DataError(label_path + ": label " + std::to_string(l) + " at index " + std::to_string(i) +
                      " is outside 0.." + std::to_string(ds.num_classes - 1));
    }
    ds.labels[i] = l;
  }
  return ds;
}

}  // namespace weft
