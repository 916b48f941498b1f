// Run-time dispatch of weft's hot loops (util/cpu.h has the levels).
//
// dispatched(body, args...) calls body(args...) compiled for the level cpu::loop_level()
// picked: the body, and everything it calls that the compiler can see, is compiled again for
// each level (the target attribute with flatten: the calls are inlined into a function built
// for that level's instruction sets); a call it cannot inline runs the baseline's code. One
// test per call picks the level, so a body should be a loop, not one element.
//
// Each level computes the same floating-point operations in the same order: weft is compiled
// without contraction into fused multiply-adds (CMakeLists.txt: -ffp-contract=off), and the
// compilers vectorize no floating-point sum that would reorder it. The levels' results are
// therefore bitwise the same; only the width of the vectors differs (Dispatch tests in
// tests/nn/test_dispatch.cpp and tests/util/test_cpu.cpp).
//
// One level above the baseline: AVX2 (x86-64-v3). An AVX-512 level was measured and left out:
// against AVX2 it ran the GPT 3% faster and the CNN 8% slower (512-bit vectors), or the GPT 7%
// slower (256-bit), and GCC 12 miscompiles constant vectors wherever AVX-512 is enabled
// (tests/util/test_compiler.cpp). oneDNN and libxsmm use AVX-512 where the processor has it,
// and so do serving's int8 kernels (serve/int8_panels.cpp: intrinsics, not vectorized loops).
#pragma once

#include "weft/util/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WEFT_HAS_DISPATCH 1
#define WEFT_LEVEL_AVX2 \
  __attribute__((target("avx,avx2,fma,bmi,bmi2,f16c,lzcnt,movbe,popcnt,sse4.2"), flatten, noinline))
#else
#define WEFT_HAS_DISPATCH 0
#endif

namespace weft {

namespace detail {
#if WEFT_HAS_DISPATCH
template <class Body, class... Args>
WEFT_LEVEL_AVX2 void run_avx2(const Body& body, Args... args) {
  body(args...);
}
#endif
}  // namespace detail

// body(args...) at `level` (at most the processor's: callers pass cpu::loop_level()).
template <class Body, class... Args>
inline void dispatched_at(cpu::Level level, const Body& body, Args... args) {
#if WEFT_HAS_DISPATCH
  if (level == cpu::Level::kAvx2) return detail::run_avx2(body, args...);
#else
  (void)level;
#endif
  body(args...);
}

// body(args...) at the level of this process's loops.
template <class Body, class... Args>
inline void dispatched(const Body& body, Args... args) {
  dispatched_at(cpu::loop_level(), body, args...);
}

}  // namespace weft
