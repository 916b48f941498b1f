#include "weft/tensor/kernel_table.h"

#include <atomic>
#include <initializer_list>
#include <mutex>
#include <sstream>

#include "weft/tensor/onednn.h"
#include "weft/tensor/xsmm.h"
#include "weft/util/cpu.h"
#include "weft/util/env.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"

namespace weft::kernels {

namespace {

// 0 = auto (the measured rule), else the forced choice.
struct Overrides {
  int gemm = 0;  // 1 openblas, 2 onednn, 3 libxsmm
  int conv = 0;  // 1 im2col, 2 onednn
  int bf16 = 0;  // 1 emulated, 2 native
  int int8 = 0;  // 1 emulated, 2 native
};

// The index of `value` among the choices (1 for the first), 0 for auto.
int pick(const std::string& key, const std::string& value, std::initializer_list<const char*> choices) {
  if (value == "auto") return 0;
  int index = 1;
  std::string names = "auto";
  for (const char* c : choices) {
    if (value == c) return index;
    names += (index == static_cast<int>(choices.size()) ? " or " : ", ") + std::string(c);
    ++index;
  }
  throw ConfigError("WEFT_KERNELS: " + key + "=" + value + " is not " + names);
}

Overrides parse(const std::string& text) {
  Overrides o;
  const auto items = split_list(text, ',', 64);
  if (!items) throw ConfigError("WEFT_KERNELS: '" + text + "' has more than 64 items");
  for (std::string_view item : *items) {
    if (item.empty()) continue;
    const auto pair = split_pair(item, '=');
    if (!pair)
      throw ConfigError("WEFT_KERNELS: '" + std::string(item) + "' is not KIND=CHOICE (gemm, conv, bf16 or int8)");
    const std::string key(pair->first), value(pair->second);
    if (key == "gemm") o.gemm = pick(key, value, {"openblas", "onednn", "libxsmm"});
    else if (key == "conv") o.conv = pick(key, value, {"im2col", "onednn"});
    else if (key == "bf16") o.bf16 = pick(key, value, {"emulated", "native"});
    else if (key == "int8") o.int8 = pick(key, value, {"emulated", "native"});
    else throw ConfigError("WEFT_KERNELS: unknown kernel kind '" + key + "' (gemm, conv, bf16 or int8)");
  }
  if (o.bf16 == 2 && !onednn::has_bf16_instructions())
    throw ConfigError("WEFT_KERNELS: bf16=native needs AVX512-BF16, and this processor runs " +
                      onednn::isa_name());
  if (o.gemm == 3 && !xsmm::has_f32_kernels())
    throw ConfigError("WEFT_KERNELS: gemm=libxsmm needs AVX2 or AVX-512, and this processor runs " +
                      onednn::isa_name());
  if (o.int8 == 2 && !onednn::has_int8_instructions())
    throw ConfigError("WEFT_KERNELS: int8=native needs AVX512-VNNI or AVX-VNNI, and this processor runs " + onednn::isa_name());
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
  if (forced != 0) return forced == 1 ? Gemm::OpenBlas : forced == 2 ? Gemm::OneDnn : Gemm::Xsmm;
  if (k >= 128 && n >= 128) return Gemm::OneDnn;
  return xsmm::has_f32_kernels() ? Gemm::Xsmm : Gemm::OpenBlas;
}

Gemm gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, bool a_transposed) {
  const int forced = overrides().gemm;
  if (k % 2 != 0 || !xsmm::has_bf16_kernels() || (forced != 0 && forced != 3)) return Gemm::OneDnn;
  if (forced == 3) return Gemm::Xsmm;
  // libxsmm packs b (and copies a transposed a) for each product: past 2^22 multiply-adds
  // oneDNN's kernels run as fast or faster, and past k = 512 a transposed a costs more to
  // copy than oneDNN's slower product of it.
  return m * n * k < (std::int64_t{1} << 22) && !(a_transposed && k > 512) ? Gemm::Xsmm : Gemm::OneDnn;
}

bool bf16_native() {
  const int forced = overrides().bf16;
  if (forced != 0) return forced == 2;
  static const bool native = onednn::has_bf16_instructions();
  return native;
}

bool bf16_native(std::int64_t m, std::int64_t n, std::int64_t k) {
  if (!bf16_native()) return false;
  return overrides().bf16 == 2 || gemm_bf16(m, n, k, false) == Gemm::Xsmm || m * n * k >= (std::int64_t{1} << 20);
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
  auto gemm = o.gemm == 1                  ? "openblas"
              : o.gemm == 2                ? "onednn"
              : o.gemm == 3                ? "libxsmm"
              : xsmm::has_f32_kernels()    ? "onednn (k, n >= 128) / libxsmm"
                                           : "onednn (k, n >= 128) / openblas";
  auto conv = o.conv == 1 ? "im2col+openblas" : "onednn";
  const bool small_on_xsmm = gemm_bf16(2, 2, 2, false) == Gemm::Xsmm;  // (libxsmm present, not forced off)
  auto bf16 = !bf16_native()                ? "emulated (rounded operands, fp32 products)"
              : small_on_xsmm && o.gemm == 3 ? "native (libxsmm; onednn for an odd k)"
              : small_on_xsmm                ? "native (libxsmm below 2^22 multiply-adds, onednn above)"
              : o.bf16 == 2                  ? "native (onednn)"
                                             : "native (onednn) from 2^20 multiply-adds";
  auto int8 = int8_native() ? "native (weft's vnni panels)" : "emulated (widened weights, fp32 products)";
  const std::string loops = std::string(cpu::level_name(cpu::loop_level())) + " (built for " + cpu::build_baseline() + ")";
  return "kernels: " + onednn::isa_name() + "; loops " + loops + "; gemm " + gemm + "; conv " + conv + "; bf16 " + bf16 +
         "; int8 " + int8;
}

void reload() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_loaded.store(false);
}

}  // namespace weft::kernels
