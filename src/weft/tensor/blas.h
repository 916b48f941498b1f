// OpenBLAS's products (Debian's pthread build), loaded the first time a product asks for it
// rather than as every weft program starts: its 14,000 symbol relocations (the kernel tables
// of every processor it supports) and its workers' start made `weft --version` take 44 ms of
// processor time, 24-32 ms without it (2 cores, AMD EPYC), and most of weft's processes
// (launchers, front ends, the simulator, the planner, ranks whose products all go to oneDNN
// or libxsmm) never multiply through it.
//
// The library's own worker threads are stopped as it loads and it runs single-threaded
// (weft splits products on its own pool, thread_pool.h); they start with every signal
// blocked, so that none of them can take a signal meant for the program in between.
// A library that cannot be loaded is an Error naming it, at the first product that needs it.
#pragma once

#include <cstdint>

namespace weft::blas {

// C = alpha op(A) op(B) + beta C, every matrix row-major (cblas_sgemm's contract): op(A) is
// m x k, op(B) k x n, C m x n.
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
void dgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
           std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc);

// OpenBLAS's own thread count for the products that follow (1 unless changed: benchmarks set
// it to compare with the library's threading).
void set_threads(int threads);

}  // namespace weft::blas
