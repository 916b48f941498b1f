#include "weft/tensor/xsmm.h"

#include <immintrin.h>
#include <libxsmm.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include "weft/tensor/onednn.h"
#include "weft/util/error.h"

namespace weft::xsmm {

namespace {

// libxsmm's kernels keep a whole slice of b's columns and of k in flight; past these sizes
// they run from memory rather than cache (measured: a 384x128x2048 product 144 GFLOP/s in
// one call, 197 in slices of 256 along k).
constexpr std::int64_t kWholeK = 512, kSliceK = 256;
constexpr std::int64_t kWholeN = 512, kSliceN = 256;

// The instruction set libxsmm generates code for follows oneDNN's (WEFT_CPU_ISA caps both).
void init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    libxsmm_init();
    const std::string isa = onednn::isa_name();
    const char* arch = onednn::has_bf16_instructions()      ? "cpx"
                       : onednn::has_int8_instructions()    ? "clx"
                       : isa.find("avx512") != std::string::npos ? "skx"
                       : isa.find("avx2") != std::string::npos   ? "hsw"
                                                                 : "generic";
    libxsmm_set_target_arch(arch);
  });
}

// Slices [first, first + size) of [0, total): whole when total <= whole, else `slice` long
// (an even length, so that bf16 pairs stay in one slice).
template <class Fn>
void for_each_slice(std::int64_t total, std::int64_t whole, std::int64_t slice, const Fn& fn) {
  const std::int64_t step = total <= whole ? total : slice;
  for (std::int64_t first = 0; first < total; first += step) fn(first, std::min(step, total - first));
}

// One libxsmm call per tile of c's columns and of k: make(nn, kk, beta) dispatches the
// tile's kernel (beta 1 where the tile adds to c: accumulating, or a later slice of k), then
// call(kernel, n0, k0) runs it; a shape libxsmm declines is an InternalError naming it.
template <class Make, class Call>
void for_each_tile(std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate, const char* what, const Make& make,
                   const Call& call) {
  for_each_slice(n, kWholeN, kSliceN, [&](std::int64_t n0, std::int64_t nn) {
    for_each_slice(k, kWholeK, kSliceK, [&](std::int64_t k0, std::int64_t kk) {
      const auto f = make(nn, kk, (accumulate || k0 > 0) ? 1.0f : 0.0f);
      WEFT_CHECK(f != nullptr, std::string("libxsmm: no ") + what + " kernel for " + std::to_string(m) + "x" +
                                   std::to_string(nn) + "x" + std::to_string(kk));
      call(f, n0, k0);
    });
  });
}

libxsmm_blasint blas(std::int64_t v) { return static_cast<libxsmm_blasint>(v); }

// out[c * rows + r] = in[r * ld + c] for the rows and columns outside the whole blocks
// (elements copied as bytes: the buffers may hold another type, as bf16 pairs do).
template <class T>
void transpose_edges(std::int64_t rows, std::int64_t cols, std::int64_t full_rows, std::int64_t full_cols, const T* in,
                     std::int64_t ld, T* out) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = (r < full_rows ? full_cols : 0); c < cols; ++c)
      std::memcpy(out + c * rows + r, in + r * ld + c, sizeof(T));
}

// An 8x8 block of 2-byte elements: three rounds of interleaving (16-, 32-, 64-bit).
void transpose_8x8_16(const std::uint16_t* in, std::int64_t ld, std::uint16_t* out, std::int64_t ldo) {
  __m128i r[8], a[8], b[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i * ld));
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 2; ++i) {
      b[4 * h + 2 * i] = _mm_unpacklo_epi32(a[4 * h + i], a[4 * h + i + 2]);
      b[4 * h + 2 * i + 1] = _mm_unpackhi_epi32(a[4 * h + i], a[4 * h + i + 2]);
    }
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * i) * ldo), _mm_unpacklo_epi64(b[i], b[i + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * i + 1) * ldo), _mm_unpackhi_epi64(b[i], b[i + 4]));
  }
}

// A 4x4 block of 4-byte elements.
void transpose_4x4_32(const std::uint32_t* in, std::int64_t ld, std::uint32_t* out, std::int64_t ldo) {
  __m128 r0 = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  __m128 r1 = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + ld)));
  __m128 r2 = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * ld)));
  __m128 r3 = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 3 * ld)));
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_castps_si128(r0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + ldo), _mm_castps_si128(r1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * ldo), _mm_castps_si128(r2));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 3 * ldo), _mm_castps_si128(r3));
}

// Whole blocks of B x B through `block`, in tiles of 32 x 32 (a tile's rows and columns
// stay in cache), then the ragged edges.
template <std::int64_t B, class T, class Block>
void transpose_blocked(std::int64_t rows, std::int64_t cols, const T* in, std::int64_t ld, T* out, Block block) {
  constexpr std::int64_t kTile = 32;
  const std::int64_t full_rows = rows / B * B, full_cols = cols / B * B;
  for (std::int64_t r0 = 0; r0 < full_rows; r0 += kTile)
    for (std::int64_t c0 = 0; c0 < full_cols; c0 += kTile)
      for (std::int64_t r = r0; r < std::min(full_rows, r0 + kTile); r += B)
        for (std::int64_t c = c0; c < std::min(full_cols, c0 + kTile); c += B) block(in + r * ld + c, ld, out + c * rows + r, rows);
  transpose_edges(rows, cols, full_rows, full_cols, in, ld, out);
}

}  // namespace

bool has_f32_kernels() {
  init_once();
  return libxsmm_get_target_archid() >= LIBXSMM_X86_AVX2;
}

bool has_bf16_kernels() {
  init_once();
  return libxsmm_get_target_archid() >= LIBXSMM_X86_AVX512_CPX;
}

// Column-major, as libxsmm sees the row-major product: c^T[n, m] = b^T[n, k] op(a)^T[k, m].
void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, bool a_transposed,
                const float* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  init_once();
  const int flags = a_transposed ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
  const float alpha = 1.0f;
  const libxsmm_blasint xa = blas(ldb), xb = blas(lda), xc = blas(ldc);
  for_each_tile(
      m, n, k, accumulate, "float32",
      [&](std::int64_t nn, std::int64_t kk, float beta) {
        return libxsmm_smmdispatch(blas(nn), blas(m), blas(kk), &xa, &xb, &xc, &alpha, &beta, &flags, nullptr);
      },
      [&](libxsmm_smmfunction f, std::int64_t n0, std::int64_t k0) {
        f(b + k0 * ldb + n0, a + (a_transposed ? k0 * lda : k0), c + n0);
      });
}

void matmul_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                 const std::uint16_t* b_pairs, std::int64_t n_packed, std::int64_t col, float* c, std::int64_t ldc,
                 bool accumulate) {
  init_once();
  WEFT_CHECK(k % 2 == 0, "libxsmm: bf16 products take an even k, got " + std::to_string(k));
  const int flags = LIBXSMM_GEMM_FLAG_VNNI_A;
  const float alpha = 1.0f;
  const libxsmm_blasint xa = blas(n_packed), xb = blas(lda), xc = blas(ldc);
  for_each_tile(
      m, n, k, accumulate, "bf16",
      [&](std::int64_t nn, std::int64_t kk, float beta) {
        return libxsmm_bsmmdispatch(blas(nn), blas(m), blas(kk), &xa, &xb, &xc, &alpha, &beta, &flags, nullptr);
      },
      [&](libxsmm_bsmmfunction f, std::int64_t n0, std::int64_t k0) {
        const auto* pb = b_pairs + k0 * n_packed + 2 * (col + n0);  // pair row k0 / 2
        f(reinterpret_cast<const libxsmm_bfloat16*>(pb), reinterpret_cast<const libxsmm_bfloat16*>(a + k0), c + n0);
      });
}

void pack_bf16_pairs(std::int64_t k, std::int64_t n, const std::uint16_t* b, std::int64_t row_stride,
                     std::int64_t col_stride, std::uint16_t* out) {
  WEFT_CHECK(k % 2 == 0, "pack_bf16_pairs: k must be even, got " + std::to_string(k));
  if (col_stride == 1) {  // rows 2i and 2i + 1 side by side
    for (std::int64_t i = 0; i < k; i += 2) {
      const std::uint16_t* r0 = b + i * row_stride;
      const std::uint16_t* r1 = r0 + row_stride;
      std::uint16_t* o = out + i * n;
      std::int64_t j = 0;
      for (; j + 8 <= n; j += 8) {
        const __m128i even = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + j));
        const __m128i odd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + j));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * j), _mm_unpacklo_epi16(even, odd));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * j + 8), _mm_unpackhi_epi16(even, odd));
      }
      for (; j < n; ++j) {
        o[2 * j] = r0[j];
        o[2 * j + 1] = r1[j];
      }
    }
    return;
  }
  if (row_stride == 1 && col_stride % 2 == 0 && reinterpret_cast<std::uintptr_t>(b) % 4 == 0) {
    // Stored transposed: a pair is one 4-byte element of the [n, k / 2] matrix.
    transpose_32(n, k / 2, b, col_stride / 2, out);
    return;
  }
  for (std::int64_t i = 0; i < k; ++i)
    for (std::int64_t j = 0; j < n; ++j) out[(i / 2) * 2 * n + 2 * j + (i % 2)] = b[i * row_stride + j * col_stride];
}

void transpose_32(std::int64_t rows, std::int64_t cols, const void* in, std::int64_t ld, void* out) {
  transpose_blocked<4>(rows, cols, static_cast<const std::uint32_t*>(in), ld, static_cast<std::uint32_t*>(out),
                       transpose_4x4_32);
}

void transpose_16(std::int64_t rows, std::int64_t cols, const void* in, std::int64_t ld, void* out) {
  transpose_blocked<8>(rows, cols, static_cast<const std::uint16_t*>(in), ld, static_cast<std::uint16_t*>(out),
                       transpose_8x8_16);
}

}  // namespace weft::xsmm
