#include "weft/tensor/blas.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>

#include <string>
#include <vector>

#include "weft/util/error.h"

#ifndef WEFT_OPENBLAS_DIR
#define WEFT_OPENBLAS_DIR ""
#endif

namespace weft::blas {

namespace {

struct Library {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
  int (*thread_shutdown)() = nullptr;  // blas_thread_shutdown_: stops the workers
};

// The pthread build weft was built against (the directory CMake found), else whichever
// libopenblas the system's alternatives name.
void* open_library(std::string& why) {
  const std::string soname = "libopenblas.so.0", dir = WEFT_OPENBLAS_DIR;
  std::vector<std::string> paths = {soname};
  if (!dir.empty()) paths.insert(paths.begin(), dir + "/" + soname);
  for (const std::string& path : paths) {
    if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* error = ::dlerror();
    why = error ? error : path;
  }
  return nullptr;
}

template <class F>
F symbol(void* handle, const char* name) {
  void* p = ::dlsym(handle, name);
  if (!p) throw Error(std::string("OpenBLAS has no ") + name + ": weft needs Debian's libopenblas0-pthread");
  return reinterpret_cast<F>(p);
}

// Every signal blocked on this thread while it lives (the threads it starts inherit that).
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &before_);
  }
  ~SignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &before_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t before_;
};

Library load() {
  const SignalsBlocked blocked;  // OpenBLAS's workers start as it loads
  std::string why;
  void* handle = open_library(why);
  if (!handle) throw Error("cannot load OpenBLAS for a matrix product: " + why);
  Library lib;
  lib.sgemm = symbol<decltype(lib.sgemm)>(handle, "cblas_sgemm");
  lib.dgemm = symbol<decltype(lib.dgemm)>(handle, "cblas_dgemm");
  lib.set_num_threads = symbol<decltype(lib.set_num_threads)>(handle, "openblas_set_num_threads");
  lib.thread_shutdown = symbol<decltype(lib.thread_shutdown)>(handle, "blas_thread_shutdown_");
  lib.set_num_threads(1);
  lib.thread_shutdown();
  return lib;
}

const Library& library() {
  static const Library lib = load();  // (a failed load throws, and the next call tries again)
  return lib;
}

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

}  // namespace

void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  library().sgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(m), static_cast<blasint>(n),
                  static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                  static_cast<blasint>(ldc));
}

void dgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
           std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  library().dgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(m), static_cast<blasint>(n),
                  static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                  static_cast<blasint>(ldc));
}

void set_threads(int threads) { library().set_num_threads(threads); }

}  // namespace weft::blas
