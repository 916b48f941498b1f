// Shared test helpers: a temporary folder removed at the end of the test, and a small
// synthetic MNIST-format dataset written into it.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "weft/data/idx.h"
#include "weft/tensor/rng.h"

namespace weft::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "weft-test-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (p == nullptr) std::abort();
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes train and t10k IDX files of n_train / n_test 28x28 images whose class (0..9) is
// visible in the pixels (a bright band at a class-dependent row), so models can learn it.
inline void write_synthetic_mnist(const std::string& dir, std::int64_t n_train, std::int64_t n_test,
                                  std::uint64_t seed = 7) {
  Rng rng(seed);
  for (auto [prefix, n] : {std::pair<std::string, std::int64_t>{"train", n_train}, {"t10k", n_test}}) {
    IdxArray images, labels;
    images.dims = {n, 28, 28};
    labels.dims = {n};
    images.data.resize(static_cast<size_t>(n * 784));
    labels.data.resize(static_cast<size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      auto label = static_cast<std::uint8_t>(rng.below(10));
      labels.data[i] = label;
      for (std::int64_t p = 0; p < 784; ++p) {
        std::int64_t row = p / 28;
        bool band = row >= 2 + 2 * label && row < 4 + 2 * label;
        images.data[i * 784 + p] = static_cast<std::uint8_t>(band ? 200 + rng.below(56) : rng.below(60));
      }
    }
    write_idx(dir + "/" + prefix + "-images-idx3-ubyte.gz", images);
    write_idx(dir + "/" + prefix + "-labels-idx1-ubyte.gz", labels);
  }
}

}  // namespace weft::testing
