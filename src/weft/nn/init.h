// Weight initialization.
//   Kaiming/He normal: N(0, std = sqrt(2 / fan_in)), for layers followed by ReLU.
//   Xavier/Glorot:     variance 2 / (fan_in + fan_out), uniform or normal.
#pragma once

#include "weft/tensor/rng.h"

namespace weft {

enum class Init { kKaimingNormal, kXavierUniform, kXavierNormal };

// fan_in and fan_out of a weight: [out, in] for linear, [out, in, kh, kw] for convolution.
std::int64_t fan_in(const Shape& weight_shape);
std::int64_t fan_out(const Shape& weight_shape);

void kaiming_normal_(Tensor& w, Rng& rng);
void xavier_uniform_(Tensor& w, Rng& rng);
void xavier_normal_(Tensor& w, Rng& rng);
void init_(Tensor& w, Init init, Rng& rng);

// While one is alive, on its thread, the initializers (and the embeddings' normal draws)
// leave weights at zero: a model about to load every parameter from a file skips drawing
// random numbers it would overwrite (for GPT-2 small, about half of the load time).
class SkipInitialization {
 public:
  SkipInitialization();
  ~SkipInitialization();
  SkipInitialization(const SkipInitialization&) = delete;
  SkipInitialization& operator=(const SkipInitialization&) = delete;

 private:
  bool previous_;
};
bool initialization_skipped();

}  // namespace weft
