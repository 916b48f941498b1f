// compare_checkpoints A B TOL: compares the parameters of A and B, each a checkpoint folder
// (its newest checkpoint) or a safetensors file. Passes (exit 0) when every tensor satisfies
// max|a - b| <= TOL * max|b|; prints the largest relative difference.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "weft/io/checkpoint.h"
#include "weft/io/safetensors.h"
#include "weft/util/file.h"

namespace {
weft::StateDict parameters(const std::string& path) {
  if (weft::is_directory(path)) return weft::load_checkpoint(*weft::latest_checkpoint(path)).model;
  return weft::decode_safetensors(weft::read_file(path), path).tensors;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_checkpoints A B TOL\n");
    return 2;
  }
  try {
    auto a = parameters(argv[1]);
    auto b = parameters(argv[2]);
    double tol = std::atof(argv[3]), worst = 0;
    std::map<std::string, weft::Tensor> bt(b.begin(), b.end());
    if (a.size() != b.size()) {
      std::printf("different parameter sets\n");
      return 1;
    }
    for (const auto& [name, ta] : a) {
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
    std::printf("worst relative difference %.3g (tolerance %.3g)\n", worst, tol);
    return worst <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
