// WEFT_KERNELS set for one scope: the kernel table re-reads it, and again the previous
// value when the scope ends.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include "weft/tensor/kernel_table.h"

namespace weft::testing {

class ScopedKernels {
 public:
  explicit ScopedKernels(const std::string& choices) {
    if (const char* v = std::getenv("WEFT_KERNELS")) previous_ = v;
    ::setenv("WEFT_KERNELS", choices.c_str(), 1);
    kernels::reload();
  }
  ~ScopedKernels() {
    if (previous_) ::setenv("WEFT_KERNELS", previous_->c_str(), 1);
    else ::unsetenv("WEFT_KERNELS");
    kernels::reload();
  }
  ScopedKernels(const ScopedKernels&) = delete;
  ScopedKernels& operator=(const ScopedKernels&) = delete;

 private:
  std::optional<std::string> previous_;
};

}  // namespace weft::testing
