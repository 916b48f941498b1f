// Compiled for the first x86-64 processors (-march=x86-64, CMakeLists.txt), whatever the
// build's baseline: the check below runs before main, before any code that needs more.
#include "weft/util/cpu.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "weft/util/error.h"

namespace weft::cpu {

namespace detail {
// cpu_build.cpp: what the compiler was told the processor has (the build's baseline, or this
// machine's for a native build), and its name.
extern const char* const kBuildFeatures[];
extern const char kBuildBaseline[];
}  // namespace detail

namespace {

enum Reg { kEax, kEbx, kEcx, kEdx };
// The registers the operating system must save for an instruction set to be usable (XCR0).
enum State : std::uint64_t { kNone = 0, kYmm = 0x6, kZmm = 0xe6, kTile = 0x60006 };
struct Feature {
  const char* name;
  unsigned leaf, subleaf;
  Reg reg;
  int bit;
  State state;
};
// /proc/cpuinfo's names, but sse3 and lzcnt (pni and abm there).
constexpr Feature kFeatures[] = {
    {"sse3", 1, 0, kEcx, 0, kNone},
    {"pclmulqdq", 1, 0, kEcx, 1, kNone},
    {"ssse3", 1, 0, kEcx, 9, kNone},
    {"fma", 1, 0, kEcx, 12, kYmm},
    {"cx16", 1, 0, kEcx, 13, kNone},
    {"sse4_1", 1, 0, kEcx, 19, kNone},
    {"sse4_2", 1, 0, kEcx, 20, kNone},
    {"movbe", 1, 0, kEcx, 22, kNone},
    {"popcnt", 1, 0, kEcx, 23, kNone},
    {"aes", 1, 0, kEcx, 25, kNone},
    {"avx", 1, 0, kEcx, 28, kYmm},
    {"f16c", 1, 0, kEcx, 29, kYmm},
    {"rdrand", 1, 0, kEcx, 30, kNone},
    {"bmi1", 7, 0, kEbx, 3, kNone},
    {"avx2", 7, 0, kEbx, 5, kYmm},
    {"bmi2", 7, 0, kEbx, 8, kNone},
    {"avx512f", 7, 0, kEbx, 16, kZmm},
    {"avx512dq", 7, 0, kEbx, 17, kZmm},
    {"adx", 7, 0, kEbx, 19, kNone},
    {"avx512ifma", 7, 0, kEbx, 21, kZmm},
    {"avx512cd", 7, 0, kEbx, 28, kZmm},
    {"sha_ni", 7, 0, kEbx, 29, kNone},
    {"avx512bw", 7, 0, kEbx, 30, kZmm},
    {"avx512vl", 7, 0, kEbx, 31, kZmm},
    {"avx512vbmi", 7, 0, kEcx, 1, kZmm},
    {"avx512_vbmi2", 7, 0, kEcx, 6, kZmm},
    {"gfni", 7, 0, kEcx, 8, kNone},
    {"vaes", 7, 0, kEcx, 9, kYmm},
    {"vpclmulqdq", 7, 0, kEcx, 10, kYmm},
    {"avx512_vnni", 7, 0, kEcx, 11, kZmm},
    {"avx512_bitalg", 7, 0, kEcx, 12, kZmm},
    {"avx512_vpopcntdq", 7, 0, kEcx, 14, kZmm},
    {"avx512_vp2intersect", 7, 0, kEdx, 8, kZmm},
    {"avx512_fp16", 7, 0, kEdx, 23, kZmm},
    {"amx_tile", 7, 0, kEdx, 24, kTile},
    {"avx_vnni", 7, 1, kEax, 4, kYmm},
    {"avx512_bf16", 7, 1, kEax, 5, kZmm},
    {"lahf_lm", 0x80000001, 0, kEcx, 0, kNone},
    {"lzcnt", 0x80000001, 0, kEcx, 5, kNone},
    {"sse4a", 0x80000001, 0, kEcx, 6, kNone},
};

// The x86-64 micro-architecture levels, each the one before and these.
constexpr const char* kLevelV2[] = {"cx16",  "lahf_lm", "popcnt", "sse3",
                                    "ssse3", "sse4_1",  "sse4_2", nullptr};
constexpr const char* kLevelV3[] = {"avx", "avx2",  "bmi1",  "bmi2", "f16c",
                                    "fma", "lzcnt", "movbe", nullptr};
constexpr const char* kLevelV4[] = {"avx512f",  "avx512bw", "avx512cd",
                                    "avx512dq", "avx512vl", nullptr};

const Feature* find(const char* name) {
  for (const Feature& f : kFeatures)
    if (std::strcmp(f.name, name) == 0) return &f;
  return nullptr;
}

// CPUID's leaves 1, 7.0, 7.1 and 0x80000001, and XCR0: read once.
struct Registers {
  unsigned leaf1[4] = {}, leaf7[4] = {}, leaf7_1[4] = {}, ext1[4] = {};
  std::uint64_t xcr0 = 0;
};
const Registers& registers() {
  static const Registers r = [] {
    Registers out;
    const auto max =
        static_cast<unsigned>(__get_cpuid_max(0, nullptr));  // (int in clang's cpuid.h)
    if (max >= 1) __cpuid(1, out.leaf1[0], out.leaf1[1], out.leaf1[2], out.leaf1[3]);
    if (max >= 7) {
      __cpuid_count(7, 0, out.leaf7[0], out.leaf7[1], out.leaf7[2], out.leaf7[3]);
      if (out.leaf7[0] >= 1)
        __cpuid_count(7, 1, out.leaf7_1[0], out.leaf7_1[1], out.leaf7_1[2], out.leaf7_1[3]);
    }
    if (static_cast<unsigned>(__get_cpuid_max(0x80000000, nullptr)) >= 0x80000001u)
      __cpuid(0x80000001, out.ext1[0], out.ext1[1], out.ext1[2], out.ext1[3]);
    if (out.leaf1[2] & (1u << 27)) {  // OSXSAVE: XGETBV reads which registers the OS saves
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      out.xcr0 = (static_cast<std::uint64_t>(hi) << 32) | lo;
    }
    return out;
  }();
  return r;
}

bool has(const Feature& f) {
  const Registers& r = registers();
  const unsigned* regs = f.leaf == 1   ? r.leaf1
                         : f.leaf == 7 ? (f.subleaf == 0 ? r.leaf7 : r.leaf7_1)
                                       : r.ext1;
  return (regs[f.reg] >> f.bit & 1u) && (r.xcr0 & f.state) == f.state;
}

bool has_all(const char* const* names) {
  for (; *names; ++names)
    if (const Feature* f = find(*names); f == nullptr || !has(*f)) return false;
  return true;
}

// The instruction sets of a level ("x86-64-v3": v2's and v3's), or null for another name.
const char* const* const* level_sets(const char* name) {
  static constexpr const char* const* v1[] = {nullptr};
  static constexpr const char* const* v2[] = {kLevelV2, nullptr};
  static constexpr const char* const* v3[] = {kLevelV2, kLevelV3, nullptr};
  static constexpr const char* const* v4[] = {kLevelV2, kLevelV3, kLevelV4, nullptr};
  if (std::strcmp(name, "x86-64") == 0) return v1;
  if (std::strcmp(name, "x86-64-v2") == 0) return v2;
  if (std::strcmp(name, "x86-64-v3") == 0) return v3;
  if (std::strcmp(name, "x86-64-v4") == 0) return v4;
  return nullptr;
}

// What the build's baseline and WEFT_CPU_BASELINE need that this processor lacks, each once,
// by the feature table's names; `unknown` holds the first item of WEFT_CPU_BASELINE that names
// no level or instruction set. Plain arrays and this file's own functions only: it runs before
// main, where code compiled for more than the first x86-64 processors must not run.
struct Missing {
  const char* names[sizeof kFeatures / sizeof kFeatures[0]] = {};
  int count = 0;
  char unknown[48] = {};
};
void add_missing(Missing& out, const char* name) {
  const Feature* f = find(name);
  if (f == nullptr || has(*f)) return;
  for (int i = 0; i < out.count; ++i)
    if (out.names[i] == f->name) return;
  out.names[out.count++] = f->name;
}
// Adds a level's instruction sets; false when `name` is no level.
bool add_missing_level(Missing& out, const char* name) {
  const auto* sets = level_sets(name);
  if (sets == nullptr) return false;
  for (; *sets; ++sets)
    for (const char* const* f = *sets; *f; ++f) add_missing(out, *f);
  return true;
}
Missing find_missing() {
  Missing out;
  for (const char* const* f = detail::kBuildFeatures; *f; ++f) add_missing(out, *f);
  add_missing_level(out,
                    detail::kBuildBaseline);  // (the compiler names no macro for some of a level's)
  const char* p = std::getenv("WEFT_CPU_BASELINE");
  while (p != nullptr && *p != '\0') {
    const char* end = std::strchr(p, ',');
    const std::size_t n = end ? static_cast<std::size_t>(end - p) : std::strlen(p);
    char item[48] = {};
    std::memcpy(item, p, n < sizeof item - 1 ? n : sizeof item - 1);
    p = end ? end + 1 : nullptr;
    const bool fits = n < sizeof item - 1;
    if (n == 0 || (fits && add_missing_level(out, item))) continue;
    if (fits && find(item) != nullptr) {
      add_missing(out, item);
    } else if (out.unknown[0] == '\0') {
      for (std::size_t i = 0; i < sizeof item && item[i]; ++i)  // quoted on one line
        out.unknown[i] = item[i] >= 0x20 && item[i] < 0x7f ? item[i] : '?';
    }
  }
  return out;
}

constexpr const char* kBaselineHelp =
    "(x86-64-v2, x86-64-v3, x86-64-v4, or an instruction set as /proc/cpuinfo names it: avx2, "
    "avx512f, ...)";

// WEFT_CPU_ISA: oneDNN's name for the cap, and the level it allows weft's loops.
struct Cap {
  std::string name;
  Level level;
};
Cap read_cap() {
  const char* v = std::getenv("WEFT_CPU_ISA");
  if (v == nullptr || *v == '\0') return {"", Level::kAvx2};
  const std::string s = v;
  if (s == "sse41") return {s, Level::kBaseline};
  if (s == "avx2" || s == "avx512_core" || s == "avx512_core_vnni" || s == "avx512_core_bf16")
    return {s, Level::kAvx2};
  throw ConfigError("WEFT_CPU_ISA: unknown instruction set '" + s +
                    "' (sse41, avx2, avx512_core, avx512_core_vnni or avx512_core_bf16)");
}

std::atomic<int> g_loop_level{-1};

}  // namespace

const char* level_name(Level level) {
  switch (level) {
    case Level::kBaseline:
      return "baseline";
    case Level::kAvx2:
      return "avx2";
  }
  return "?";
}

bool has(const char* feature) {
  const Feature* f = find(feature);
  return f != nullptr && has(*f);
}

Level processor_level() {
  static const Level level = has_all(kLevelV3) ? Level::kAvx2 : Level::kBaseline;
  return level;
}

Level loop_level() {
  int level = g_loop_level.load(std::memory_order_relaxed);
  if (level < 0) {
    level = static_cast<int>(std::min(processor_level(), read_cap().level));
    g_loop_level.store(level, std::memory_order_relaxed);
  }
  return static_cast<Level>(level);
}

void reload() { g_loop_level.store(-1, std::memory_order_relaxed); }

std::string isa_cap() { return read_cap().name; }

const char* build_baseline() { return detail::kBuildBaseline; }

std::vector<std::string> missing_baseline() {
  const Missing m = find_missing();
  if (m.unknown[0] != '\0')
    throw ConfigError(std::string("WEFT_CPU_BASELINE: unknown level or instruction set '") +
                      m.unknown + "' " + kBaselineHelp);
  return std::vector<std::string>(m.names, m.names + m.count);
}

}  // namespace weft::cpu

// Referenced by every program that links weft's util layer (CMakeLists.txt: --undefined), so
// that the check below is in each of them.
extern "C" void weft_cpu_baseline_checked() {}

namespace {

// Before main and before every other constructor of the program (priority 101, the first an
// application may use): a processor without the build's baseline stops here with one line.
__attribute__((constructor(101))) void check_baseline_before_main() {
  const weft::cpu::Missing m = weft::cpu::find_missing();
  if (m.unknown[0] != '\0') {
    std::fprintf(stderr, "error: WEFT_CPU_BASELINE: unknown level or instruction set '%s' %s\n",
                 m.unknown, weft::cpu::kBaselineHelp);
    std::_Exit(2);
  }
  if (m.count == 0) return;
  std::fputs("error: this processor lacks ", stderr);
  for (int i = 0; i < m.count; ++i) std::fprintf(stderr, "%s%s", i ? ", " : "", m.names[i]);
  const char* extra = std::getenv("WEFT_CPU_BASELINE");
  std::fprintf(
      stderr,
      ", which this build of weft needs (baseline %s%s%s); build weft on it, or for an older "
      "baseline (cmake -DWEFT_BASELINE=x86-64)\n",
      weft::cpu::build_baseline(), extra ? ", WEFT_CPU_BASELINE " : "", extra ? extra : "");
  std::_Exit(2);
}

}  // namespace
