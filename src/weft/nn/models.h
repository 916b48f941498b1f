// The built-in image models, by name, for images of C channels, H x W pixels and K classes
// (Fashion-MNIST: C 1, H = W = 28, K 10, the sizes in brackets):
//   mlp       CHW(784)-256-256-K with ReLU
//   cnn       conv C->32 3x3 pad 1, ReLU, maxpool 2, conv 32->64 3x3 pad 1, ReLU, maxpool 2,
//             linear 64 (H/4)(W/4) (3136)->128, ReLU, linear 128->K
//   mlp128    CHW-128-K with ReLU (seed 002 chapter 3's MNIST network)
//   seed-cnn  seed 003's MNIST CNN: conv C->32 3x3, ReLU, conv 32->64 3x3, ReLU, maxpool 2,
//             flatten, linear 64 ((H-4)/2)((W-4)/2) (9216)->128, ReLU, linear 128->20, ReLU,
//             linear 20->K
// All take [N, C, H, W] images and return [N, K] logits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weft/nn/sequential.h"

namespace weft {

// What an image model takes and gives: [N, channels, height, width] -> [N, classes].
struct ImageInput {
  std::int64_t channels = 1, height = 28, width = 28, classes = 10;  // Fashion-MNIST's
  std::int64_t pixels() const { return channels * height * width; }
  bool operator==(const ImageInput&) const = default;
};

// Linear layers of the given sizes with ReLU between them (not after the last).
std::shared_ptr<Sequential> make_mlp(const std::vector<std::int64_t>& sizes, Rng& rng);
// Throws ConfigError listing the known names when `name` is unknown, or naming the
// smallest image a model takes.
// `hidden`: the MLP's hidden layers' widths (empty: 256, 256; the other models take none).
std::shared_ptr<Sequential> make_model(const std::string& name, Rng& rng, const ImageInput& input = {},
                                       const std::vector<std::int64_t>& hidden = {});
const std::vector<std::string>& model_names();

}  // namespace weft
