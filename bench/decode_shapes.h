// What both sides of bench/decode_products share (kernel_bench decode, weft's; onednn_decode,
// oneDNN's, which links nothing of weft's): the GPT-2 small body's 48 weight matrices (12
// layers of 768 -> 2,304, 768 -> 768, 768 -> 3,072, 3,072 -> 768: 85M weights), the row
// counts from the command line, and a step's rate: the median of 30 timed steps after 3
// warm-up steps. Header-only, the standard library alone.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace decode_shapes {

constexpr std::int64_t kLayers = 12, kDim = 768;
// Each layer's products, {out, in}.
constexpr std::int64_t kShapes[4][2] = {{3 * kDim, kDim}, {kDim, kDim}, {4 * kDim, kDim}, {kDim, 4 * kDim}};

// The row counts args[first..] names (default 1, 16 and 64); empty after a one-line error
// naming `program` and the bad count (not 1 to 4096).
inline std::vector<std::int64_t> rows_from(int argc, char** argv, int first, const char* program) {
  std::vector<std::int64_t> rows;
  for (int i = first; i < argc; ++i) {
    const std::int64_t r = std::atoll(argv[i]);
    if (r < 1 || r > 4096) {
      std::fprintf(stderr, "%s: rows must be 1 to 4096, got '%s'\n", program, argv[i]);
      return {};
    }
    rows.push_back(r);
  }
  if (rows.empty()) rows = {1, 16, 64};
  return rows;
}

// The multiply-adds of a step at `rows` rows, counted 2 each.
inline double step_ops(std::int64_t rows) {
  double ops = 0;
  for (const auto& s : kShapes) ops += 2.0 * static_cast<double>(kLayers * rows * s[0] * s[1]);
  return ops;
}

// Prints "DECODE <weights> <rows> <GOP/s>": the median of 30 steps after 3 warm-up steps.
inline void print_rate(const char* weights, std::int64_t rows, const std::function<void()>& step) {
  std::vector<double> seconds;
  for (int i = 0; i < 33; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    if (i >= 3) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf("DECODE %s %lld %.1f\n", weights, static_cast<long long>(rows),
              step_ops(rows) / seconds[seconds.size() / 2] / 1e9);
}

}  // namespace decode_shapes
