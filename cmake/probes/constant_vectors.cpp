// Configure-time probe (cmake/WeftCpu.cmake): exits 0 when the compiler, with the build's
// flags, keeps the zeros of constant vectors (GCC 12 with AVX-512 or its tuning loads
// {1, 1, 0, 0} as a broadcast of 1; tests/util/test_compiler.cpp checks the build itself).
#include <cstdint>
#include <vector>

template <typename T>
__attribute__((noinline)) std::vector<T> four() {
  return {1, 1, 0, 0};
}
template <typename T>
__attribute__((noinline)) std::vector<T> eight() {
  return {3, 3, 3, 3, 0, 0, 0, 0};
}

int main() {
  const auto a = four<std::int64_t>();
  const auto b = four<double>();
  const auto c = eight<std::int32_t>();
  const auto d = eight<float>();
  asm volatile("" : : "r"(a.data()), "r"(b.data()), "r"(c.data()), "r"(d.data()) : "memory");
  return a[2] == 0 && a[3] == 0 && b[3] == 0 && c[4] == 0 && c[7] == 0 && d[4] == 0 && d[7] == 0 ? 0 : 1;
}
