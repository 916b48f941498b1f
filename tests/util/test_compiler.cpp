// The compiler builds weft's constants correctly. GCC 12 with AVX-512, or with an AVX-512
// processor's tuning, loads a constant vector whose low half repeats one value and whose high
// half is zero as a broadcast ({1, 1, 0, 0} became {1, 1, 1, 1}); cmake/WeftCpu.cmake keeps
// both out of weft's builds, and util.compiler_guard builds this file with the faulty flags
// to show that it fails there. Standalone (no weft code), so that it can be built so.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

namespace {

// Built in functions the optimizer cannot see through, read back through memory.
template <typename T>
__attribute__((noinline)) std::vector<T> four() {
  return {1, 1, 0, 0};
}
template <typename T>
__attribute__((noinline)) std::vector<T> eight() {
  return {3, 3, 3, 3, 3, 3, 0, 0};
}
__attribute__((noinline)) std::array<double, 4> weights() { return {0.5, 0.5, 0, 0}; }

template <typename T>
void expect_values(const std::vector<T>& v, const std::vector<long long>& want) {
  asm volatile("" : : "r"(v.data()) : "memory");
  ASSERT_EQ(v.size(), want.size());
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(static_cast<long long>(v[i]), want[i]) << "element " << i;
}

TEST(Compiler, ConstantVectorsKeepTheirZeros) {
  expect_values(four<std::int64_t>(), {1, 1, 0, 0});
  expect_values(four<double>(), {1, 1, 0, 0});
  expect_values(four<std::int32_t>(), {1, 1, 0, 0});
  expect_values(four<float>(), {1, 1, 0, 0});
  expect_values(eight<std::int64_t>(), {3, 3, 3, 3, 3, 3, 0, 0});
  expect_values(eight<double>(), {3, 3, 3, 3, 3, 3, 0, 0});
  expect_values(eight<float>(), {3, 3, 3, 3, 3, 3, 0, 0});
  const std::array<double, 4> w = weights();
  asm volatile("" : : "r"(w.data()) : "memory");
  EXPECT_EQ(w[2], 0.0);
  EXPECT_EQ(w[3], 0.0);
}

}  // namespace
