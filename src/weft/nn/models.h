// The built-in models, by name.
//   mlp       784-256-256-10 with ReLU
//   cnn       conv 1->32 3x3 pad 1, ReLU, maxpool 2, conv 32->64 3x3 pad 1, ReLU, maxpool 2,
//             linear 3136->128, ReLU, linear 128->10
//   mlp128    784-128-10 with ReLU (seed 002 chapter 3's MNIST network)
//   seed-cnn  seed 003's MNIST CNN: conv 1->32 3x3, ReLU, conv 32->64 3x3, ReLU, maxpool 2,
//             flatten, linear 9216->128, ReLU, linear 128->20, ReLU, linear 20->10
// All take [N, 1, 28, 28] images and return [N, 10] logits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weft/nn/sequential.h"

namespace weft {

// The side of the square images every built-in model takes ([N, 1, 28, 28]).
inline constexpr std::int64_t kModelImageSide = 28;

// Linear layers of the given sizes with ReLU between them (not after the last).
std::shared_ptr<Sequential> make_mlp(const std::vector<std::int64_t>& sizes, Rng& rng);
// Throws ConfigError listing the known names when `name` is unknown.
std::shared_ptr<Sequential> make_model(const std::string& name, Rng& rng);
const std::vector<std::string>& model_names();

}  // namespace weft
