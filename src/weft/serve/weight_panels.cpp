#include "weft/serve/weight_panels.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "weft/serve/panel_fetch.h"
#include "weft/tensor/allocator.h"
#include "weft/util/cpu.h"
#include "weft/util/error.h"
#include "weft/util/half_float.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define WEFT_HAS_PANEL_KERNELS 1
#define WEFT_TARGET_PANELS512 __attribute__((target("avx512f")))
#define WEFT_TARGET_PANELS256 __attribute__((target("avx,avx2,fma")))
#else
#define WEFT_HAS_PANEL_KERNELS 0
#endif

namespace weft::serve {

namespace {

constexpr std::int64_t kC = WeightPanels::kChannels;

enum class Path { kScalar, kAvx2, kAvx512 };

const char* path_name(Path p) { return p == Path::kAvx512 ? "avx512" : p == Path::kAvx2 ? "avx2" : "scalar"; }

// The widest path this processor runs under WEFT_CPU_ISA's cap (util/cpu.h): AVX-512 unless
// the cap names a narrower set. Read once, as oneDNN and the int8 panels read the cap.
Path processor_path() {
  static const Path path = [] {
#if WEFT_HAS_PANEL_KERNELS
    if (cpu::loop_level() != cpu::Level::kAvx2 || !cpu::has("fma")) return Path::kScalar;
    const std::string cap = cpu::isa_cap();
    if (cpu::has("avx512f") && (cap.empty() || cap.rfind("avx512", 0) == 0)) return Path::kAvx512;
    return Path::kAvx2;
#else
    return Path::kScalar;
#endif
  }();
  return path;
}

Path parse_path(const char* name) {
  const std::string s = name;
  if (s == "avx512") return Path::kAvx512;
  if (s == "avx2") return Path::kAvx2;
  if (s == "scalar") return Path::kScalar;
  throw InternalError("WeightPanels: no path '" + s + "'");
}

bool path_runs(Path p) { return static_cast<int>(p) <= static_cast<int>(processor_path()); }

inline float widen(float f) { return f; }
inline float widen(std::uint16_t b) { return float_from_bf16(b); }
inline float widen(std::int8_t q) { return static_cast<float>(q); }

// RB rows of x times NP consecutive panels, one scalar fused multiply-add per product (the
// other paths' bits: std::fma rounds once, as the vector instructions do).
template <class W>
void rows_scalar(const W* panel, std::int64_t panel_elems, std::int64_t in, int rows, int np, const float* x,
                 std::int64_t ldx, float* y, std::int64_t ldy, bool resume) {
  for (int p = 0; p < np; ++p)
    for (int r = 0; r < rows; ++r) {
      float acc[kC] = {};
      if (resume) std::copy(y + r * ldy + p * kC, y + r * ldy + (p + 1) * kC, acc);
      const W* w = panel + p * panel_elems;
      for (std::int64_t k = 0; k < in; ++k) {
        const float xk = x[r * ldx + k];
        for (std::int64_t c = 0; c < kC; ++c) acc[c] = std::fma(xk, widen(w[k * kC + c]), acc[c]);
      }
      std::copy(acc, acc + kC, y + r * ldy + p * kC);
    }
}

#if WEFT_HAS_PANEL_KERNELS
// The weights of `np` panels at input k (a share of the next pass's: panel_fetch.h) into the
// second-level cache, a 64-byte line at the first input it holds.
template <class W>
inline void fetch_ahead(const W* next, std::int64_t panel_elems, int np, std::int64_t k) {
  constexpr std::int64_t kInputsALine = std::max<std::int64_t>(1, 64 / (kC * static_cast<std::int64_t>(sizeof(W))));
  if (k % kInputsALine != 0) return;
  for (int p = 0; p < np; ++p) __builtin_prefetch(next + p * panel_elems + k * kC, 0, 2);
}

// A panel's 16 weights at one input, widened: float32 as they are, bf16 shifted into the
// upper half of a float, int8 converted (exactly). (The masked forms: GCC 12's unmasked
// widenings start from an undefined vector, which its -Wmaybe-uninitialized reports.)
WEFT_TARGET_PANELS512 inline __m512 widen16(const float* p) { return _mm512_loadu_ps(p); }
WEFT_TARGET_PANELS512 inline __m512 widen16(const std::uint16_t* p) {
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, wide, 16));
}
WEFT_TARGET_PANELS512 inline __m512 widen16(const std::int8_t* p) {
  const __m512i wide = _mm512_maskz_cvtepi8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_mask_cvtepi32_ps(_mm512_setzero_ps(), 0xFFFF, wide);
}

// RB rows of x times NP panels `panel_elems` apart (16 NP channels), the sums written to y;
// with `resume`, the chains go on from the sums y holds (a product cut over its inputs).
template <int RB, int NP, class W>
WEFT_TARGET_PANELS512 void rows_512(const W* panel, std::int64_t panel_elems, std::int64_t in, const float* x,
                                    std::int64_t ldx, float* y, std::int64_t ldy, bool resume, const W* next,
                                    int fetch) {
  __m512 acc[RB][NP];
  for (int r = 0; r < RB; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = resume ? _mm512_loadu_ps(y + r * ldy + p * kC) : _mm512_setzero_ps();
  for (std::int64_t k = 0; k < in; ++k) {
    if (fetch > 0) fetch_ahead(next, panel_elems, fetch, k);
    __m512 w[NP];
    for (int p = 0; p < NP; ++p) w[p] = widen16(panel + p * panel_elems + k * kC);
    for (int r = 0; r < RB; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * ldx + k]);
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_fmadd_ps(xb, w[p], acc[r][p]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int p = 0; p < NP; ++p) _mm512_storeu_ps(y + r * ldy + p * kC, acc[r][p]);
}

// Half a panel (8 channels) at one input, widened.
WEFT_TARGET_PANELS256 inline __m256 widen8(const float* p) { return _mm256_loadu_ps(p); }
WEFT_TARGET_PANELS256 inline __m256 widen8(const std::uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
WEFT_TARGET_PANELS256 inline __m256 widen8(const std::int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// The same on 256-bit registers: a panel as two halves of 8 channels.
template <int RB, int NP, class W>
WEFT_TARGET_PANELS256 void rows_256(const W* panel, std::int64_t panel_elems, std::int64_t in, const float* x,
                                    std::int64_t ldx, float* y, std::int64_t ldy, bool resume, const W* next,
                                    int fetch) {
  __m256 acc[RB][2 * NP];
  for (int r = 0; r < RB; ++r)
    for (int h = 0; h < 2 * NP; ++h) acc[r][h] = resume ? _mm256_loadu_ps(y + r * ldy + h * 8) : _mm256_setzero_ps();
  for (std::int64_t k = 0; k < in; ++k) {
    if (fetch > 0) fetch_ahead(next, panel_elems, fetch, k);
    __m256 w[2 * NP];
    for (int h = 0; h < 2 * NP; ++h) w[h] = widen8(panel + (h / 2) * panel_elems + k * kC + (h % 2) * 8);
    for (int r = 0; r < RB; ++r) {
      const __m256 xb = _mm256_set1_ps(x[r * ldx + k]);
      for (int h = 0; h < 2 * NP; ++h) acc[r][h] = _mm256_fmadd_ps(xb, w[h], acc[r][h]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int h = 0; h < 2 * NP; ++h) _mm256_storeu_ps(y + r * ldy + h * 8, acc[r][h]);
}
#endif

template <class W>
using RowsKernel = void (*)(const W*, std::int64_t, std::int64_t, const float*, std::int64_t, float*, std::int64_t, bool,
                            const W*, int);

// How many panels a pass over `rows` rows reads at once: 512 bits 2 for 8 rows or more (8 x
// 2 = 16 accumulators of 32 registers), else 4 (4 panels in flight for one row, which reads
// the weights from memory); 256 bits 1 for 4 rows or more, 2 for 2 or 3, 4 for one (8
// accumulators of 16). Every block of rows of the pass reads the same panels. 8 x 2 on 512
// bits runs a prefill's 256 rows at oneDNN's rate (bench/README.md, "One copy of the
// weights, and a row's outputs whatever the batch").
int panels_per_pass(Path path, std::int64_t rows, std::int64_t panels_left) {
  const int most = path == Path::kAvx512 ? (rows >= 8 ? 2 : 4) : path == Path::kAvx2 ? (rows >= 4 ? 1 : rows >= 2 ? 2 : 4) : 2;
  return static_cast<int>(std::min<std::int64_t>(panels_left, most));
}

// The kernel for up to `rows` rows of `np` panels (panels_per_pass), and the rows it takes;
// null for the scalar loop.
template <class W>
RowsKernel<W> pick(Path path, std::int64_t rows, int np, int* rb) {
#if WEFT_HAS_PANEL_KERNELS
  if (path == Path::kAvx512) {
    *rb = rows >= 8 ? 8 : rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
    switch (*rb * 10 + np) {
      case 82: return rows_512<8, 2, W>;
      case 81: return rows_512<8, 1, W>;
      case 44: return rows_512<4, 4, W>;
      case 43: return rows_512<4, 3, W>;
      case 42: return rows_512<4, 2, W>;
      case 41: return rows_512<4, 1, W>;
      case 24: return rows_512<2, 4, W>;
      case 23: return rows_512<2, 3, W>;
      case 22: return rows_512<2, 2, W>;
      case 21: return rows_512<2, 1, W>;
      case 14: return rows_512<1, 4, W>;
      case 13: return rows_512<1, 3, W>;
      case 12: return rows_512<1, 2, W>;
      default: return rows_512<1, 1, W>;
    }
  }
  if (path == Path::kAvx2) {
    *rb = rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
    switch (*rb * 10 + np) {
      case 41: return rows_256<4, 1, W>;
      case 22: return rows_256<2, 2, W>;
      case 21: return rows_256<2, 1, W>;
      case 14: return rows_256<1, 4, W>;
      case 13: return rows_256<1, 3, W>;
      case 12: return rows_256<1, 2, W>;
      default: return rows_256<1, 1, W>;
    }
  }
#else
  (void)path;
#endif
  *rb = static_cast<int>(std::min<std::int64_t>(rows, 8));
  return nullptr;
}

// Panel p at panels + p * panel_elems, `in` inputs of it read ([in][16] from there); y's
// first column is channel y_first's. Channels up to fetch_end (at least o_end) may be
// fetched ahead.
template <class W>
void product_typed(Path path, const W* panels, std::int64_t panel_elems, std::int64_t in, const float* x,
                   std::int64_t rows, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t y_first,
                   std::int64_t o_begin, std::int64_t o_end, bool resume, std::int64_t fetch_end) {
  float spill[8 * 4 * kC];  // a pass's outputs past o_end (the last panel's padding)
  for (std::int64_t o0 = o_begin; o0 < o_end;) {
    const W* panel = panels + (o0 / kC) * panel_elems;
    const int np = panels_per_pass(path, rows, (o_end - o0 + kC - 1) / kC);
    // The next pass's panels (up to fetch_end), a share to each row block.
    const std::int64_t left = (fetch_end - o0 - np * kC + kC - 1) / kC,
                       next = left > 0 ? panels_per_pass(path, rows, left) : 0;
    std::int64_t blocks = 0;
    for (std::int64_t r = rows; r > 0; ++blocks) {
      int taken = 0;
      (void)pick<W>(path, r, np, &taken);
      r -= taken;
    }
    int rb = 0;
    for (std::int64_t r0 = 0, block = 0; r0 < rows; r0 += rb, ++block) {
      const RowsKernel<W> kernel = pick<W>(path, rows - r0, np, &rb);
      const PanelShare share = next_pass_share(block, blocks, next);
      const bool whole = o0 + np * kC <= o_end;
      float* out = y + r0 * ldy + (o0 - y_first);
      float* dst = whole ? out : spill;
      const std::int64_t ld = whole ? ldy : np * kC;
      if (!whole && resume)
        for (int r = 0; r < rb; ++r) std::copy(out + r * ldy, out + r * ldy + (o_end - o0), spill + r * ld);
      if (kernel != nullptr)
        kernel(panel, panel_elems, in, x + r0 * ldx, ldx, dst, ld, resume,
               share.count > 0 ? panel + (np + share.first) * panel_elems : nullptr, static_cast<int>(share.count));
      else rows_scalar(panel, panel_elems, in, rb, np, x + r0 * ldx, ldx, dst, ld, resume);
      if (!whole)
        for (int r = 0; r < rb; ++r) std::copy(spill + r * ld, spill + r * ld + (o_end - o0), out + r * ldy);
    }
    o0 += np * kC;
  }
}

}  // namespace

template <class W>
void WeightPanels::store(const W* w, std::int64_t out, std::int64_t in, Element element) {
  WEFT_CHECK(out >= 0 && in >= 0, "WeightPanels: " + std::to_string(out) + " x " + std::to_string(in) + " weights");
  out_ = out, in_ = in, element_ = element;
  const std::int64_t panels = (out + kC - 1) / kC;
  const auto bytes = static_cast<std::size_t>(panels * in * kC) * sizeof(W);
  bytes_ = static_cast<std::int64_t>(bytes);
  // (The tensor allocator's blocks: 64-byte aligned, in huge pages from 4 MiB on.)
  data_ = std::shared_ptr<std::uint8_t>(static_cast<std::uint8_t*>(allocate_bytes(std::max<std::size_t>(bytes, 1))),
                                        [bytes](std::uint8_t* p) { free_bytes(p, std::max<std::size_t>(bytes, 1)); });
  W* d = reinterpret_cast<W*>(data_.get());
  // Panel by panel, written in order (read from its 16 rows side by side; zeros past `out`).
  for (std::int64_t p = 0; p < panels; ++p) {
    const std::int64_t channels = std::min(kC, out - p * kC);
    for (std::int64_t i = 0; i < in; ++i)
      for (std::int64_t c = 0; c < kC; ++c) d[(p * in + i) * kC + c] = c < channels ? w[(p * kC + c) * in + i] : W{};
  }
}

WeightPanels::WeightPanels(const float* w, std::int64_t out, std::int64_t in) { store(w, out, in, Element::kF32); }
WeightPanels::WeightPanels(const std::uint16_t* w, std::int64_t out, std::int64_t in) {
  store(w, out, in, Element::kBf16);
}
WeightPanels::WeightPanels(const std::int8_t* w, std::int64_t out, std::int64_t in) {
  store(w, out, in, Element::kInt8);
}

float WeightPanels::at(std::int64_t o, std::int64_t i) const {
  const std::int64_t k = ((o / kC) * in_ + i) * kC + o % kC;
  switch (element_) {
    case Element::kF32: return reinterpret_cast<const float*>(data_.get())[k];
    case Element::kBf16: return widen(reinterpret_cast<const std::uint16_t*>(data_.get())[k]);
    case Element::kInt8: return widen(reinterpret_cast<const std::int8_t*>(data_.get())[k]);
  }
  return 0;
}

const char* WeightPanels::path() { return path_name(processor_path()); }

bool WeightPanels::runs(const char* path) { return path_runs(parse_path(path)); }

void WeightPanels::product(const float* x, std::int64_t rows, std::int64_t ldx, const float* scale, const float* bias,
                           float* y, std::int64_t ldy, std::int64_t o_begin, std::int64_t o_end,
                           std::int64_t ahead_end) const {
  product_at(static_cast<int>(processor_path()), x, rows, ldx, scale, bias, y, ldy, o_begin, o_end, ahead_end);
}

void WeightPanels::product_on(const char* path, const float* x, std::int64_t rows, std::int64_t ldx, const float* scale,
                              const float* bias, float* y, std::int64_t ldy, std::int64_t o_begin,
                              std::int64_t o_end) const {
  const Path p = parse_path(path);
  WEFT_CHECK(path_runs(p), std::string("WeightPanels::product: this processor does not run the ") + path + " path");
  product_at(static_cast<int>(p), x, rows, ldx, scale, bias, y, ldy, o_begin, o_end, o_end);
}

void WeightPanels::product_at(int path, const float* x, std::int64_t rows, std::int64_t ldx, const float* scale,
                              const float* bias, float* y, std::int64_t ldy, std::int64_t o_begin,
                              std::int64_t o_end, std::int64_t ahead_end) const {
  WEFT_CHECK(o_begin % kC == 0 && 0 <= o_begin && o_begin <= o_end && o_end <= out_ && ldx >= in_ && rows >= 0,
             "WeightPanels::product: channels [" + std::to_string(o_begin) + ", " + std::to_string(o_end) +
                 ") or row length " + std::to_string(ldx) + " out of range");
  const auto p = static_cast<Path>(path);
  const std::int64_t fetch_end = std::clamp(ahead_end, o_end, out_);
  switch (element_) {
    case Element::kF32:
      product_typed(p, reinterpret_cast<const float*>(data_.get()), in_ * kC, in_, x, rows, ldx, y, ldy, 0, o_begin,
                    o_end, false, fetch_end);
      break;
    case Element::kBf16:
      product_typed(p, reinterpret_cast<const std::uint16_t*>(data_.get()), in_ * kC, in_, x, rows, ldx, y, ldy, 0,
                    o_begin, o_end, false, fetch_end);
      break;
    case Element::kInt8:
      product_typed(p, reinterpret_cast<const std::int8_t*>(data_.get()), in_ * kC, in_, x, rows, ldx, y, ldy, 0,
                    o_begin, o_end, false, fetch_end);
      break;
  }
  if (scale == nullptr && bias == nullptr) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * ldy;
    if (scale != nullptr)
      for (std::int64_t o = o_begin; o < o_end; ++o) yr[o] *= scale[o];
    if (bias != nullptr)
      for (std::int64_t o = o_begin; o < o_end; ++o) yr[o] += bias[o];
  }
}

void float_panel_product(const float* panels, std::int64_t panel_stride, std::int64_t in, const float* x,
                         std::int64_t rows, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t o_begin,
                         std::int64_t o_end, bool resume, const char* path) {
  WEFT_CHECK(o_begin % kC == 0 && 0 <= o_begin && o_begin <= o_end && in >= 0 && rows >= 0 && panel_stride >= in * kC,
             "float_panel_product: channels [" + std::to_string(o_begin) + ", " + std::to_string(o_end) + ") or " +
                 std::to_string(in) + " inputs in panels " + std::to_string(panel_stride) + " apart");
  const Path p = path != nullptr ? parse_path(path) : processor_path();
  WEFT_CHECK(path_runs(p), std::string("float_panel_product: this processor does not run the ") + path_name(p) + " path");
  product_typed(p, panels, panel_stride, in, x, rows, ldx, y, ldy, o_begin, o_begin, o_end, resume, o_end);
}

}  // namespace weft::serve
