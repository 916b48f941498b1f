#include "weft/optim/adam.h"

#include <cmath>

#include "weft/tensor/profile.h"
#include "weft/tensor/thread_pool.h"

namespace weft {

Adam::Adam(std::vector<std::pair<std::string, Var>> params, double lr, AdamOptions options)
    : Optimizer(std::move(params), lr), options_(options) {
  if (!(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1)) {
    throw ConfigError("Adam betas must be in [0, 1)");
  }
  if (!(options.eps > 0)) throw ConfigError("Adam eps must be positive");
  if (options.weight_decay < 0) throw ConfigError("weight decay must be >= 0");
  make_buffers({"exp_avg", "exp_avg_sq"});
}

void Adam::update_parameter(Tensor& w, const Tensor& g, Tensor* moments) {
  const double bc1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_));
  dispatch(w.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* w_data = w.data<T>();
    const T* g_data = g.data<T>();
    T* m_data = moments[0].data<T>();
    T* v_data = moments[1].data<T>();
    const T rate = static_cast<T>(lr_), beta1 = static_cast<T>(options_.beta1), beta2 = static_cast<T>(options_.beta2);
    const T epsilon = static_cast<T>(options_.eps), decay = static_cast<T>(options_.weight_decay);
    const T inv_bc1 = static_cast<T>(1.0 / bc1), inv_bc2 = static_cast<T>(1.0 / bc2);
    // AdamW scales the weight first; Adam adds the decay to the gradient instead.
    const T scale = options_.decoupled ? T(1) - rate * decay : T(1);
    const T grad_decay = options_.decoupled ? T(0) : decay;
    parallel_loop(w.numel(), 65536, [&](std::int64_t b, std::int64_t e) {
      // Pointers and constants as locals: read through the closure (a reference), each would
      // be read again after every store to the arrays (a store could change it), and the loop
      // would stay scalar.
      T* __restrict pw = w_data;
      const T* __restrict pg = g_data;
      T* __restrict pm = m_data;
      T* __restrict pv = v_data;
      const T lr = rate, b1 = beta1, b2 = beta2, eps = epsilon, ibc1 = inv_bc1, ibc2 = inv_bc2;
      const T keep = scale, l2 = grad_decay;
      for (std::int64_t i = b; i < e; ++i) {
        T wi = pw[i] * keep;
        T gi = pg[i] + l2 * pw[i];
        pm[i] = b1 * pm[i] + (T(1) - b1) * gi;
        pv[i] = b2 * pv[i] + (T(1) - b2) * gi * gi;
        pw[i] = wi - lr * (pm[i] * ibc1) / (std::sqrt(pv[i] * ibc2) + eps);
      }
    });
  });
}

StateDict Adam::state() const { return export_buffers(); }

void Adam::load_state(const StateDict& state) { import_buffers(state); }

}  // namespace weft
