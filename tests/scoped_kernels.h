// WEFT_KERNELS set for one scope: the kernel table re-reads it, and again the previous
// value when the scope ends; and a test body run in each bf16 mode.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include "weft/tensor/kernel_table.h"
#include "weft/tensor/onednn.h"

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

// fn(native) with WEFT_KERNELS=bf16=emulated (native false), then bf16=native (true) where
// the processor has bf16 instructions.
template <class Fn>
void for_each_bf16_mode(const Fn& fn) {
  for (const bool native : {false, true}) {
    if (native && !onednn::has_bf16_instructions()) continue;
    ScopedKernels use(native ? "bf16=native" : "bf16=emulated");
    fn(native);
  }
}

}  // namespace weft::testing
