#include "weft/optim/sgd.h"

#include "weft/tensor/profile.h"
#include "weft/tensor/thread_pool.h"

namespace weft {

SGD::SGD(std::vector<std::pair<std::string, Var>> params, double lr, double momentum, double weight_decay)
    : Optimizer(std::move(params), lr), momentum_(momentum), weight_decay_(weight_decay) {
  if (momentum < 0.0 || momentum >= 1.0) throw ConfigError("momentum must be in [0, 1), got " + std::to_string(momentum));
  if (weight_decay < 0.0) throw ConfigError("weight decay must be >= 0");
  if (momentum_ > 0.0) make_buffers({"momentum"});
}

void SGD::update_parameter(Tensor& w, const Tensor& g, Tensor* buffers) {
  dispatch(w.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* w_data = w.data<T>();
    const T* g_data = g.data<T>();
    T* b_data = buffers ? buffers[0].data<T>() : nullptr;
    const T rate = static_cast<T>(lr_), momentum = static_cast<T>(momentum_), decay = static_cast<T>(weight_decay_);
    // Separate loops for each case, so each vectorizes; pointers and constants as locals (adam.cpp).
    parallel_loop(w.numel(), 65536, [&](std::int64_t b, std::int64_t e) {
      T* __restrict pw = w_data;
      const T* __restrict pg = g_data;
      T* __restrict pb = b_data;
      const T lr = rate, mom = momentum, wd = decay;
      if (pb && wd != T(0)) {
        for (std::int64_t i = b; i < e; ++i) {
          pb[i] = mom * pb[i] + (pg[i] + wd * pw[i]);
          pw[i] -= lr * pb[i];
        }
      } else if (pb) {
        for (std::int64_t i = b; i < e; ++i) {
          pb[i] = mom * pb[i] + pg[i];
          pw[i] -= lr * pb[i];
        }
      } else {
        for (std::int64_t i = b; i < e; ++i) pw[i] -= lr * (pg[i] + wd * pw[i]);
      }
    });
  });
}

StateDict SGD::state() const { return export_buffers(); }

void SGD::load_state(const StateDict& state) { import_buffers(state); }

}  // namespace weft
