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
    T* __restrict pw = w.data<T>();
    const T* __restrict pg = g.data<T>();
    T* __restrict pm = moments[0].data<T>();
    T* __restrict pv = moments[1].data<T>();
    const T lr = static_cast<T>(lr_), b1 = static_cast<T>(options_.beta1), b2 = static_cast<T>(options_.beta2);
    const T eps = static_cast<T>(options_.eps), wd = static_cast<T>(options_.weight_decay);
    const T ibc1 = static_cast<T>(1.0 / bc1), ibc2 = static_cast<T>(1.0 / bc2);
    // AdamW scales the weight first; Adam adds the decay to the gradient instead.
    const T keep = options_.decoupled ? T(1) - lr * wd : T(1);
    const T l2 = options_.decoupled ? T(0) : wd;
    parallel_loop(w.numel(), 65536, [&](std::int64_t b, std::int64_t e) {
      // Pointers and constants as locals: read through the closure (a reference), each would
      // be read again after every store to the arrays (a store could change it), and the loop
      // would stay scalar.
      T* __restrict lw = pw;
      const T* __restrict lg = pg;
      T* __restrict lm = pm;
      T* __restrict lv = pv;
      const T k = keep, d = l2, r = lr, m1 = b1, m2 = b2, c1 = ibc1, c2 = ibc2, add = eps;
      for (std::int64_t i = b; i < e; ++i) {
        T wi = lw[i] * k;
        T gi = lg[i] + d * lw[i];
        lm[i] = m1 * lm[i] + (T(1) - m1) * gi;
        lv[i] = m2 * lv[i] + (T(1) - m2) * gi * gi;
        lw[i] = wi - r * (lm[i] * c1) / (std::sqrt(lv[i] * c2) + add);
      }
    });
  });
}

StateDict Adam::state() const { return export_buffers(); }

void Adam::load_state(const StateDict& state) { import_buffers(state); }

}  // namespace weft
