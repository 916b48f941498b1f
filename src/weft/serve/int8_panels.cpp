#include "weft/serve/int8_panels.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "weft/serve/panel_fetch.h"
#include "weft/tensor/kernel_table.h"
#include "weft/tensor/onednn.h"
#include "weft/util/cpu.h"
#include "weft/util/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define WEFT_HAS_VNNI_KERNELS 1
#define WEFT_TARGET_VNNI512 __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define WEFT_TARGET_VNNI256 __attribute__((target("avx,avx2,avxvnni")))
#else
#define WEFT_HAS_VNNI_KERNELS 0
#endif

namespace weft::serve {

namespace {

constexpr std::int64_t kChannels = 16;         // output channels per panel
constexpr std::int64_t kStep = kChannels * 4;  // a panel's bytes for 4 inputs

std::int64_t panel_index(std::int64_t o, std::int64_t i, std::int64_t in4) {
  return ((o / kChannels) * (in4 / 4) + i / 4) * kStep + (o % kChannels) * 4 + i % 4;
}

#if WEFT_HAS_VNNI_KERNELS
inline std::int32_t four_bytes(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// What turns a row's int32 sums into its outputs: y = float(sum - 128 x_sum) * scale[o] *
// x_scale (+ bias[o]), x_sum the row's sum of activations (what the panels' 128s added).
struct Epilogue {
  const std::int32_t* x_sums;   // per row
  const float* x_scales;        // per row
  const float* scale;           // per channel, from the first channel of the call
  const float* bias;            // the same, or null
};

// acc + the products of a's unsigned and b's signed bytes, 4 at a time. (GCC 12 copies the
// accumulator of _mm512_dpbusd_epi32 to another register and back around every use: 16 moves
// in a step of 16 products; the instruction itself accumulates in place.)
WEFT_TARGET_VNNI512 inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// The next pass's panels a row block fetches into L2 as it goes (panel_fetch.h): `count`
// panels from `from`, a step's line of each at every step.
struct Ahead {
  const std::uint8_t* from = nullptr;
  std::int64_t count = 0;
};

// Step k (4 inputs) of RB rows times NP panels, added to acc.
template <int RB, int NP>
WEFT_TARGET_VNNI512 __attribute__((always_inline)) inline void step_512(__m512i (&acc)[RB][NP], const std::uint8_t* panel,
                                                                      std::int64_t panel_bytes, const std::int8_t* x,
                                                                      std::int64_t ldx, std::int64_t k) {
  __m512i w[NP];
  for (int p = 0; p < NP; ++p) w[p] = _mm512_loadu_si512(panel + p * panel_bytes + k * kStep);
  for (int r = 0; r < RB; ++r) {
    const __m512i xb = _mm512_set1_epi32(four_bytes(x + r * ldx + 4 * k));
    for (int p = 0; p < NP; ++p) acc[r][p] = dpbusd(acc[r][p], w[p], xb);
  }
}

// RB rows of x times NP consecutive panels (16 NP channels), their outputs written to y.
template <int RB, int NP>
WEFT_TARGET_VNNI512 void rows_512(const std::uint8_t* panel, std::int64_t panel_bytes, std::int64_t steps,
                                  const std::int8_t* x, std::int64_t ldx, Epilogue e, float* y, std::int64_t ldy,
                                  Ahead ahead) {
  __m512i acc[RB][NP];
  for (int r = 0; r < RB; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_si512();
  if (ahead.count > 0) {
    for (std::int64_t k = 0; k < steps; ++k) {
      for (std::int64_t p = 0; p < ahead.count; ++p) __builtin_prefetch(ahead.from + p * panel_bytes + k * kStep, 0, 2);
      step_512<RB, NP>(acc, panel, panel_bytes, x, ldx, k);
    }
  } else {
    for (std::int64_t k = 0; k < steps; ++k) step_512<RB, NP>(acc, panel, panel_bytes, x, ldx, k);
  }
  for (int r = 0; r < RB; ++r) {
    const __m512i offset = _mm512_set1_epi32(128 * e.x_sums[r]);
    const __m512 xs = _mm512_set1_ps(e.x_scales[r]);
    for (int p = 0; p < NP; ++p) {
      // (The masked form: GCC 12's _mm512_cvtepi32_ps starts from an undefined vector, which
      // its -Wuninitialized reports.)
      __m512 v = _mm512_mask_cvtepi32_ps(_mm512_setzero_ps(), 0xFFFF, _mm512_sub_epi32(acc[r][p], offset));
      v = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_loadu_ps(e.scale + p * kChannels)), xs);
      if (e.bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(e.bias + p * kChannels));
      _mm512_storeu_ps(y + r * ldy + p * kChannels, v);
    }
  }
}

// The same on 256-bit registers, one panel at a time: its 64 bytes as two halves of 8
// channels.
template <int RB>
WEFT_TARGET_VNNI256 void rows_256(const std::uint8_t* panel, std::int64_t, std::int64_t steps, const std::int8_t* x,
                                  std::int64_t ldx, Epilogue e, float* y, std::int64_t ldy, Ahead) {
  __m256i acc[RB][2];
  for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (std::int64_t k = 0; k < steps; ++k) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + k * kStep));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + k * kStep + 32));
    for (int r = 0; r < RB; ++r) {
      const __m256i xb = _mm256_set1_epi32(four_bytes(x + r * ldx + 4 * k));
      acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], w0, xb);
      acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], w1, xb);
    }
  }
  for (int r = 0; r < RB; ++r) {
    const __m256i offset = _mm256_set1_epi32(128 * e.x_sums[r]);
    const __m256 xs = _mm256_set1_ps(e.x_scales[r]);
    for (int h = 0; h < 2; ++h) {
      __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][h], offset));
      v = _mm256_mul_ps(_mm256_mul_ps(v, _mm256_loadu_ps(e.scale + h * 8)), xs);
      if (e.bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(e.bias + h * 8));
      _mm256_storeu_ps(y + r * ldy + h * 8, v);
    }
  }
}

using RowsKernel = void (*)(const std::uint8_t*, std::int64_t, std::int64_t, const std::int8_t*, std::int64_t,
                            Epilogue, float*, std::int64_t, Ahead);

// How many panels a pass reads at once at this width, of `panels` left (whatever the rows):
// 512 bits: up to 4, for blocks of up to 4 rows (at most 16 accumulators of 32). With the
// weights coming from memory, 4 rows x 4 panels beat 8 x 2 (bench/decode_products, the
// GPT-2 small body's products on 2 threads, two runs: 16 rows 761-768 GOP/s against 626-673,
// 64 rows 1,082-1,087 against 978-1,019): a pass reads 256 bytes of weights a step, and the
// 4 panels (48-192 KB) stay in L2 for the row blocks after the first. One row with 4 panels
// took 1.96-2.10 ms for that body's products against 2.60-2.66 with 2, and 8 gained nothing.
// 16 rows x 1 panel, reading each panel once for 16 rows, ran 15% slower on 16 rows: twice
// the broadcasts. 256 bits: 1 panel of up to 4 rows (8 accumulators of 16).
int panels_at_once(int width, std::int64_t panels) {
  if (width != 512) return 1;
  return static_cast<int>(std::min<std::int64_t>(panels, 4));
}

// The rows a kernel takes of `rows` left: blocks of 4, then 2, then 1 (both widths).
int block_rows(std::int64_t rows) { return rows >= 4 ? 4 : rows >= 2 ? 2 : 1; }

// The number of blocks `rows` rows run in.
std::int64_t row_blocks(std::int64_t rows) {
  std::int64_t blocks = 0;
  for (; rows > 0; rows -= block_rows(rows)) ++blocks;
  return blocks;
}

// The kernel for up to `rows` rows of `np` panels (panels_at_once), and the rows it takes.
RowsKernel pick(int width, std::int64_t rows, int np, int* rows_taken) {
  if (width == 512) {
    *rows_taken = block_rows(rows);
    switch (*rows_taken * 10 + np) {
      case 44: return rows_512<4, 4>;
      case 43: return rows_512<4, 3>;
      case 42: return rows_512<4, 2>;
      case 41: return rows_512<4, 1>;
      case 24: return rows_512<2, 4>;
      case 23: return rows_512<2, 3>;
      case 22: return rows_512<2, 2>;
      case 21: return rows_512<2, 1>;
      case 14: return rows_512<1, 4>;
      case 13: return rows_512<1, 3>;
      case 12: return rows_512<1, 2>;
      default: return rows_512<1, 1>;
    }
  }
  *rows_taken = block_rows(rows);
  return *rows_taken == 4 ? RowsKernel{rows_256<4>} : *rows_taken == 2 ? RowsKernel{rows_256<2>} : RowsKernel{rows_256<1>};
}
#endif

// The widest kernel the processor runs under WEFT_CPU_ISA (which oneDNN's instruction set
// reflects, read once).
int processor_width() {
  static const int width = [] {
#if WEFT_HAS_VNNI_KERNELS
    if (!onednn::has_int8_instructions()) return 0;
    const std::string isa = onednn::isa_name();
    if (isa.rfind("avx512_core_", 0) == 0 && cpu::has("avx512_vnni") && cpu::has("avx512bw")) return 512;
    if (cpu::has("avx_vnni")) return 256;
#endif
    return 0;
  }();
  return width;
}

}  // namespace

bool vnni_runs(int width) {
  return (width == 512 && processor_width() == 512) || (width == 256 && processor_width() > 0 && cpu::has("avx_vnni"));
}

int vnni_width() { return kernels::int8_native() ? processor_width() : 0; }

Int8Panels::Int8Panels(const std::int8_t* w, std::int64_t out, std::int64_t in)
    : out_(out), in_(in), in4_((in + 3) / 4 * 4), full_(out / kChannels * kChannels) {
  WEFT_CHECK(in > 0 && in <= kMostInputs && out >= 0, "Int8Panels: " + std::to_string(in) + " inputs");
  panels_.assign(static_cast<std::size_t>(full_ * in4_), 128);
  for (std::int64_t o = 0; o < full_; ++o)
    for (std::int64_t i = 0; i < in; ++i)
      panels_[static_cast<std::size_t>(panel_index(o, i, in4_))] = static_cast<std::uint8_t>(w[o * in + i] + 128);
  tail_.assign(w + full_ * in, w + out * in);
}

std::int8_t Int8Panels::at(std::int64_t o, std::int64_t i) const {
  return o < full_ ? static_cast<std::int8_t>(panels_[static_cast<std::size_t>(panel_index(o, i, in4_))] - 128)
                   : tail_[static_cast<std::size_t>((o - full_) * in_ + i)];
}

void Int8Panels::product(const std::int8_t* x, std::int64_t rows, std::int64_t ldx, const std::int32_t* x_sums,
                         const float* x_scales, const float* scale, const float* bias, float* y, std::int64_t ldy,
                         std::int64_t o_begin, std::int64_t o_end, int width, std::int64_t ahead_end) const {
  WEFT_CHECK(o_begin % kChannels == 0 && o_begin <= o_end && o_end <= out_ && ldx >= in4_,
             "Int8Panels::product: channels [" + std::to_string(o_begin) + ", " + std::to_string(o_end) +
                 ") or row length " + std::to_string(ldx) + " out of range");
  WEFT_CHECK(vnni_runs(width), "Int8Panels::product: no VNNI kernel of " + std::to_string(width) + " bits on this processor");
  // The channels past the last whole panel: integer dot products, as exact, and the same
  // float operations as the kernels' ends.
  for (std::int64_t o = std::max(o_begin, full_); o < o_end; ++o) {
    const std::int8_t* wo = tail_.data() + (o - full_) * in_;
    for (std::int64_t r = 0; r < rows; ++r) {
      std::int32_t sum = 0;
      for (std::int64_t i = 0; i < in_; ++i) sum += static_cast<std::int32_t>(x[r * ldx + i]) * wo[i];
      const float v = static_cast<float>(sum) * scale[o] * x_scales[r];
      y[r * ldy + o] = bias != nullptr ? v + bias[o] : v;
    }
  }
  o_end = std::min(o_end, full_);
  const std::int64_t fetch_end = std::clamp(ahead_end, o_end, full_);
#if WEFT_HAS_VNNI_KERNELS
  const std::int64_t panel_bytes = in4_ * kChannels, steps = in4_ / 4, blocks = row_blocks(rows);
  for (std::int64_t o0 = o_begin; o0 < o_end;) {
    const std::uint8_t* panel = panels_.data() + (o0 / kChannels) * panel_bytes;
    const int np = panels_at_once(width, (o_end - o0) / kChannels);
    // The next pass's panels (consecutive after these, up to fetch_end), a share to each row
    // block (on 512 bits: 16 rows in 4 blocks fetch a panel each).
    const std::int64_t left = (fetch_end - o0) / kChannels - np, next = left > 0 ? panels_at_once(width, left) : 0;
    int rows_taken = 0;
    for (std::int64_t r0 = 0, block = 0; r0 < rows; r0 += rows_taken, ++block) {
      const Epilogue e{x_sums + r0, x_scales + r0, scale + o0, bias != nullptr ? bias + o0 : nullptr};
      const PanelShare share = next_pass_share(block, blocks, next);
      const Ahead ahead{share.count > 0 ? panel + (np + share.first) * panel_bytes : nullptr, share.count};
      pick(width, rows - r0, np, &rows_taken)(panel, panel_bytes, steps, x + r0 * ldx, ldx, e, y + r0 * ldy + o0, ldy,
                                              ahead);
    }
    o0 += np * kChannels;
  }
#else
  (void)x_sums, (void)fetch_end;
#endif
}

}  // namespace weft::serve
