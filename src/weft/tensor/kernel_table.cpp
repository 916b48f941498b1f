#include "weft/tensor/kernel_table.h"

#include <atomic>
#include <mutex>
#include <sstream>

#include "weft/tensor/onednn.h"
#include "weft/util/env.h"
#include "weft/util/error.h"

namespace weft::kernels {

namespace {

// 0 = auto (the measured rule), else the forced choice.
struct Overrides {
  int gemm = 0;  // 1 openblas, 2 onednn
  int conv = 0;  // 1 im2col, 2 onednn
  int bf16 = 0;  // 1 emulated, 2 native
  int int8 = 0;  // 1 emulated, 2 native
};

int pick(const std::string& key, const std::string& value, const char* first, const char* second) {
  if (value == "auto") return 0;
  if (value == first) return 1;
  if (value == second) return 2;
  throw ConfigError("WEFT_KERNELS: " + key + "=" + value + " is not auto, " + first + " or " + second);
}

Overrides parse(const std::string& text) {
  Overrides o;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw ConfigError("WEFT_KERNELS: '" + item + "' is not KIND=CHOICE (gemm, conv, bf16 or int8)");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "gemm") o.gemm = pick(key, value, "openblas", "onednn");
    else if (key == "conv") o.conv = pick(key, value, "im2col", "onednn");
    else if (key == "bf16") o.bf16 = pick(key, value, "emulated", "native");
    else if (key == "int8") o.int8 = pick(key, value, "emulated", "native");
    else throw ConfigError("WEFT_KERNELS: unknown kernel kind '" + key + "' (gemm, conv, bf16 or int8)");
  }
  if (o.bf16 == 2 && !onednn::has_bf16_instructions())
    throw ConfigError("WEFT_KERNELS: bf16=native needs AVX512-BF16, and this processor runs " +
                      onednn::isa_name());
  if (o.int8 == 2 && !onednn::has_int8_instructions())
    throw ConfigError("WEFT_KERNELS: int8=native needs AVX512-VNNI, and this processor runs " + onednn::isa_name());
  return o;
}

std::mutex g_mu;
Overrides g_overrides;
std::atomic<bool> g_loaded{false};

const Overrides& overrides() {
  if (!g_loaded.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_loaded.load()) {
      g_overrides = parse(env_string("WEFT_KERNELS").value_or(""));
      g_loaded.store(true, std::memory_order_release);
    }
  }
  return g_overrides;
}

}  // namespace

Gemm gemm_f32(std::int64_t m, std::int64_t n, std::int64_t k) {
  (void)m;
  const int forced = overrides().gemm;
  if (forced != 0) return forced == 1 ? Gemm::OpenBlas : Gemm::OneDnn;
  return k >= 128 && n >= 128 ? Gemm::OneDnn : Gemm::OpenBlas;
}

bool bf16_native() {
  const int forced = overrides().bf16;
  if (forced != 0) return forced == 2;
  static const bool native = onednn::has_bf16_instructions();
  return native;
}

bool bf16_native(std::int64_t m, std::int64_t n, std::int64_t k) {
  if (!bf16_native()) return false;
  return overrides().bf16 == 2 || m * n * k >= (std::int64_t{1} << 20);
}

bool int8_native() {
  const int forced = overrides().int8;
  if (forced != 0) return forced == 2;
  static const bool native = onednn::has_int8_instructions();
  return native;
}

Conv conv_forward() { return overrides().conv == 1 ? Conv::Im2col : Conv::OneDnn; }

Conv conv_backward_data(std::int64_t in_channels) {
  const int forced = overrides().conv;
  if (forced != 0) return forced == 1 ? Conv::Im2col : Conv::OneDnn;
  return in_channels >= 8 ? Conv::OneDnn : Conv::Im2col;
}

std::string summary() {
  const Overrides& o = overrides();
  auto gemm = o.gemm == 1 ? "openblas" : o.gemm == 2 ? "onednn" : "onednn (k, n >= 128) / openblas";
  auto conv = o.conv == 1 ? "im2col+openblas" : "onednn";
  auto bf16 = !bf16_native()       ? "emulated (rounded operands, fp32 products)"
              : o.bf16 == 2       ? "native (onednn)"
                                  : "native (onednn) from 2^20 multiply-adds";
  auto int8 = int8_native() ? "native (onednn, vnni)" : "emulated (widened weights, fp32 products)";
  return "kernels: " + onednn::isa_name() + "; gemm " + gemm + "; conv " + conv + "; bf16 " + bf16 + "; int8 " + int8;
}

void reload() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_loaded.store(false);
}

}  // namespace weft::kernels
