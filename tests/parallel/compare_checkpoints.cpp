// compare_checkpoints A B TOL: compares the newest checkpoints' parameters in folders A and
// B. Passes (exit 0) when every tensor satisfies max|a - b| <= TOL * max|b|; prints the
// largest relative difference.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "weft/train/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_checkpoints A B TOL\n");
    return 2;
  }
  try {
    auto a = weft::load_checkpoint(*weft::latest_checkpoint(argv[1]));
    auto b = weft::load_checkpoint(*weft::latest_checkpoint(argv[2]));
    double tol = std::atof(argv[3]), worst = 0;
    if (a.meta.step != b.meta.step) {
      std::printf("steps differ: %lld vs %lld\n", static_cast<long long>(a.meta.step), static_cast<long long>(b.meta.step));
      return 1;
    }
    std::map<std::string, weft::Tensor> bt(b.model.begin(), b.model.end());
    for (const auto& [name, ta] : a.model) {
      auto va = ta.to_vector(), vb = bt.at(name).to_vector();
      double diff = 0, scale = 0;
      for (size_t i = 0; i < va.size(); ++i) {
        diff = std::max(diff, std::fabs(va[i] - vb[i]));
        scale = std::max(scale, std::fabs(vb[i]));
      }
      double rel = diff / std::max(scale, 1e-30);
      worst = std::max(worst, rel);
      std::printf("%-12s max |a-b| / max |b| = %.3g\n", name.c_str(), rel);
    }
    std::printf("step %lld, worst relative difference %.3g (tolerance %.3g)\n", static_cast<long long>(a.meta.step),
                worst, tol);
    return worst <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
